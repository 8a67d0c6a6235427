"""One Engine runs 100 small views on the Spark runner against a Postgres with the default
``max_connections`` (100): the views share one streaming query and one sink connection, so the
engine's connections do not grow with the number of views (before, each view had its own query
and sink connection, and ~90 views failed with "sorry, too many clients already"). After each
round of random DML every view equals its query (as multisets)."""

from __future__ import annotations

import random

import psycopg
import pytest

from engine import Engine
from tests.e2e.test_engine_oracle import diff_rows, random_transaction, setup_tables
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.slow

N_VIEWS = 100
SHAPES = [
    "SELECT id, amount FROM orders WHERE customer_id = {k}",
    "SELECT status, count(*) AS n, sum(amount) AS total FROM orders WHERE customer_id <> {k} "
    "GROUP BY status",
    "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id "
    "WHERE o.id % 4 = {m}",
    "SELECT customer_id, max(amount) AS top FROM orders WHERE id > {k} GROUP BY customer_id",
]
#: the engine's connections, whatever the number of views: catalog, sink, the query's sink,
#: slot keeper and advancer, CDC reader, the streaming source's reader, the executors' readers
MAX_CONNECTIONS = 12  # 8 measured (2026-11-26)


@pytest.fixture(scope="module")
def server():
    srv = PostgresServer(settings={"max_connections": "100"}).start()
    yield srv
    srv.stop()


def views() -> dict[str, str]:
    return {f"v{i:03d}": SHAPES[i % len(SHAPES)].format(k=i % 8, m=i % 4) for i in range(N_VIEWS)}


def test_one_engine_runs_100_views_on_spark_with_few_connections(spark, server, tmp_path):
    db = server.create_database("many")
    dsn = server.dsn_for(db)
    rng = random.Random(23)
    wanted = views()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            next_id = setup_tables(conn, rng)
            # populated in-process (fast); the running phase is what this test scales
            with Engine(dsn, tmp_path / "state", runner="local") as eng:
                for name, sql in wanted.items():
                    eng.create_view(name, sql)
            with Engine(dsn, tmp_path / "state", runner="spark") as eng:
                assert len(eng.views) == N_VIEWS
                for _ in range(3):
                    for _ in range(10):
                        random_transaction(conn, rng, next_id)
                    eng.catch_up(timeout_s=300)
                    held = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    ).fetchone()[0]
                    assert held <= MAX_CONNECTIONS, held
                    unequal = {
                        name: d
                        for name, sql in wanted.items()
                        if (d := diff_rows(conn, name, sql)) != (0, 0)
                    }
                    assert not unequal, unequal
                assert {s.phase for s in eng.list_views()} == {"running"}
                assert [q.name for q in spark.streams.active] == ["incview"]
    finally:
        server.drop_database(db)
