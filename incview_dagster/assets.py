"""The factory: turns a list of ``IncView`` declarations into Dagster definitions.

``build_view_assets(views, translator)`` gives one asset per view (key from the translator,
``deps`` = its source tables' keys and the keys of the views it reads, lineage from the SQL
alone, see ``incview_dagster.lineage``) plus an external ``AssetSpec`` per Postgres source table
(kind ``postgres``). Materializing a view asset is its population or recovery
(``IncViewResource.populate``): stop its streaming job, populate in the run's process (the
Engine opens only that view), start the streaming job detached again; the run then ends, it never
holds the job. A run tagged ``incview/reason=resume`` (the supervisor's first answer to a dead
job) restarts the job from the view's state instead (``IncViewResource.resume``). It reports ``dagster/row_count``, the population time, the SQL, the EXPLAIN, the
result table's columns and the state directory. A run tagged ``incview/not_before`` (the
recovery sensor's backoff) first waits until that time. ``incremental_views(...)`` bundles the
assets, source specs, checks, both sensors, the population job and (optionally) the resource
into one ``Definitions``. The factory only builds definitions: population lives in the resource,
decisions in the sensors.

Example::

    from dagster import Definitions
    from incview_dagster import IncView, IncViewResource, incremental_views

    defs = incremental_views(
        [IncView("shop.order_totals",
                 "SELECT customer_id, sum(amount) AS total FROM shop.orders GROUP BY 1")],
        resource=IncViewResource(dsn="postgresql://app@db/shop", state_dir="/var/lib/incview"),
    )
"""

import hashlib
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    AssetSpec,
    Definitions,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableSchema,
    asset,
    define_asset_job,
)

from incview_dagster.checks import build_view_checks
from incview_dagster.commander_ops import build_commander_job
from incview_dagster.lineage import view_lineage
from incview_dagster.resource import IncViewResource, PopulationReport
from incview_dagster.sensors import (
    TAG_DECLARED_IN,
    TAG_NOT_BEFORE,
    TAG_REASON,
    build_recovery_sensor,
    build_supervisor_sensor,
)
from incview_dagster.translator import IncViewTranslator
from incview_dagster.view import IncView

RESOURCE_KEY = "incview"  # the resource the assets, checks and sensors ask for
POPULATION_JOB = "incview_population"
POOL = "incview_population"  # cap concurrent populations with a Dagster pool limit


def sql_code_version(sql: str) -> str:
    """The view asset's code version: a digest of its SQL (a changed SQL shows as stale)."""
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


def _materialize_metadata(view: IncView, report: PopulationReport) -> dict[str, Any]:
    return {
        "dagster/row_count": report.rows,
        "dagster/column_schema": TableSchema(
            columns=[TableColumn(name, type_) for name, type_ in report.result_columns]
        ),
        "incview/action": report.action,
        "incview/population_s": MetadataValue.float(round(report.seconds, 3)),
        **(
            {"incview/lag_ms": MetadataValue.float(round(report.lag_ms, 1))}
            if report.lag_ms is not None
            else {}
        ),
        **(
            {"incview/state_bytes": MetadataValue.int(report.state_bytes)}
            if report.state_bytes is not None
            else {}
        ),
        "incview/sql": MetadataValue.md(f"```sql\n{view.sql}\n```"),
        "incview/explain": MetadataValue.md(f"```\n{report.explain}\n```"),
        "incview/state_dir": MetadataValue.path(str(report.state_dir)),
        "incview/streaming_job_pid": report.job.pid or 0,
        "incview/streaming_job_log": MetadataValue.path(str(report.job.log_path)),
        **(
            {"incview/spark_startup_s": MetadataValue.float(round(report.spark_startup_s, 3))}
            if report.spark_startup_s is not None
            else {}
        ),
    }


def _wait_for_backoff(context: AssetExecutionContext) -> None:
    not_before = context.run.tags.get(TAG_NOT_BEFORE)
    if not not_before:
        return
    wait = (datetime.fromisoformat(not_before) - datetime.now(UTC)).total_seconds()
    if wait > 0:
        context.log.info(f"recovery backoff: waiting {wait:.0f} s (until {not_before})")
        time.sleep(wait)


def _build_view_asset(
    view: IncView, deps: list[AssetKey], translator: IncViewTranslator
) -> AssetsDefinition:
    @asset(
        key=translator.get_asset_key(view),
        deps=deps,
        group_name=translator.get_group_name(view),
        description=translator.get_description(view),
        owners=list(translator.get_owners(view)) or None,
        tags=dict(translator.get_tags(view)) or None,
        metadata=dict(translator.get_metadata(view)),
        kinds={"spark", "postgres"},
        code_version=sql_code_version(view.sql),
        pool=POOL,
    )
    def _view_asset(context: AssetExecutionContext, incview: IncViewResource) -> MaterializeResult:
        _wait_for_backoff(context)
        if context.run.tags.get(TAG_REASON) == "resume":
            report = incview.resume(view, log=context.log)
        else:
            report = incview.populate(view, log=context.log)
        return MaterializeResult(metadata=_materialize_metadata(view, report))

    return _view_asset


def build_view_assets(
    views: Sequence[IncView],
    translator: IncViewTranslator | None = None,
    *,
    declare_sources: bool = True,
) -> list[AssetsDefinition | AssetSpec]:
    """One asset per view and (``declare_sources``) one ``AssetSpec`` per Postgres source table.

    Pass ``declare_sources=False`` when other assets of the code location already produce the
    source tables under the translator's source keys (the lineage then links to those)."""
    translator = translator or IncViewTranslator()
    lineage = view_lineage(views)
    by_name = {v.name: v for v in views}
    out: list[AssetsDefinition | AssetSpec] = []
    sources: set[tuple[str, str]] = set()
    for view in views:
        entry = lineage[view.name]
        deps = [translator.get_source_asset_key(s, t) for s, t in entry.source_tables]
        deps += [translator.get_asset_key(by_name[n]) for n in entry.upstream_views]
        sources.update(entry.source_tables)
        out.append(_build_view_asset(view, deps, translator))
    if declare_sources:
        for schema, table in sorted(sources):
            out.append(
                AssetSpec(
                    translator.get_source_asset_key(schema, table),
                    kinds={"postgres"},
                    group_name=translator.get_source_group_name(schema, table),
                    description=translator.get_source_description(schema, table),
                    metadata={"dagster/table_name": f"{schema}.{table}"},
                )
            )
    return out


def database_views(resource: IncViewResource, declared: Sequence[IncView] = ()) -> list[IncView]:
    """The catalog's views (``incview.views``: e.g. created with ``CALL incview.create_view``)
    that ``declared`` does not name (by result table), as ``IncView`` declarations (tagged
    ``TAG_DECLARED_IN``: the supervisor never re-creates one dropped in SQL)."""
    taken = {v.qualified_name for v in declared}
    out = []
    for record in resource.view_records().values():
        view = IncView(
            record.name,
            record.sql,
            description=f"incview view {record.name}, declared in the database "
            "(CALL incview.create_view)",
            tags={TAG_DECLARED_IN: "database"},
        )
        if record.phase != "dropping" and view.qualified_name not in taken:
            taken.add(view.qualified_name)
            out.append(view)
    return out


def incremental_views(
    views: Sequence[IncView],
    *,
    resource: IncViewResource | None = None,
    translator: IncViewTranslator | None = None,
    declare_sources: bool = True,
    max_lag_s: float = 60.0,
    heartbeat_timeout_s: float = 30.0,
    startup_grace_s: float = 180.0,
    supervisor_interval_s: int = 30,
    max_recovery_attempts: int = 3,
    recovery_backoff_s: float = 30.0,
    include_database_views: bool = False,
) -> Definitions:
    """Everything Dagster needs for ``views``: assets, source specs, the two checks per view,
    the population job, the supervisor and recovery sensors, and ``resource`` (under the key
    ``incview``) when given. Merge with your own with ``Definitions.merge``.

    ``include_database_views``: also the views of the database's catalog (those created in SQL
    with ``CALL incview.create_view``, read through ``resource`` when the code location loads);
    a view declared here and in the database is one asset, as declared here. The supervisor then
    also keeps the commander's process running (job ``incview_commander``), which answers those
    CALLs and starts each new view's streaming job at once, before the next load."""
    translator = translator or IncViewTranslator()
    views = list(views)
    if include_database_views:
        if resource is None:
            raise ValueError("include_database_views=True needs resource=IncViewResource(...)")
        views += database_views(resource, views)
    assets = build_view_assets(views, translator, declare_sources=declare_sources)
    keys = [translator.get_asset_key(v) for v in views]
    job = define_asset_job(
        POPULATION_JOB,
        selection=AssetSelection.assets(*keys),
        description="Population and recovery runs of incview views (one view per run from the sensors).",
    )
    checks = [
        check
        for view in views
        for check in build_view_checks(
            view,
            translator,
            max_lag_s=max_lag_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
            startup_grace_s=startup_grace_s,
        )
    ]
    commander = build_commander_job() if include_database_views else None
    sensors = [
        build_supervisor_sensor(
            views,
            translator,
            job,
            commander_job=commander,
            interval_s=supervisor_interval_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
            startup_grace_s=startup_grace_s,
            backoff_s=recovery_backoff_s,
        ),
        build_recovery_sensor(
            views,
            translator,
            job,
            max_attempts=max_recovery_attempts,
            backoff_s=recovery_backoff_s,
        ),
    ]
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=[job] if commander is None else [job, commander],
        sensors=sensors,
        resources={RESOURCE_KEY: resource} if resource is not None else None,
    )
