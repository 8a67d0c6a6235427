"""The sensors that keep views running: the supervisor and the recovery-on-failure sensor.

``build_supervisor_sensor`` (default RUNNING) reads, every ``interval_s``, each declared view's
row in ``incview.views`` and its streaming job's status (``incview_dagster.health``) and requests
runs of the view's asset: a *population* for a view never populated (once its Postgres source
tables exist) or whose SQL changed, a *resume* (the streaming job restarted from the view's
state, ``IncViewResource.resume``) for one whose job died or whose sink failed, and a *recovery*
(re-population) for one whose population was interrupted or whose resumed job died again. It never requests a run for a view while a run that
materializes it exists (QUEUED, NOT_STARTED, STARTING, STARTED, CANCELING), leaves views whose
latest run failed to the recovery sensor, and caps its own recoveries of a job that keeps dying
(``max_recoveries``, exponential backoff from ``backoff_s``; the count resets once the job
has been running for ``stable_after_s`` after its last recovery). It reports each view's
health as an ``AssetObservation`` (lag, throughput, rows, state size) and, when the result table
changed since the last tick (the view's ``last_change_lsn`` moved; batches that change no result
row move only ``last_lsn``), a run-less ``AssetMaterialization``, so downstream automation reacts
to content changes only. The cursor (JSON) keeps the LSNs seen and the recovery counts. Given a
``commander_job`` (``include_database_views=True``), it also requests a run of that job whenever
the commander's process (``incview_dagster.commander_job``) is not alive, and never re-creates a
view declared in the database that was dropped there.

``build_recovery_sensor`` is a ``run_failure_sensor``: when a run fails in a view's step, it
requests a recovery run of those views tagged with the attempt number and a ``not_before`` time
(exponential backoff; the view asset waits until then), until ``max_attempts``.
Sensors decide and request; they must not populate views or start jobs themselves.
"""

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunFailureSensorContext,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    sensor,
)

from engine import lsn_text
from incview_dagster.health import POPULATING, RUNNING, ViewHealth, assess_view
from incview_dagster.jobs import COMMANDER_JOB
from incview_dagster.lineage import view_lineage
from incview_dagster.resource import IncViewResource
from incview_dagster.translator import IncViewTranslator
from incview_dagster.view import IncView

# A run "exists" for a view while it is in one of these statuses.
ACTIVE_RUN_STATUSES = (
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
)
TAG_VIEW = "incview/view"
TAG_REASON = "incview/reason"  # population | redefinition | resume | recovery | commander
TAG_ATTEMPT = "incview/attempt"  # recovery attempt after failed runs (0: first request)
TAG_NOT_BEFORE = "incview/not_before"  # ISO time the view asset waits for (backoff)
TAG_DECLARED_IN = "incview/declared_in"  # "database": a view created in SQL (CALL ...)


def backoff_seconds(attempt: int, base_s: float, max_s: float) -> float:
    """``base_s`` doubled per attempt after the first, capped at ``max_s``."""
    return min(max_s, base_s * (2 ** max(0, attempt - 1)))


def _views_in_run(run: Any, keys: dict[AssetKey, IncView]) -> list[IncView]:
    selection = run.asset_selection
    if selection:
        return [view for key, view in keys.items() if key in selection]
    name = run.tags.get(TAG_VIEW)
    return [v for v in keys.values() if v.name == name]


def active_runs_by_view(instance: Any, keys: dict[AssetKey, IncView]) -> dict[str, str]:
    """View name -> id of a run that exists (see ``ACTIVE_RUN_STATUSES``) and materializes it."""
    found: dict[str, str] = {}
    for run in instance.get_runs(filters=RunsFilter(statuses=list(ACTIVE_RUN_STATUSES))):
        for view in _views_in_run(run, keys):
            found.setdefault(view.name, run.run_id)
    return found


def latest_run_failed(instance: Any, key: AssetKey) -> str | None:
    """Id of the latest run planned to materialize ``key`` if it failed, else None."""
    info = instance.get_latest_planned_materialization_info(key)
    if info is None:
        return None
    run = instance.get_run_by_id(info.run_id)
    if run is not None and run.status == DagsterRunStatus.FAILURE:
        return run.run_id
    return None


def _missing_sources(incview: IncViewResource, tables: Sequence[tuple[str, str]]) -> list[str]:
    if not tables:
        return []
    names = [f'"{s}"."{t}"' for s, t in tables]
    with incview.connect() as conn:
        rows = conn.execute(
            "SELECT n, to_regclass(n) IS NULL FROM unnest(%s::text[]) AS n", (names,)
        ).fetchall()
    return [f"{s}.{t}" for (s, t), (_n, missing) in zip(tables, rows, strict=True) if missing]


def _health_metadata(health: ViewHealth, rows: int | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "job_state": health.state,
        "phase": health.phase or "-",
        "state_bytes": health.state_bytes,
        "reason": health.reason,
    }
    if health.lag_ms is not None:
        metadata["lag_ms"] = health.lag_ms
        metadata["lag_source"] = health.lag_source
    if health.rows_per_s is not None:
        metadata["rows_per_s"] = round(health.rows_per_s, 1)
    if health.heartbeat_age_s is not None:
        metadata["heartbeat_age_s"] = round(health.heartbeat_age_s, 2)
    if rows is not None:
        metadata["dagster/row_count"] = rows
    if health.last_lsn is not None:
        metadata["last_lsn"] = lsn_text(health.last_lsn)
    if health.last_error:
        metadata["last_error"] = health.last_error
    return metadata


EXACT_COUNT_BELOW = 1_000_000  # larger result tables report Postgres' estimate (reltuples)


def _row_counts(incview: IncViewResource, views: Sequence[IncView]) -> dict[str, int]:
    """Row count of each view's result table: exact for small tables, else the planner's
    estimate (a full count of a large table every tick would cost more than it tells)."""
    out: dict[str, int] = {}
    if not views:
        return out
    import psycopg

    with incview.connect() as conn:
        for view in views:
            ident = psycopg.sql.Identifier(view.result_schema, view.result_table)
            row = conn.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                (ident.as_string(conn),),
            ).fetchone()
            if row is None:
                continue  # no result table (yet)
            if row[0] < EXACT_COUNT_BELOW:  # -1: never analyzed
                row = conn.execute(
                    psycopg.sql.SQL("SELECT count(*) FROM {}").format(ident)
                ).fetchone()
            out[view.name] = int(row[0])
    return out


def build_supervisor_sensor(
    views: Sequence[IncView],
    translator: IncViewTranslator,
    job: Any,
    *,
    name: str = "incview_supervisor",
    interval_s: int = 30,
    heartbeat_timeout_s: float = 30.0,
    startup_grace_s: float = 180.0,
    max_recoveries: int = 5,
    backoff_s: float = 30.0,
    max_backoff_s: float = 600.0,
    stable_after_s: float = 900.0,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
    commander_job: Any = None,
) -> SensorDefinition:
    """The supervisor sensor of ``views`` (see the module docstring); requests runs of ``job``,
    and of ``commander_job`` (when given) whenever the commander's process is not alive."""
    views = list(views)
    lineage = view_lineage(views)
    keys = {translator.get_asset_key(v): v for v in views}

    @sensor(
        name=name,
        jobs=[job] if commander_job is None else [job, commander_job],
        minimum_interval_seconds=interval_s,
        default_status=default_status,
        description=(
            "Supervises incview views: requests population of new views and recovery of views "
            "whose streaming job died; reports lag, throughput, rows and state size."
        ),
    )
    def _supervisor(context: SensorEvaluationContext, incview: IncViewResource) -> SensorResult:
        cursor = json.loads(context.cursor) if context.cursor else {}
        # the last_change_lsn seen per view (the last LSN whose batch changed result rows)
        seen_lsn: dict[str, int | None] = cursor.get("changed", {})
        recoveries: dict[str, dict[str, Any]] = cursor.get("recoveries", {})
        now = datetime.now(UTC)
        records = incview.view_records()
        jobs = incview.streaming_jobs()
        active = active_runs_by_view(context.instance, keys)
        rows = _row_counts(incview, [v for v in views if v.name in records])
        requests: list[RunRequest] = []
        events: list[Any] = []
        notes: list[str] = []
        if commander_job is not None:
            request = _commander_request(context, jobs, commander_job.name)
            if request is not None:
                requests.append(request)
        for key, view in keys.items():
            record = records.get(view.name)
            if record is None and view.tags.get(TAG_DECLARED_IN) == "database":
                notes.append(f"{view.name}: dropped in SQL (its asset goes on the next load)")
                continue
            health = assess_view(
                view.name,
                record,
                jobs.status(view.name),
                incview.state_path,
                heartbeat_timeout_s=heartbeat_timeout_s,
                startup_grace_s=startup_grace_s,
                now=now,
            )
            if record is not None:
                events.append(
                    AssetObservation(
                        asset_key=key, metadata=_health_metadata(health, rows.get(view.name))
                    )
                )
                lsn = record.last_change_lsn
                if view.name in seen_lsn and lsn is not None and lsn != seen_lsn[view.name]:
                    events.append(
                        AssetMaterialization(
                            asset_key=key,
                            description="the streaming job changed the result table",
                            metadata={
                                "last_lsn": lsn_text(record.last_lsn or lsn),
                                "last_change_lsn": lsn_text(lsn),
                                "dagster/row_count": rows.get(view.name, 0),
                                "incview/source": "streaming job (run-less)",
                            },
                        )
                    )
                seen_lsn[view.name] = lsn
            past = recoveries.get(view.name)
            if (
                health.state == RUNNING
                and past
                and (now - datetime.fromisoformat(past["at"])).total_seconds() > stable_after_s
            ):
                recoveries.pop(view.name)  # it has run long enough: a new failure starts over

            reason = _run_reason(view, record, health)
            if reason is None:
                continue
            if view.name in active:
                notes.append(f"{view.name}: {reason} waits, run {active[view.name]} exists")
                continue
            failed = latest_run_failed(context.instance, key)
            if failed is not None:
                notes.append(
                    f"{view.name}: latest run {failed} failed: left to the recovery sensor "
                    "(after its last attempt, materialize the view to try again)"
                )
                continue
            if reason in ("population", "redefinition"):
                missing = _missing_sources(incview, lineage[view.name].source_tables)
                if missing:
                    notes.append(f"{view.name}: waiting for source tables {', '.join(missing)}")
                    continue
            if reason == "recovery":
                past = recoveries.get(view.name, {"n": 0, "at": None})
                if past["n"] == 0 and health.state != POPULATING:
                    # the job died (or its sink failed) with its state intact: restart it from
                    # there first; a job that dies again is re-populated next time
                    reason = "resume"
                if past["n"] >= max_recoveries:
                    notes.append(
                        f"{view.name}: {health.reason}; gave up after {past['n']} recoveries "
                        "(materialize it to try again)"
                    )
                    continue
                if past["at"] is not None:
                    wait = backoff_seconds(past["n"], backoff_s, max_backoff_s)
                    if (now - datetime.fromisoformat(past["at"])).total_seconds() < wait:
                        notes.append(f"{view.name}: recovery backoff ({wait:g} s)")
                        continue
                recoveries[view.name] = {"n": past["n"] + 1, "at": now.isoformat()}
            context.log.info(f"requesting {reason} of view {view.name}: {health.reason}")
            requests.append(
                RunRequest(
                    job_name=job.name,
                    asset_selection=[key],
                    tags={TAG_VIEW: view.name, TAG_REASON: reason, TAG_ATTEMPT: "0"},
                )
            )
        for note in notes:
            context.log.info(note)
        return SensorResult(
            run_requests=requests,
            asset_events=events,
            cursor=json.dumps({"changed": seen_lsn, "recoveries": recoveries}),
            skip_reason=None if requests else SkipReason("; ".join(notes) or "all views healthy"),
        )

    return _supervisor


def _commander_request(
    context: SensorEvaluationContext, jobs: Any, job_name: str
) -> RunRequest | None:
    """A run of the commander's job when its process is not alive and no such run exists."""
    if jobs.status(COMMANDER_JOB).alive:
        return None
    if context.instance.get_runs(
        filters=RunsFilter(job_name=job_name, statuses=list(ACTIVE_RUN_STATUSES)), limit=1
    ):
        return None
    context.log.info("requesting a start of the incview commander: its process is not running")
    return RunRequest(job_name=job_name, tags={TAG_REASON: "commander"})


def _run_reason(view: IncView, record: Any, health: ViewHealth) -> str | None:
    """Which run ``view`` needs now: population | redefinition | recovery | None."""
    if record is None:
        return "population"
    if record.sql != view.sql:
        return "redefinition"
    if health.state == POPULATING or health.needs_recovery:
        return "recovery"
    return None


def build_recovery_sensor(
    views: Sequence[IncView],
    translator: IncViewTranslator,
    job: Any,
    *,
    name: str = "incview_recovery",
    max_attempts: int = 3,
    backoff_s: float = 30.0,
    max_backoff_s: float = 600.0,
    interval_s: int = 30,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
) -> SensorDefinition:
    """A ``run_failure_sensor`` requesting recovery runs of views whose step failed."""
    keys = {translator.get_asset_key(v): v for v in views}
    by_op: dict[str, IncView] = {"__".join(k.path): v for k, v in keys.items()}

    @run_failure_sensor(
        name=name,
        request_job=job,
        minimum_interval_seconds=interval_s,
        default_status=default_status,
        description=(
            f"Requests recovery of incview views whose run failed, at most {max_attempts} "
            f"attempts with exponential backoff from {backoff_s:g} s."
        ),
    )
    def _recovery(context: RunFailureSensorContext):
        run = context.dagster_run
        failed_ops = {e.step_key for e in context.get_step_failure_events() if e.step_key}
        targets = [by_op[op] for op in sorted(failed_ops) if op in by_op]
        if not targets and not failed_ops:
            targets = _views_in_run(run, keys)  # failed before any step ran
        if not targets:
            return SkipReason(f"run {run.run_id} failed outside incview views")
        attempt = int(run.tags.get(TAG_ATTEMPT, "0")) + 1
        names = ", ".join(v.name for v in targets)
        if attempt > max_attempts:
            context.log.warning(
                f"views {names}: run {run.run_id} failed; gave up after {max_attempts} recovery "
                "attempts (fix the cause, then materialize the views)"
            )
            return SkipReason(f"{names}: gave up after {max_attempts} recovery attempts")
        delay = backoff_seconds(attempt, backoff_s, max_backoff_s)
        not_before = datetime.now(UTC) + timedelta(seconds=delay)
        tags = {
            TAG_REASON: "recovery",
            TAG_ATTEMPT: str(attempt),
            TAG_NOT_BEFORE: not_before.isoformat(),
            "incview/failed_run": run.run_id,
        }
        if len(targets) == 1:
            tags[TAG_VIEW] = targets[0].name
        context.log.info(f"requesting recovery {attempt}/{max_attempts} of {names} in {delay:g} s")
        return RunRequest(asset_selection=[translator.get_asset_key(v) for v in targets], tags=tags)

    return _recovery
