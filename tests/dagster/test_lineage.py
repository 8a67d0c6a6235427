"""Lineage from SQL alone (no database): source tables, view-on-view dependencies, translator."""

import pytest
from dagster import AssetKey, Definitions

from engine.errors import UnsupportedSQL
from incview_dagster import (
    IncView,
    IncViewResource,
    IncViewTranslator,
    build_view_assets,
    source_tables,
)
from tests.dagster.conftest import BIG_SEGMENTS, SEGMENT_TOTALS


def test_source_tables_resolve_schemas_ctes_and_case():
    assert source_tables(
        'WITH recent AS (SELECT * FROM Shop."Orders" WHERE id > 3) '
        "SELECT r.id FROM recent r JOIN customers c ON r.cid = c.id "
        "WHERE c.id IN (SELECT customer_id FROM shop.vip) "
        "UNION ALL SELECT id FROM (SELECT id FROM recent) q"
    ) == (("public", "customers"), ("shop", "Orders"), ("shop", "vip"))
    with pytest.raises(UnsupportedSQL):
        source_tables("DELETE FROM shop.orders")


def _defs(assets) -> Definitions:
    # constructing the resource touches nothing: no database is needed to load the definitions
    return Definitions(assets=assets, resources={"incview": IncViewResource(runner="local")})


def _deps(defs: Definitions) -> dict[AssetKey, set[AssetKey]]:
    graph = defs.resolve_asset_graph()
    return {key: set(graph.get(key).parent_keys) for key in graph.get_all_asset_keys()}


def test_view_assets_depend_on_pg_sources_and_on_the_views_they_read():
    downstream = IncView("top_segment", "SELECT max(total) AS best FROM shop.big_segments")
    defs = _defs(build_view_assets([SEGMENT_TOTALS, BIG_SEGMENTS, downstream]))
    deps = _deps(defs)
    seg = AssetKey(["views", "shop", "segment_totals"])
    big = AssetKey(["views", "shop", "big_segments"])
    top = AssetKey(["views", "public", "top_segment"])
    assert deps[seg] == {AssetKey(["pg", "shop", "orders"]), AssetKey(["pg", "shop", "customers"])}
    assert deps[big] == {seg}  # a view reading a view's result table depends on that view
    assert deps[top] == {big}
    assert deps[AssetKey(["pg", "shop", "orders"])] == set()
    graph = defs.resolve_asset_graph()
    assert graph.get(AssetKey(["pg", "shop", "orders"])).is_external
    assert graph.get(seg).group_name == "shop"
    assert graph.get(top).group_name == "incview"
    assert graph.get(seg).kinds == {"spark", "postgres"}
    assert graph.get(AssetKey(["pg", "shop", "orders"])).kinds == {"postgres"}
    assert graph.get(seg).owners == ["team:analytics"]


def test_translator_hooks_change_keys_and_groups():
    class Warehouse(IncViewTranslator):
        def get_asset_key(self, view):
            return AssetKey(["warehouse", view.result_table])

        def get_source_asset_key(self, schema, table):
            return AssetKey(["raw", table])

        def get_group_name(self, view):
            return "marts"

    defs = _defs(build_view_assets([SEGMENT_TOTALS, BIG_SEGMENTS], Warehouse()))
    deps = _deps(defs)
    assert deps[AssetKey(["warehouse", "segment_totals"])] == {
        AssetKey(["raw", "orders"]),
        AssetKey(["raw", "customers"]),
    }
    assert deps[AssetKey(["warehouse", "big_segments"])] == {
        AssetKey(["warehouse", "segment_totals"])
    }
    graph = defs.resolve_asset_graph()
    assert graph.get(AssetKey(["warehouse", "big_segments"])).group_name == "marts"


def test_two_views_with_one_result_table_are_refused():
    with pytest.raises(ValueError, match="both write result table public.t"):
        build_view_assets([IncView("t", "SELECT 1 AS a"), IncView("public.t", "SELECT 2 AS a")])
