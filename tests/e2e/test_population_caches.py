"""A population leaves the state's in-memory caches empty (``StateStore.drop_caches``): what they
held was picked by the order population read its sources. Against a real Postgres: the caches of
a join, a GROUP BY and a top-k held entries when population ended and none once ``create_view``
returned; after every batch of random changes each view still equals its query (multisets), and
the caches fill again from the changes."""

from __future__ import annotations

import random

import psycopg

from engine import population
from engine.dataflow.state.store import StateStore
from engine.engine import Engine
from tests.e2e.test_engine_oracle import diff_rows

SCHEMA_SQL = """
CREATE TABLE customers (id int PRIMARY KEY, region text, since date);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(12,2));
ALTER TABLE customers REPLICA IDENTITY FULL;
ALTER TABLE orders REPLICA IDENTITY FULL;
"""

VIEWS = {
    "order_regions": "SELECT o.id, c.region, o.amount FROM orders o "
    "JOIN customers c ON o.customer_id = c.id",
    "region_totals": "SELECT c.region, count(*) AS n, sum(o.amount) AS total, max(c.since) AS "
    "newest FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.region",
    "top_orders": "SELECT o.id, o.amount FROM orders o ORDER BY o.amount DESC, o.id LIMIT 5",
}

#: how each kind of cache counts what it holds (entry cache, group table, top-k heads)
_COUNTS = ("cached_entries", "cached_groups", "cached_partitions")


def _cached(store: StateStore) -> int:
    """Entries held by the in-memory caches registered with ``store``."""
    caches = list(store._caches)
    assert caches, "no cache registered: the test checks nothing"
    return sum(getattr(c, count) for c in caches for count in _COUNTS if hasattr(c, count))


def _changes(conn: psycopg.Connection, rng: random.Random, next_id: list[int]) -> None:
    with conn.transaction():
        for _ in range(rng.randint(20, 60)):
            x = rng.random()
            if x < 0.4:
                next_id[0] += 1
                conn.execute(
                    "INSERT INTO orders VALUES (%s, %s, %s)",
                    (next_id[0], rng.randrange(60), rng.choice([None, 1, 2.5, 99.99])),
                )
            elif x < 0.7:
                conn.execute(
                    "UPDATE orders SET amount = %s WHERE id = "
                    "(SELECT id FROM orders ORDER BY random() LIMIT 1)",
                    (rng.randrange(10_000) / 100,),
                )
            elif x < 0.85:
                conn.execute(
                    "DELETE FROM orders WHERE id = (SELECT id FROM orders ORDER BY random() LIMIT 1)"
                )
            else:
                conn.execute(
                    "UPDATE customers SET region = %s, since = since + 1 WHERE id = %s",
                    (rng.choice(["north", "south", None]), rng.randrange(60)),
                )


def test_population_empties_the_caches_and_views_stay_equal(pg_dsn, tmp_path, monkeypatch):
    rng = random.Random(5)
    # population times of 500 rows: the join's and the GROUP BY's keys recur from time to time,
    # so their caches keep them while the state fills (written_keys.mostly_known)
    monkeypatch.setattr(population, "POPULATION_CHUNK", 500)
    monkeypatch.setattr(population, "SMALL_TABLE_CHUNK", 500)
    held_at_population_end: list[int] = []
    drop = StateStore.drop_caches
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA_SQL)
        conn.execute(
            "INSERT INTO customers SELECT i, (ARRAY['north','south','east'])[1 + i % 3], "
            "date '2020-01-01' + i FROM generate_series(0, 49) i"
        )
        conn.execute(
            "INSERT INTO orders SELECT i, i % 55, (i * 37 % 10000) / 100.0 "
            "FROM generate_series(1, 3000) i"
        )
        next_id = [3000]
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name, sql in VIEWS.items():

                def before_drop(self):
                    held_at_population_end.append(_cached(self))
                    drop(self)

                monkeypatch.setattr(StateStore, "drop_caches", before_drop)
                eng.create_view(name, sql)
                assert _cached(eng.views[name].physical.dataflow.store) == 0, (
                    f"{name}: population left its caches full"
                )
                assert diff_rows(conn, name, sql) == (0, 0), f"{name} after population"
            monkeypatch.setattr(StateStore, "drop_caches", drop)
            assert len(held_at_population_end) == len(VIEWS)
            assert all(held_at_population_end), held_at_population_end  # not vacuous
            for batch in range(6):
                _changes(conn, rng, next_id)
                eng.catch_up(timeout_s=60)
                for name, sql in VIEWS.items():
                    assert diff_rows(conn, name, sql) == (0, 0), f"{name} after batch {batch}"
            refilled = {name: _cached(eng.views[name].physical.dataflow.store) for name in VIEWS}
            assert all(refilled.values()), refilled
