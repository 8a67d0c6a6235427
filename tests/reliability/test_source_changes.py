"""Fault: source schema changes under running views (both runners, a real Postgres).

A change to a column or table a view does not read leaves it running and equal to its query; a
dropped, renamed or retyped column it reads, or its dropped table, puts that view (only that
one) in the ``error`` phase with a message naming the table, the column and the fix, also after
the engine is reopened; the broken view can still be dropped.
"""

from __future__ import annotations

import psycopg
import pytest

from engine import Engine
from tests.e2e.test_engine_oracle import diff_rows
from tests.reliability.runners import RUNNERS, use_runner

VIEWS = {
    "amounts": "SELECT customer, sum(amount) AS s FROM orders GROUP BY customer",
    "counts": "SELECT customer, count(*) AS n FROM orders GROUP BY customer",
    "statuses": "SELECT id, status FROM orders",
    "named": "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer",
}


def _setup(conn: psycopg.Connection) -> None:
    conn.execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer int, amount numeric(10,2), "
        "status text, extra int)"
    )
    conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
    for t in ("orders", "customers"):
        conn.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    conn.execute(
        "INSERT INTO orders SELECT i, i % 4, i * 1.5, 'open', i FROM generate_series(1, 40) i"
    )
    conn.execute("INSERT INTO customers SELECT i, 'c' || i FROM generate_series(0, 3) i")


def _write(conn: psycopg.Connection, start: int) -> None:
    conn.execute(
        "INSERT INTO orders (id, customer, amount) SELECT i, i %% 4, i FROM generate_series(%s::int, %s::int) i",
        (start, start + 9),
    )
    conn.execute("UPDATE orders SET amount = amount + 1 WHERE id % 3 = 0")
    conn.execute("DELETE FROM orders WHERE id % 7 = 0 AND id > 40")


def _phases(eng: Engine) -> dict[str, tuple[str, str | None]]:
    return {s.name: (s.phase, s.last_error) for s in eng.list_views()}


@pytest.mark.parametrize("runner", RUNNERS)
def test_schema_changes_break_only_the_views_that_read_them(pg_dsn, tmp_path, request, runner):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _setup(conn)
        state = tmp_path / "state"
        with Engine(pg_dsn, state, runner=use_runner(request, runner)) as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)

            # changes to what no view reads: everything keeps running
            conn.execute("ALTER TABLE orders ADD COLUMN note text")
            conn.execute("ALTER TABLE orders ALTER COLUMN extra TYPE bigint")
            conn.execute("ALTER TABLE orders RENAME COLUMN extra TO extra2")
            _write(conn, 100)
            conn.execute("ALTER TABLE orders DROP COLUMN extra2")
            _write(conn, 200)
            eng.catch_up()
            assert {p for p, _ in _phases(eng).values()} == {"running"}
            for name, sql in VIEWS.items():
                assert diff_rows(conn, name, sql) == (0, 0), name

            # a column one view reads is dropped (no change follows it)
            conn.execute("ALTER TABLE orders DROP COLUMN status")
            eng.catch_up()
            phase, error = _phases(eng)["statuses"]
            assert phase == "error"
            assert "column status of source table public.orders was dropped" in error
            assert "drop the view and create it again" in error
            _write(conn, 300)
            eng.catch_up()
            for name in ("amounts", "counts", "named"):
                assert _phases(eng)[name][0] == "running"
                assert diff_rows(conn, name, VIEWS[name]) == (0, 0), name

            # a column another view reads changes type
            conn.execute("ALTER TABLE orders ALTER COLUMN amount TYPE numeric(12,3)")
            _write(conn, 400)
            eng.catch_up()
            phase, error = _phases(eng)["amounts"]
            assert phase == "error"
            assert "column amount of source table public.orders changed type" in error
            assert "numeric(10,2) to numeric(12,3)" in error
            assert diff_rows(conn, "counts", VIEWS["counts"]) == (0, 0)

        # reopened: the broken views stay broken, the others run
        _write(conn, 500)
        with Engine(pg_dsn, state, runner=use_runner(request, runner)) as eng:
            eng.catch_up()
            phases = _phases(eng)
            assert phases["statuses"][0] == phases["amounts"][0] == "error"
            assert phases["counts"][0] == phases["named"][0] == "running"
            assert diff_rows(conn, "counts", VIEWS["counts"]) == (0, 0)
            assert diff_rows(conn, "named", VIEWS["named"]) == (0, 0)

            # a source table is dropped
            conn.execute("DROP TABLE customers")
            eng.catch_up()
            phase, error = _phases(eng)["named"]
            assert phase == "error" and "source table public.customers was dropped" in error
            eng.drop_view("statuses")
            eng.drop_view("named")
            assert set(_phases(eng)) == {"amounts", "counts"}
            _write(conn, 600)
            eng.catch_up()
            assert diff_rows(conn, "counts", VIEWS["counts"]) == (0, 0)


def test_a_dropped_key_a_view_relies_on_breaks_it(pg_dsn, tmp_path):
    """A top-k over a table with a primary key writes its rows' entries unread (its input holds
    no row twice): dropping the key puts that view in error, naming the key; a view that does
    not rely on it keeps running. Until then both equal their queries."""
    top = (
        "SELECT * FROM (SELECT id, customer, amount, row_number() OVER (PARTITION BY customer "
        "ORDER BY amount DESC) AS rn FROM orders) x WHERE rn <= 2"
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _setup(conn)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("top", top)
            eng.create_view("counts", VIEWS["counts"])
            assert "unique_rows" in eng.explain(top)
            for start in (100, 200):
                _write(conn, start)
                eng.catch_up()
                assert diff_rows(conn, "top", top) == (0, 0)
            conn.execute("ALTER TABLE orders DROP CONSTRAINT orders_pkey")
            _write(conn, 300)
            eng.catch_up()
            phase, error = _phases(eng)["top"]
            assert phase == "error"
            assert "the unique key (id) of source table public.orders was dropped" in error
            assert "drop the view and create it again" in error
            assert _phases(eng)["counts"][0] == "running"
            assert diff_rows(conn, "counts", VIEWS["counts"]) == (0, 0)
