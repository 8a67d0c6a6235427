"""Which GROUP BYs, DISTINCTs, joins and top-ks the physical planner sends to the columnar
collections (on a real catalog).

Correctness of those plans is the planner oracle's job (tests/sql/test_planner_oracle.py runs
``agg-columnar``, ``distinct-columnar``, ``top-k-columnar`` and friends against Postgres); this
checks the choice
itself, so that a silent fallback to the row path cannot pass unnoticed.
"""

from __future__ import annotations

import pytest

from engine.sql.planner import build_dataflow, plan_view
from tests.sql.oracle import DDL, catalog_from_postgres

COLUMNAR = [
    "SELECT customer_id, count(*) AS n, sum(amount) AS s, avg(amount) AS a FROM orders "
    "GROUP BY customer_id",
    "SELECT status, sum(amount * qty - 1.5) AS t, avg(amount * (1 - qty)) AS a FROM orders "
    "GROUP BY status",
    "SELECT count(*) AS n, sum(qty) AS s FROM orders",
    "SELECT created, sum(CAST(discount AS numeric(12,3))) AS d FROM orders GROUP BY created",
    "SELECT c.region, sum(i.qty * i.price) AS revenue FROM order_items i "
    "JOIN orders o ON o.id = i.order_id JOIN customers c ON c.id = o.customer_id GROUP BY c.region",
    "SELECT customer_id, min(amount) AS m, max(created) AS c, max(qty * 2) AS q FROM orders "
    "GROUP BY customer_id",
    "SELECT status, count(DISTINCT qty) AS n, count(DISTINCT amount) AS na FROM orders "
    "GROUP BY status",
]
ROW = [
    "SELECT customer_id, min(discount) AS m FROM orders GROUP BY customer_id",  # float
    "SELECT customer_id, max(status) AS m FROM orders GROUP BY customer_id",  # text
    "SELECT status, sum(discount) AS d FROM orders GROUP BY status",  # float
    "SELECT status, sum(amount / qty) AS d FROM orders GROUP BY status",  # scale from division
    "SELECT amount / 3 AS k, count(*) AS n FROM orders GROUP BY amount / 3",  # key of no scale
    "SELECT status, count(DISTINCT discount) AS n FROM orders GROUP BY status",  # float
]

DISTINCT_COLUMNAR = [
    "SELECT DISTINCT customer_id, amount, created, status FROM orders",
    "SELECT DISTINCT discount, qty > 2 AS big FROM orders",  # floats keep -0.0 in the record
    "SELECT DISTINCT amount * qty - 1.5 AS t FROM orders",  # a numeric of a derived scale
    "SELECT customer_id AS x FROM orders UNION SELECT id FROM customers",
    "SELECT amount FROM orders UNION SELECT price FROM order_items",  # numeric(10,2) / (8,2)
    "SELECT region FROM customers UNION SELECT status FROM orders UNION SELECT 'none'",
    "SELECT DISTINCT wall, day FROM events",
]
DISTINCT_ROW = [
    "SELECT DISTINCT amount / 3 AS k FROM orders",  # numeric of a value-dependent scale
    "SELECT DISTINCT at FROM events",  # timestamptz
    "SELECT DISTINCT interval '1 day' * qty AS i FROM orders",  # interval
    "SELECT qty FROM orders UNION SELECT amount FROM orders",  # scale 0 and scale 2
    "SELECT DISTINCT CASE WHEN qty > 1 THEN amount ELSE 0 END AS x FROM orders",
]

JOIN_COLUMNAR = [
    "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id",
    "SELECT i.qty, p.price FROM order_items i JOIN products p ON p.id = i.product_id "
    "AND i.price > p.price",  # a residual
    "SELECT o.id, i.id AS item FROM orders o JOIN order_items i ON i.order_id = o.id "
    "AND i.qty = o.qty",  # int = smallint, two key columns
    "SELECT e.kind, o.status FROM events e JOIN orders o ON o.created = e.day",  # dates
]
JOIN_ROW = [
    "SELECT e.at, c.name FROM events e JOIN customers c ON c.id = e.customer_id",  # timestamptz
    "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id + 1",  # computed
    "SELECT o.id, p.name FROM orders o JOIN products p ON p.price = o.discount",  # numeric = float
]

TOP_K_COLUMNAR = [
    "SELECT id, amount FROM orders ORDER BY amount DESC NULLS LAST, id LIMIT 5",
    "SELECT id, created FROM orders ORDER BY created, id LIMIT 4 OFFSET 3",
    "SELECT * FROM (SELECT id, customer_id, amount, row_number() OVER "
    "(PARTITION BY customer_id ORDER BY amount DESC, id) AS rn FROM orders) t WHERE rn <= 3",
    "SELECT id, customer_id FROM orders ORDER BY amount * qty DESC, id LIMIT 6",  # derived scale
    "SELECT * FROM (SELECT id, status, discount, row_number() OVER (PARTITION BY status "
    "ORDER BY discount NULLS FIRST, id) AS rn FROM orders) t WHERE rn <= 2",  # floats, text
    "SELECT id, wall FROM events ORDER BY wall DESC, id LIMIT 3",  # timestamp
    "SELECT id, kind, day, wall FROM (SELECT id, kind, day, wall, row_number() OVER "
    "(PARTITION BY kind, day ORDER BY wall NULLS FIRST, id DESC) AS rn FROM events) e "
    "WHERE rn = 1",
    "SELECT * FROM (SELECT o.id, c.region, o.amount * o.qty AS total, row_number() OVER "
    "(PARTITION BY c.region ORDER BY o.amount * o.qty DESC NULLS LAST, o.id) AS rn "
    "FROM orders o JOIN customers c ON c.id = o.customer_id) t WHERE rn <= 2",
    # TPC-H Q3/Q10-shaped: the order by a columnar reduce's sum of a computed numeric
    "SELECT customer_id, sum(amount * (1 - 0.05)) AS revenue FROM orders GROUP BY customer_id "
    "ORDER BY revenue DESC, customer_id LIMIT 3",
]
TOP_K_ROW = [
    # the same beside string_agg: the row reduce's sums are Decimals of any size
    "SELECT customer_id, sum(amount * (1 - 0.05)) AS revenue, string_agg(status, ',') AS s "
    "FROM orders GROUP BY customer_id ORDER BY revenue DESC, customer_id LIMIT 3",
    "SELECT id, status FROM (SELECT id, status, rank() OVER "
    "(PARTITION BY status ORDER BY qty DESC) AS r FROM orders) x WHERE r <= 2",  # rank
    "SELECT id, at FROM events ORDER BY at, id LIMIT 3",  # timestamptz
    "SELECT id, customer_id FROM orders ORDER BY amount / qty, id LIMIT 3",  # value-dependent scale
]


@pytest.fixture(scope="module")
def catalog(pg_server):
    import psycopg

    name = pg_server.create_database()
    try:
        with psycopg.connect(pg_server.dsn_for(name), autocommit=True) as conn:
            conn.execute(DDL)
            yield catalog_from_postgres(
                conn, ["customers", "products", "orders", "order_items", "events"]
            )
    finally:
        pg_server.drop_database(name)


def _physical(sql, catalog) -> str:
    return build_dataflow(plan_view(sql, catalog), None).explain()


@pytest.mark.parametrize("sql", COLUMNAR)
def test_columnar_reduce_is_chosen(sql, catalog):
    assert "Reduce (columnar)" in _physical(sql, catalog)


@pytest.mark.parametrize("sql", ROW)
def test_row_reduce_where_columnar_cannot(sql, catalog):
    plan = _physical(sql, catalog)
    assert "Reduce:" in plan and "Reduce (columnar)" not in plan


@pytest.mark.parametrize("sql", DISTINCT_COLUMNAR)
def test_columnar_distinct_is_chosen(sql, catalog):
    plan = _physical(sql, catalog)
    assert "Distinct (columnar)" in plan and "Distinct  [" not in plan


@pytest.mark.parametrize("sql", DISTINCT_ROW)
def test_row_distinct_where_columnar_cannot(sql, catalog):
    plan = _physical(sql, catalog)
    assert "Distinct  [" in plan and "Distinct (columnar)" not in plan


@pytest.mark.parametrize("sql", JOIN_COLUMNAR)
def test_columnar_join_is_chosen(sql, catalog):
    plan = _physical(sql, catalog)
    assert "InnerJoin (columnar)" in plan and "InnerJoin:" not in plan


@pytest.mark.parametrize("sql", JOIN_ROW)
def test_row_join_where_columnar_cannot(sql, catalog):
    plan = _physical(sql, catalog)
    assert "InnerJoin:" in plan and "InnerJoin (columnar)" not in plan


@pytest.mark.parametrize("sql", TOP_K_COLUMNAR)
def test_columnar_top_k_is_chosen(sql, catalog):
    plan = _physical(sql, catalog)
    assert "TopK (columnar):" in plan and "TopK:" not in plan


@pytest.mark.parametrize("sql", TOP_K_ROW)
def test_row_top_k_where_columnar_cannot(sql, catalog):
    plan = _physical(sql, catalog)
    assert "TopK:" in plan and "TopK (columnar)" not in plan


VECTOR_EXPLAIN = [
    (
        "SELECT id, amount * 2 AS a, lower(status) AS s FROM orders WHERE qty > 2 AND amount < 100",
        ['Filter (vectorized): "orders"."qty" > 2', 'Map (vectorized): "orders"."id"'],
    ),
    (
        "SELECT customer_id, sum(amount) AS s FROM orders WHERE created > '2024-01-01' "
        "GROUP BY customer_id HAVING sum(amount) > 10",
        [
            'Filter (vectorized): "__agg0" > 10',
            "Map (vectorized): group keys and aggregate arguments",
        ],
    ),
    (
        "SELECT o.id, c.region FROM orders o JOIN customers c ON c.id = o.customer_id + 1",
        ["Map (vectorized): join keys", "Map (vectorized): drop join keys"],
    ),
    (
        "SELECT id, substr(status, qty) AS s, qty + 1 AS q FROM orders "
        "WHERE qty > 2 AND status LIKE status || '_'",
        [
            'Filter (per row: "orders"."status" LIKE "orders"."status" || \'_\'): "orders"."qty" > 2 AND',
            'Map (per row: SUBSTRING("orders"."status" FROM "orders"."qty")): "orders"."id"',
        ],
    ),
]


@pytest.mark.parametrize("sql, needles", VECTOR_EXPLAIN)
def test_explain_says_which_expressions_run_per_row(sql, needles, catalog):
    plan = _physical(sql, catalog)
    for needle in needles:
        assert needle in plan, plan


@pytest.mark.parametrize(
    "sql, columns",
    [
        # a columnar GROUP BY above a vectorized filter: the source's columns are used
        ("SELECT status, sum(amount) AS s FROM orders WHERE qty > 1 GROUP BY status",
         {"public.orders": True}),
        # an anti join on keys: a columnar left join with the right's distinct keys
        ("SELECT o.id FROM orders o WHERE NOT EXISTS (SELECT 1 FROM customers c WHERE c.id = "
         "o.customer_id)", {"public.orders": True, "public.customers": True}),
        # an anti join with a residual (row path) is the first stateful collection: tuples
        ("SELECT o.id FROM orders o WHERE NOT EXISTS (SELECT 1 FROM customers c WHERE c.id = "
         "o.customer_id AND c.id > o.id)", {"public.orders": False, "public.customers": False}),
        # a semi join on keys alone: a columnar join with the right's distinct keys
        ("SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM customers c WHERE c.id = "
         "o.customer_id)", {"public.orders": True, "public.customers": True}),
        # a projection straight to the sink: the sink COPYs columns
        ("SELECT id, amount FROM orders", {"public.orders": True}),
        # an outer join on keys alone: columnar
        ("SELECT c.region, count(o.id) AS n FROM customers c LEFT JOIN orders o "
         "ON o.customer_id = c.id GROUP BY c.region",
         {"public.orders": True, "public.customers": True}),
        # an outer join with a residual over both sides (row path)
        ("SELECT c.region, count(o.id) AS n FROM customers c LEFT JOIN orders o "
         "ON o.customer_id = c.id AND o.amount > c.id GROUP BY c.region",
         {"public.orders": False, "public.customers": False}),
    ],
)  # fmt: skip
def test_population_reads_columns_only_where_a_collection_computes_on_them(sql, columns, catalog):
    """``Dataflow.reads_columns``: population reads a source as Arrow only when its columns
    reach a columnar collection (or the sink) through stateless ones."""
    df = build_dataflow(plan_view(sql, catalog), None).dataflow
    assert {source: df.reads_columns(source) for source in columns} == columns
