"""End to end through the public Engine API against a real Postgres (runner="local").

The oracle: after every batch of random inserts/updates/deletes (multi-statement transactions,
rolled-back ones, NULLs, duplicate values, key changes), ``catch_up()`` and the view's result
table must equal the view's query run by Postgres, as multisets (EXCEPT ALL both ways).
"""

from __future__ import annotations

import random
import threading

import psycopg
import pytest

from engine.engine import Engine, ViewStatus, split_view_name
from engine.errors import UnsupportedSQL, ViewError

SCHEMA_SQL = """
CREATE TABLE customers (id int PRIMARY KEY, name text, segment text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2), status text);
ALTER TABLE customers REPLICA IDENTITY FULL;
ALTER TABLE orders REPLICA IDENTITY FULL;
"""

VIEWS = {
    "revenue_by_segment": "SELECT c.segment, sum(o.amount) AS total, count(*) AS n, max(o.amount) AS top "
    "FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.segment",
    "reporting.orders_with_names": "SELECT o.id, o.amount, c.name FROM orders o LEFT JOIN customers c "
    "ON o.customer_id = c.id",
    "top_orders": "SELECT id, amount FROM orders WHERE amount IS NOT NULL ORDER BY amount DESC, id LIMIT 5",
    "idle_customers": "SELECT c.id, c.name FROM customers c WHERE NOT EXISTS "
    "(SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'open')",
    "statuses": "SELECT status, count(*) FROM orders GROUP BY status",
    "amounts": "SELECT amount FROM orders WHERE customer_id < 5",  # a multiset: duplicates kept
}


def diff_rows(conn: psycopg.Connection, view: str, sql: str) -> tuple[int, int]:
    # the view's result table, quoted (view names may hold quotes, spaces, mixed case)
    target = psycopg.sql.Identifier(*split_view_name(view)).as_string(conn)
    missing = conn.execute(
        f"SELECT count(*) FROM (({sql}) EXCEPT ALL SELECT * FROM {target}) d"
    ).fetchone()[0]
    extra = conn.execute(
        f"SELECT count(*) FROM (SELECT * FROM {target} EXCEPT ALL ({sql})) d"
    ).fetchone()[0]
    return missing, extra


def random_transaction(conn: psycopg.Connection, rng: random.Random, next_id: list[int]) -> None:
    statuses = ["open", "paid", None]
    with conn.transaction():
        for _ in range(rng.randint(1, 6)):
            x = rng.random()
            if x < 0.45:
                next_id[0] += 1
                amount = rng.choice([None, 1, 5, 5, 12.5, 99.99])
                conn.execute(
                    "INSERT INTO orders VALUES (%s, %s, %s, %s)",
                    (next_id[0], rng.choice([None, *range(8)]), amount, rng.choice(statuses)),
                )
            elif x < 0.7:
                conn.execute(
                    "UPDATE orders SET amount = %s, customer_id = %s WHERE id = (SELECT id FROM orders ORDER BY random() LIMIT 1)",
                    (rng.choice([1, 5, 7, None]), rng.choice([None, *range(8)])),
                )
            elif x < 0.85:
                conn.execute(
                    "DELETE FROM orders WHERE id = (SELECT id FROM orders ORDER BY random() LIMIT 1)"
                )
            else:
                conn.execute(
                    "UPDATE customers SET segment = %s WHERE id = %s",
                    (rng.choice(["a", "b", None]), rng.randrange(8)),
                )


def setup_tables(conn: psycopg.Connection, rng: random.Random) -> list[int]:
    conn.execute(SCHEMA_SQL)
    for i in range(8):
        conn.execute(
            "INSERT INTO customers VALUES (%s, %s, %s)", (i, f"c{i}", rng.choice(["a", "b", None]))
        )
    for i in range(40):
        conn.execute(
            "INSERT INTO orders VALUES (%s, %s, %s, %s)",
            (
                i,
                rng.choice([None, *range(8)]),
                rng.choice([None, 1, 5, 10]),
                rng.choice(["open", "paid"]),
            ),
        )
    return [40]


def test_views_equal_their_queries_after_every_batch(pg_dsn, tmp_path):
    rng = random.Random(7)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
            for name, sql in VIEWS.items():
                assert diff_rows(conn, name, sql) == (0, 0), f"{name} after population"
            for batch in range(12):
                for _ in range(rng.randint(1, 5)):
                    random_transaction(conn, rng, next_id)
                try:  # a rolled-back transaction must leave no trace
                    with conn.transaction():
                        conn.execute("DELETE FROM orders")
                        raise RuntimeError("roll back")
                except RuntimeError:
                    pass
                eng.catch_up(timeout_s=60)
                for name, sql in VIEWS.items():
                    assert diff_rows(conn, name, sql) == (0, 0), f"{name} after batch {batch}"
            statuses = {s.name: s for s in eng.list_views()}
            assert set(statuses) == set(VIEWS)
            assert all(
                isinstance(s, ViewStatus) and s.phase == "running" for s in statuses.values()
            )
            groups = conn.execute(
                "SELECT count(*) FROM (SELECT status FROM orders GROUP BY status) g"
            )
            assert statuses["statuses"].rows == groups.fetchone()[0]


def test_restart_resumes_and_last_drop_removes_the_slot(pg_dsn, tmp_path):
    rng = random.Random(3)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        sql = VIEWS["revenue_by_segment"]
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("rev", sql)
            for _ in range(5):
                random_transaction(conn, rng, next_id)
            eng.catch_up()
        for _ in range(5):  # changes while no engine runs
            random_transaction(conn, rng, next_id)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.catch_up()
            assert diff_rows(conn, "rev", sql) == (0, 0)
            eng.drop_view("rev")
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0
        assert conn.execute("SELECT to_regclass('public.rev')").fetchone()[0] is None


def test_writers_active_during_population(pg_dsn, tmp_path):
    rng = random.Random(11)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        setup_tables(conn, rng)
    stop = threading.Event()

    def writer() -> None:
        wrng = random.Random(5)
        ids = [10_000]
        with psycopg.connect(pg_dsn, autocommit=True) as wconn:
            while not stop.is_set():
                random_transaction(wconn, wrng, ids)

    t = threading.Thread(target=writer)
    t.start()
    try:
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name in ("revenue_by_segment", "amounts", "idle_customers"):
                eng.create_view(name, VIEWS[name])
            stop.set()
            t.join()
            eng.catch_up()
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                for name in ("revenue_by_segment", "amounts", "idle_customers"):
                    assert diff_rows(conn, name, VIEWS[name]) == (0, 0), name
    finally:
        stop.set()
        t.join()


def test_bad_input_is_refused_clearly_and_leaves_nothing(pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE plain (id int PRIMARY KEY, v int)")
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            with pytest.raises(ViewError, match=r"ALTER TABLE public\.plain REPLICA IDENTITY FULL"):
                eng.create_view("v", "SELECT v FROM plain")
            with pytest.raises(UnsupportedSQL, match="unknown table nope"):
                eng.create_view("v", "SELECT * FROM nope")
            assert eng.list_views() == []
            assert conn.execute("SELECT to_regclass('public.v')").fetchone()[0] is None
