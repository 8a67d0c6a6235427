"""The demo's Dagster definitions: the four demo views over the demo shop schema, supervised.

``dagster dev`` (from the repo root, via ``workspace.yaml``) shows the demo's Postgres tables
(``pg/demo/*``), the four views of ``engine.demo`` with their lineage from SQL, their checks, the
population job and the supervisor and recovery sensors. Materialize ``demo_tables`` first (it
creates schema ``demo`` with the demo's data when the database lacks it), then the views; the
supervisor populates views that were never populated once their tables exist, and restarts dead
streaming jobs. Configuration comes from the environment: ``INCVIEW_DSN`` (default: the embedded
PostgreSQL under the state dir), ``INCVIEW_STATE_DIR`` (default ``.incview`` next to this file),
``INCVIEW_RUNNER`` (``spark``, the default, or ``local``), ``INCVIEW_SPARK_CONF`` (Spark settings
as a JSON object) and ``INCVIEW_DEMO_VIEWS`` (a comma-separated subset of the views, default all).
``incview demo --dagster`` (``./scripts/demo.sh --dagster``) sets them and starts ``dagster dev``. Loading this module touches no database.
"""

import json
import os
from pathlib import Path

from dagster import AssetExecutionContext, AssetSpec, Definitions, MaterializeResult, multi_asset

from engine import demo
from incview_dagster import IncView, IncViewResource, IncViewTranslator, incremental_views

HERE = Path(__file__).resolve().parent
DEMO_TABLES = ("customers", "products", "orders", "order_items")
DESCRIPTIONS = {
    "demo.revenue_by_segment": "Revenue and item count per customer segment (3-way join).",
    "demo.orders_with_customers": "Every order with its customer's name (LEFT JOIN).",
    "demo.top3_orders_per_customer": "Each customer's three largest orders (a top-k).",
    "demo.product_sales": "Lines and units sold per product, unsold products included.",
}

translator = IncViewTranslator()
selected = [n.strip() for n in os.environ.get("INCVIEW_DEMO_VIEWS", "").split(",") if n.strip()]
demo_views = [
    IncView(name, sql, group="demo", description=f"{DESCRIPTIONS[name]}\n\n```sql\n{sql}\n```")
    for name, sql in demo.VIEWS.items()
    if not selected or name in selected
]

incview = IncViewResource(
    dsn=os.environ.get("INCVIEW_DSN") or None,
    state_dir=os.environ.get("INCVIEW_STATE_DIR") or str(HERE / ".incview"),
    runner=os.environ.get("INCVIEW_RUNNER", "spark"),
    spark_conf=json.loads(os.environ.get("INCVIEW_SPARK_CONF") or "{}"),
)


@multi_asset(
    name="demo_tables",
    specs=[
        AssetSpec(
            translator.get_source_asset_key("demo", table),
            kinds={"postgres"},
            group_name="demo_sources",
            description=f"The demo shop's {table} table (schema demo, REPLICA IDENTITY FULL).",
            metadata={"dagster/table_name": f"demo.{table}"},
        )
        for table in DEMO_TABLES
    ],
)
def demo_tables(context: AssetExecutionContext, incview: IncViewResource):
    """Create schema ``demo`` with the demo's data (as ``incview demo`` does) if it is absent;
    an existing schema is left as it is."""
    with incview.connect() as conn:
        exists = conn.execute("SELECT to_regnamespace('demo') IS NOT NULL").fetchone()[0]
        if exists:
            context.log.info("schema demo exists: left as it is")
        else:
            demo.create_demo_schema(conn)
            context.log.info("created schema demo with the demo's data")
        for table in DEMO_TABLES:
            rows = conn.execute(f"SELECT count(*) FROM demo.{table}").fetchone()[0]
            yield MaterializeResult(
                asset_key=translator.get_source_asset_key("demo", table),
                metadata={"dagster/row_count": rows},
            )


defs = Definitions.merge(
    incremental_views(demo_views, resource=incview, translator=translator, declare_sources=False),
    Definitions(assets=[demo_tables]),
)
