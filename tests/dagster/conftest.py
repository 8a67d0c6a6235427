"""Fixtures of the Dagster integration tests: a small shop schema in a fresh real Postgres
database, an ``IncViewResource`` on it (runner local, no Spark) and cleanup of the streaming jobs
the tests launch (a job left running would keep its replication slot busy)."""

import pytest

from incview_dagster import IncView, IncViewResource

SHOP_SQL = """
CREATE SCHEMA shop;
CREATE TABLE shop.customers (id int PRIMARY KEY, name text NOT NULL, segment text);
CREATE TABLE shop.orders (id int PRIMARY KEY, customer_id int, amount int NOT NULL);
ALTER TABLE shop.customers REPLICA IDENTITY FULL;
ALTER TABLE shop.orders REPLICA IDENTITY FULL;
INSERT INTO shop.customers VALUES (1, 'ann', 'retail'), (2, 'bob', 'online'), (3, 'cid', 'retail');
INSERT INTO shop.orders VALUES (10, 1, 5), (11, 1, 7), (12, 2, 3), (13, 3, 11), (14, 9, 1);
"""

SEGMENT_TOTALS = IncView(
    "shop.segment_totals",
    "SELECT c.segment, count(*) AS orders, sum(o.amount) AS total "
    "FROM shop.orders o JOIN shop.customers c ON o.customer_id = c.id GROUP BY c.segment",
    group="shop",
    owners=["team:analytics"],
)
BIG_SEGMENTS = IncView(
    "shop.big_segments",
    "SELECT segment, total FROM shop.segment_totals WHERE total > 10",
    group="shop",
)


@pytest.fixture
def shop_dsn(pg_dsn):
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(SHOP_SQL)
    return pg_dsn


@pytest.fixture
def incview(shop_dsn, tmp_path):
    resource = IncViewResource(dsn=shop_dsn, state_dir=str(tmp_path / "incview"), runner="local")
    yield resource
    resource.streaming_jobs().stop_all(timeout_s=30)
