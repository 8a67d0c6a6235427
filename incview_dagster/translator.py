"""``IncViewTranslator``: how incview views and their source tables appear in Dagster.

Like dagster-dbt's ``DagsterDbtTranslator``: subclass it and override a ``get_*`` hook to change
asset keys, groups, descriptions, owners, tags or metadata; pass an instance to
``build_view_assets(..., translator=...)``. Defaults: a view ``shop.order_totals`` is the asset
``["views", "shop", "order_totals"]`` in group ``incview`` (or ``IncView.group``), a source table
``shop.orders`` is ``["pg", "shop", "orders"]`` with kind ``postgres``. Downstream user assets
depend on a view by its asset key. This module decides names only: it must not touch a database.

Example::

    from dagster import AssetKey
    from incview_dagster import IncViewTranslator

    class WarehouseTranslator(IncViewTranslator):
        def get_source_asset_key(self, schema, table):
            return AssetKey(["warehouse", schema, table])  # match keys of the loading assets
"""

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import AssetKey

from incview_dagster.view import IncView

DEFAULT_GROUP = "incview"
SOURCE_GROUP = "postgres_sources"


class IncViewTranslator:
    """Maps views and source tables to Dagster asset properties; override any ``get_*``."""

    def get_asset_key(self, view: IncView) -> AssetKey:
        return AssetKey(["views", view.result_schema, view.result_table])

    def get_source_asset_key(self, schema: str, table: str) -> AssetKey:
        return AssetKey(["pg", schema, table])

    def get_group_name(self, view: IncView) -> str:
        return view.group or DEFAULT_GROUP

    def get_source_group_name(self, schema: str, table: str) -> str | None:
        return SOURCE_GROUP

    def get_description(self, view: IncView) -> str:
        if view.description:
            return view.description
        return (
            f"Incremental view {view.name}: result table {view.qualified_name}, kept up to date "
            f"by incview from the database's change stream.\n\n```sql\n{view.sql}\n```"
        )

    def get_source_description(self, schema: str, table: str) -> str:
        return f"PostgreSQL table {schema}.{table}, read by incview views."

    def get_owners(self, view: IncView) -> Sequence[str]:
        return list(view.owners or [])

    def get_tags(self, view: IncView) -> Mapping[str, str]:
        return dict(view.tags)

    def get_metadata(self, view: IncView) -> Mapping[str, Any]:
        return {
            "incview/view": view.name,
            "incview/result_table": view.qualified_name,
            "dagster/table_name": view.qualified_name,
        }
