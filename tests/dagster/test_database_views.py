"""Views created in SQL (``CALL incview.create_view``) become assets on the next load of the code
location (``incremental_views(..., include_database_views=True)``), with lineage from their SQL;
a view declared in code and in the database is one asset."""

import threading

import psycopg
import pytest
from dagster import AssetKey

from engine import Engine
from incview_dagster import database_views, incremental_views
from tests.dagster.conftest import BIG_SEGMENTS, SEGMENT_TOTALS

BIG_ORDERS_SQL = "SELECT o.id, o.amount, c.name FROM shop.orders o JOIN shop.customers c ON c.id = o.customer_id WHERE o.amount > 5"


def _create_in_sql(dsn: str, state_dir, views: dict[str, str]) -> None:
    """Run an engine (its commander answers) while ``views`` are created with CALL."""
    with Engine(dsn, state_dir, runner="local") as eng:
        stop = threading.Event()
        runner = threading.Thread(target=lambda: eng.run(stop=stop), daemon=True)
        runner.start()
        try:
            with psycopg.connect(
                dsn, autocommit=True, options="-c incview.command_timeout=30"
            ) as conn:
                for name, sql in views.items():
                    conn.execute("CALL incview.create_view(%s, %s)", (name, sql))
        finally:
            stop.set()
            runner.join(30)


@pytest.mark.slow
def test_sql_created_views_are_assets_with_lineage(incview, shop_dsn):
    _create_in_sql(
        shop_dsn,
        incview.state_path,
        {"shop.big_orders": BIG_ORDERS_SQL, SEGMENT_TOTALS.name: SEGMENT_TOTALS.sql},
    )
    assert [v.name for v in database_views(incview, [SEGMENT_TOTALS])] == ["shop.big_orders"]

    defs = incremental_views(
        [SEGMENT_TOTALS, BIG_SEGMENTS], resource=incview, include_database_views=True
    )
    graph = defs.resolve_asset_graph()
    views = {k for k in graph.get_all_asset_keys() if k.path[0] == "views"}
    big_orders = AssetKey(["views", "shop", "big_orders"])
    segment_totals = AssetKey(["views", "shop", "segment_totals"])
    # declared in code and in the database: one asset
    assert views == {big_orders, segment_totals, AssetKey(["views", "shop", "big_segments"])}
    assert set(graph.get(big_orders).parent_keys) == {
        AssetKey(["pg", "shop", "orders"]),
        AssetKey(["pg", "shop", "customers"]),
    }
    assert "CALL incview.create_view" in (graph.get(big_orders).description or "")
    assert graph.get(big_orders).kinds == {"spark", "postgres"}
    # the population job and the checks cover it as they cover views declared in code
    job = defs.resolve_job_def("incview_population")
    assert big_orders in job.asset_layer.executable_asset_keys
    checks = {k.name for k in graph.asset_check_keys if k.asset_key == big_orders}
    assert "matches_full_recompute" in checks

    # without the flag (the default), only the views declared in code
    plain = incremental_views([SEGMENT_TOTALS], resource=incview).resolve_asset_graph()
    assert big_orders not in plain.get_all_asset_keys()
    with pytest.raises(ValueError, match="resource"):
        incremental_views([SEGMENT_TOTALS], include_database_views=True)
