"""incview in Dagster: views as assets with lineage from their SQL, supervised streaming jobs, checks.

Declare views (``IncView``), hand them to ``incremental_views`` (or the finer-grained
``build_view_assets`` / ``build_view_checks`` / ``build_supervisor_sensor`` /
``build_recovery_sensor``) with an ``IncViewResource``, and ``dagster dev`` shows the Postgres
source tables, the views with their lineage, metadata and checks; the supervisor sensor populates
new views and recovers dead streaming jobs. Customise names with an ``IncViewTranslator``
subclass. Roles: ``view`` (declaration), ``lineage`` (SQL -> tables), ``translator`` (keys,
groups), ``resource`` (database, state, Spark, population), ``jobs`` (streaming-job launcher),
``health`` (liveness and lag), ``assets`` (factory), ``checks``, ``sensors``. This package adds
Dagster around ``engine``; it must not maintain views itself.

Example::

    from incview_dagster import IncView, IncViewResource, incremental_views

    defs = incremental_views(
        [IncView("order_totals",
                 "SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id")],
        resource=IncViewResource(dsn="postgresql://app@localhost/shop", runner="local"),
    )
"""

from incview_dagster.assets import (
    build_view_assets,
    database_views,
    incremental_views,
    sql_code_version,
)
from incview_dagster.checks import (
    build_lag_within_check,
    build_matches_full_recompute_check,
    build_view_checks,
    compare_with_full_recompute,
)
from incview_dagster.health import ViewHealth, assess_view
from incview_dagster.jobs import StreamingJobLauncher, StreamingJobStatus
from incview_dagster.lineage import source_tables, view_lineage
from incview_dagster.resource import IncViewResource, PopulationReport
from incview_dagster.sensors import build_recovery_sensor, build_supervisor_sensor
from incview_dagster.translator import IncViewTranslator
from incview_dagster.view import IncView

__all__ = [
    "IncView",
    "IncViewResource",
    "IncViewTranslator",
    "PopulationReport",
    "StreamingJobLauncher",
    "StreamingJobStatus",
    "ViewHealth",
    "assess_view",
    "build_lag_within_check",
    "build_matches_full_recompute_check",
    "build_recovery_sensor",
    "build_supervisor_sensor",
    "build_view_assets",
    "build_view_checks",
    "compare_with_full_recompute",
    "database_views",
    "incremental_views",
    "source_tables",
    "sql_code_version",
    "view_lineage",
]
