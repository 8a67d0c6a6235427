"""The order a population reads its sources in: below an outer join's never-padded side (or an
anti join's right side) first, so the other side's rows come out once instead of padded and
retracted; end to end, a LEFT JOIN view populated that way equals its query."""

from __future__ import annotations

from engine import Engine
from engine.population import _read_order
from engine.sql.catalog import DictCatalog
from engine.sql.planner import build_dataflow, plan_view
from tests.e2e.test_engine_oracle import diff_rows

CATALOG = DictCatalog(
    {
        "customer": {"id": "bigint", "name": "text"},
        "orders": {"id": "bigint", "customer_id": "bigint", "note": "text"},
        "region": {"id": "bigint", "name": "text"},
    }
)


def _order(sql: str) -> list[str]:
    view = plan_view(sql, CATALOG)
    df = build_dataflow(view, None).dataflow
    # as the engine could list them: the padded side first
    ordered = sorted(view.sources, key=lambda source: source.name != "customer")
    tables = [(source, ("id",), None) for source in ordered]
    return [source.name for source, _, _ in _read_order(df, tables)]


def test_the_never_padded_side_is_read_first():
    left = "SELECT c.name, o.id FROM customer c LEFT JOIN orders o ON o.customer_id = c.id"
    right = "SELECT c.name, o.id FROM orders o RIGHT JOIN customer c ON o.customer_id = c.id"
    for sql in (left, right):
        assert _order(sql)[0] == "orders"


def test_an_anti_join_reads_its_subquery_first():
    sql = (
        "SELECT c.name FROM customer c "
        "WHERE c.id NOT IN (SELECT o.customer_id FROM orders o WHERE o.customer_id IS NOT NULL)"
    )
    assert _order(sql)[0] == "orders"


def test_inner_and_full_joins_keep_the_order():
    inner = "SELECT c.name, o.id FROM customer c JOIN orders o ON o.customer_id = c.id"
    full = "SELECT c.name, o.id FROM customer c FULL JOIN orders o ON o.customer_id = c.id"
    for sql in (inner, full):
        assert _order(sql) == ["customer", "orders"]


def test_a_left_join_view_read_in_that_order_equals_its_query(pg_conn, pg_dsn, tmp_path):
    pg_conn.execute(
        "CREATE TABLE customer (id bigint, name text);"
        "CREATE TABLE orders (id bigint, customer_id bigint, note text);"
        "ALTER TABLE customer REPLICA IDENTITY FULL; ALTER TABLE orders REPLICA IDENTITY FULL;"
        "INSERT INTO customer SELECT i, 'c' || i FROM generate_series(1, 3000) i;"
        "INSERT INTO orders SELECT i, i % 2500, 'n' || (i % 7) FROM generate_series(1, 20000) i"
    )
    sql = (
        "SELECT n, count(*) AS customers FROM (SELECT c.id, count(o.id) AS n FROM customer c "
        "LEFT JOIN orders o ON o.customer_id = c.id AND o.note <> 'n3' GROUP BY c.id) t GROUP BY n"
    )
    with Engine(pg_dsn, tmp_path / "state", runner="local") as engine:
        engine.create_view("order_counts", sql)
        assert diff_rows(pg_conn, "order_counts", sql) == (0, 0)
        pg_conn.execute(
            "DELETE FROM orders WHERE id % 9 = 0; UPDATE customer SET id = -id WHERE id % 11 = 0"
        )
        engine.catch_up()
        assert diff_rows(pg_conn, "order_counts", sql) == (0, 0)
