"""Fault: the sources' statistics change under a view (autovacuum's ANALYZE), so that planning
its SQL again would order its joins otherwise.

Found in the Dagster end-to-end test under load: the streaming job re-planned the view with
fresh statistics, read the population's join state with another join order, and silently lost
an update while saying ``running``. Now the view keeps the statistics it was created with
(``engine.plan_lock``); a plan that still differs from the state's sends it back to population.
"""

from __future__ import annotations

import random

from engine import Engine
from engine.plan_lock import FINGERPRINT_FILE
from tests.e2e.test_engine_oracle import diff_rows

SQL = (
    "SELECT c.segment, count(*) AS items, sum(oi.quantity * oi.unit_price) AS revenue "
    "FROM order_items oi JOIN orders o ON oi.order_id = o.id "
    "JOIN customers c ON o.customer_id = c.id WHERE o.status <> 'cancelled' GROUP BY c.segment"
)


def _setup(conn):
    conn.execute(
        """
        CREATE TABLE customers (id int PRIMARY KEY, name text, segment text);
        CREATE TABLE orders (id int PRIMARY KEY, customer_id int, status text);
        CREATE TABLE order_items (order_id int, line int, quantity int, unit_price numeric(10,2),
                                  PRIMARY KEY (order_id, line));
        ALTER TABLE customers REPLICA IDENTITY FULL;
        ALTER TABLE orders REPLICA IDENTITY FULL;
        ALTER TABLE order_items REPLICA IDENTITY FULL;
        INSERT INTO customers SELECT i, 'c' || i, (ARRAY['online', 'retail', 'wholesale'])[i % 3 + 1]
            FROM generate_series(1, 500) i;
        INSERT INTO orders SELECT i, i % 500 + 1, CASE WHEN i % 7 = 0 THEN 'cancelled' ELSE 'new' END
            FROM generate_series(1, 500) i;
        INSERT INTO order_items SELECT i % 500 + 1, i, i % 5 + 1, (i % 90) + 0.99
            FROM generate_series(1, 2000) i;
        """
    )


def _plan(engine) -> str:
    return engine.explain(SQL).split("== Physical plan (dataflow) ==")[1]


def test_a_view_keeps_its_plan_when_the_statistics_change(pg_conn, pg_dsn, state_dir):
    _setup(pg_conn)  # no ANALYZE yet: the planner has no row estimates
    with Engine(pg_dsn, state_dir, runner="local") as engine:
        before = _plan(engine)
        engine.create_view("revenue", SQL)
    pg_conn.execute("ANALYZE customers, orders, order_items")
    with Engine(pg_dsn, state_dir, runner="local") as engine:
        assert _plan(engine) != before, "the statistics must change the join order"
        assert {s.name: s.last_error for s in engine.list_views()} == {"revenue": None}
        rng = random.Random(5)
        for _ in range(5):
            cid = rng.randint(1, 500)
            pg_conn.execute("UPDATE customers SET segment = 'vip' WHERE id = %s", (cid,))
            pg_conn.execute("UPDATE orders SET status = 'new' WHERE customer_id = %s", (cid,))
            pg_conn.execute(
                "DELETE FROM order_items WHERE order_id = %s AND line %% 2 = 0",
                (rng.randint(1, 500),),
            )
            engine.catch_up()
            assert diff_rows(pg_conn, "revenue", SQL) == (0, 0)


def test_a_state_built_by_another_plan_is_repopulated(pg_conn, pg_dsn, state_dir):
    """A plan fingerprint that does not match (e.g. another incview version planned the view
    otherwise): the view is re-populated at open, and says so."""
    _setup(pg_conn)
    with Engine(pg_dsn, state_dir, runner="local") as engine:
        engine.create_view("revenue", SQL)
    (state_dir / "views" / "revenue" / FINGERPRINT_FILE).write_text("another plan")
    pg_conn.execute("UPDATE customers SET segment = 'vip' WHERE id = 7")
    with Engine(pg_dsn, state_dir, runner="local") as engine:
        engine.catch_up()
        assert diff_rows(pg_conn, "revenue", SQL) == (0, 0)
        (status,) = engine.list_views()
        assert status.phase == "running"
        assert status.last_error.startswith("re-populated: its physical plan is not the one")
        pg_conn.execute("UPDATE customers SET segment = 'vip' WHERE id = 8")
        engine.catch_up()
        assert diff_rows(pg_conn, "revenue", SQL) == (0, 0)
