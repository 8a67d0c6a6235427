"""Sources that are Postgres views: planned over their definitions (``engine.sql.source_views``).

Views over Postgres views (and views over those) equal their queries after every batch of random
DML on the base tables; a source view re-defined with CREATE OR REPLACE VIEW, or dropped, puts
the views reading it in the ``error`` phase naming it (others go on); a materialized view is
refused with its reason; a refused construct inside a view's definition names the view.
"""

from __future__ import annotations

import random

import psycopg
import pytest

from engine import Engine, UnsupportedSQL, ViewError
from tests.e2e.test_engine_oracle import diff_rows, random_transaction, setup_tables

PG_VIEWS = """
CREATE VIEW order_lines AS
    SELECT o.id, o.amount, o.status, c.name AS customer, c.segment
    FROM orders o LEFT JOIN customers c ON c.id = o.customer_id;
CREATE VIEW paid_lines AS
    SELECT id, amount, customer FROM order_lines WHERE status = 'paid';
CREATE VIEW "Mixed Case" ("Segment", "Total") AS
    SELECT segment, sum(amount) FROM order_lines GROUP BY segment;
"""

VIEWS = {
    "per_customer": "SELECT customer, count(*) AS n, sum(amount) AS total FROM paid_lines "
    "GROUP BY customer",
    "lines_by_segment": "SELECT l.segment, l.id, l.amount FROM order_lines l WHERE l.amount > 4",
    "segments": 'SELECT m."Segment", m."Total" FROM "Mixed Case" m',
    "plain": "SELECT status, count(*) AS n FROM orders GROUP BY status",
}


def _phase(eng: Engine) -> dict[str, tuple[str, str | None]]:
    return {s.name: (s.phase, s.last_error) for s in eng.list_views()}


@pytest.mark.slow
def test_views_over_postgres_views_equal_their_queries_and_notice_redefinitions(pg_dsn, tmp_path):
    rng = random.Random(5)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        conn.execute(PG_VIEWS)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
            # the changes come from the base tables
            assert {s.qualified_name for s in eng.views["per_customer"].plan.sources} == {
                "public.orders",
                "public.customers",
            }
            for batch in range(6):
                for _ in range(4):
                    random_transaction(conn, rng, next_id)
                if batch == 3:
                    conn.execute("TRUNCATE orders")
                eng.catch_up()
                bad = {n: d for n, sql in VIEWS.items() if (d := diff_rows(conn, n, sql)) != (0, 0)}
                assert not bad, f"batch {batch}: (missing, extra) {bad}"

            # re-defined under the views reading it (directly or through paid_lines)
            conn.execute(
                "CREATE OR REPLACE VIEW order_lines AS SELECT o.id, o.amount, o.status, "
                "c.name AS customer, c.segment FROM orders o JOIN customers c "
                "ON c.id = o.customer_id"
            )
            random_transaction(conn, rng, next_id)
            eng.catch_up()
            phases = _phase(eng)
            for name in ("per_customer", "lines_by_segment", "segments"):
                phase, error = phases[name]
                assert phase == "error", phases
                assert "source view public.order_lines was re-defined" in error, error
            assert phases["plain"] == ("running", None)
            assert diff_rows(conn, "plain", VIEWS["plain"]) == (0, 0)


def test_a_dropped_source_view_breaks_only_its_readers(pg_dsn, tmp_path):
    rng = random.Random(6)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        conn.execute(PG_VIEWS)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("segments", VIEWS["segments"])
            eng.create_view("plain", VIEWS["plain"])
            conn.execute('DROP VIEW "Mixed Case"')
            random_transaction(conn, rng, next_id)
            eng.catch_up()
            phases = _phase(eng)
            assert phases["segments"][0] == "error"
            assert "source view public.Mixed Case was dropped" in phases["segments"][1]
            assert phases["plain"] == ("running", None)
        # and after a restart too (the definitions are recorded with the view)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            assert _phase(eng)["segments"][0] == "error"


def test_materialized_views_and_refused_definitions_are_named(pg_dsn, tmp_path):
    rng = random.Random(7)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        setup_tables(conn, rng)
        conn.execute(
            "CREATE MATERIALIZED VIEW mv AS SELECT status, count(*) AS n FROM orders GROUP BY 1"
        )
        conn.execute("CREATE VIEW stamped AS SELECT id, now() AS seen FROM orders")
        conn.execute(PG_VIEWS)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            with pytest.raises(ViewError, match="public.mv is a materialized view"):
                eng.create_view("from_mv", "SELECT * FROM mv")
            with pytest.raises(UnsupportedSQL, match="source view public.stamped: .*now"):
                eng.create_view("from_stamped", "SELECT id FROM stamped")
            assert eng.list_views() == []
            # explain shows the base tables scanned in place of the views
            plans = eng.explain("SELECT customer FROM paid_lines")
            assert "public.customers" in plans and "public.orders" in plans, plans
