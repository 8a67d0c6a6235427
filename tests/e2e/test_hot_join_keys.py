"""Joins on a low-cardinality key against a real Postgres: hundreds of rows under each join key
make the columnar inner join keep them as row entries (``columnar.hot_rows``) from the first
population chunk on. After every batch of random inserts, updates (rows moving between keys,
the few-rows side renamed, so a hot side is read whole), deletes and keys appearing and going,
each view's result table equals its query run by Postgres (multisets)."""

from __future__ import annotations

import random

import psycopg
import pytest

from engine.dataflow.columnar import hot_rows
from engine.engine import Engine
from tests.e2e.test_engine_oracle import diff_rows

SCHEMA_SQL = """
CREATE TABLE nations (id int PRIMARY KEY, name text, zone text);
CREATE TABLE customers (
    id int PRIMARY KEY, nation_id int, name text, balance numeric(12,2), score float8
);
ALTER TABLE nations REPLICA IDENTITY FULL;
ALTER TABLE customers REPLICA IDENTITY FULL;
"""

VIEWS = {
    "customers_named": "SELECT n.name AS nation, c.id, c.name, c.balance, c.score "
    "FROM customers c JOIN nations n ON c.nation_id = n.id",
    "balance_by_zone": "SELECT n.zone, count(*) AS n, sum(c.balance) AS total "
    "FROM customers c JOIN nations n ON c.nation_id = n.id GROUP BY n.zone",
    "scores": "SELECT n.zone, c.score FROM nations n JOIN customers c ON n.id = c.nation_id",
}

_SCORES = [None, 0.0, -0.0, 1.5, float("nan"), 2.25]


def _customer(rng: random.Random, i: int) -> tuple:
    nation = rng.choice([None, 0, 1, 1, 2, 3, 4])
    name = rng.choice(["ann", "bob", "o'neil", "zoë", "", None])
    return (i, nation, name, rng.choice([None, 0, 1.5, 1.50, 99.99]), rng.choice(_SCORES))


def _batch(conn: psycopg.Connection, rng: random.Random, next_id: list[int]) -> None:
    with conn.transaction():
        for _ in range(rng.randint(5, 40)):
            x = rng.random()
            if x < 0.35:
                next_id[0] += 1
                conn.execute("INSERT INTO customers VALUES (%s, %s, %s, %s, %s)",
                             _customer(rng, next_id[0]))  # fmt: skip
            elif x < 0.6:
                conn.execute(
                    "UPDATE customers SET balance = %s, score = %s, nation_id = %s "
                    "WHERE id = (SELECT id FROM customers ORDER BY random() LIMIT 1)",
                    (rng.choice([None, 1, 1.5, 7]), rng.choice(_SCORES),
                     rng.choice([None, 0, 1, 2, 3, 4])),
                )  # fmt: skip
            elif x < 0.8:
                conn.execute(
                    "DELETE FROM customers WHERE id = "
                    "(SELECT id FROM customers ORDER BY random() LIMIT 1)"
                )
            elif x < 0.9:  # the few-rows side changes: a hot key's other side is read whole
                conn.execute(
                    "UPDATE nations SET name = %s, zone = %s WHERE id = %s",
                    (rng.choice(["n", "m", None]), rng.choice(["east", "west"]), rng.randrange(5)),
                )
            elif x < 0.95:
                conn.execute("DELETE FROM nations WHERE id = %s", (rng.randrange(5),))
            else:
                conn.execute(
                    "INSERT INTO nations VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING",
                    (rng.randrange(5), "new", rng.choice(["east", "west"])),
                )


@pytest.mark.slow
def test_joins_on_hot_keys_equal_their_queries_after_every_batch(pg_dsn, tmp_path, monkeypatch):
    rng = random.Random(13)
    calls = {"read": 0, "stage": 0}
    for name in calls:
        method = getattr(hot_rows.HotRows, name)

        def counted(self, *args, _method=method, _name=name, **kwargs):
            calls[_name] += 1
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(hot_rows.HotRows, name, counted)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA_SQL)
        for i in range(4):
            conn.execute(
                "INSERT INTO nations VALUES (%s, %s, %s)", (i, f"n{i}", ["east", "west"][i % 2])
            )
        with conn.cursor().copy("COPY customers FROM STDIN") as copy:
            for i in range(1200):  # ~200 rows a key: past the join's 128 from the start
                copy.write_row(_customer(rng, i))
        next_id = [1200]
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
                assert diff_rows(conn, name, sql) == (0, 0), f"{name} after population"
            assert calls["stage"] > 0, "no key became hot: the test checks the usual path only"
            for batch in range(10):
                _batch(conn, rng, next_id)
                eng.catch_up(timeout_s=60)
                for name, sql in VIEWS.items():
                    assert diff_rows(conn, name, sql) == (0, 0), f"{name} after batch {batch}"
            assert calls["read"] > 0, "no hot side was read back: nations never changed"
