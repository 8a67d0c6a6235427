"""Asset checks of a view: ``matches_full_recompute`` and ``lag_within``.

``matches_full_recompute`` runs the view's SQL in Postgres and compares it with the result table,
``EXCEPT ALL`` both ways (result tables are multisets), in one REPEATABLE READ snapshot and in
the TimeZone the view was created in (``incview.views.time_zone``: its results over timestamptz
depend on it, docs/sql.md "Time zones"); it fails
with the counts and a sample of the differing rows. While writers are active the result table may
trail the sources by the view's lag, so a difference is re-checked a few times (``attempts``,
``retry_delay_s``) before it counts: a wrong view keeps differing, a lagging one catches up.
``lag_within`` reads the view's health (``incview_dagster.health``) and passes when its lag is at
most the threshold (``IncView.max_lag_s`` or the factory's); right after a population it first
waits (up to ``startup_wait_s``) for the newly launched streaming job's first heartbeat. Checks
only read: they must not populate views or start jobs.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    MetadataValue,
    asset_check,
)

from incview_dagster.health import DEAD, RUNNING, STARTING, assess_view
from incview_dagster.resource import IncViewResource
from incview_dagster.translator import IncViewTranslator
from incview_dagster.view import IncView

SAMPLE_ROWS = 5


@dataclass(frozen=True)
class RecomputeComparison:
    """Rows the query has that the result table lacks (missing) and the reverse (extra)."""

    missing: int
    extra: int
    columns: list[str]
    missing_sample: list[tuple]
    extra_sample: list[tuple]

    @property
    def equal(self) -> bool:
        return self.missing == 0 and self.extra == 0


def compare_with_full_recompute(
    conn: psycopg.Connection, view: IncView, sample: int = SAMPLE_ROWS
) -> RecomputeComparison:
    """Compare ``view``'s result table with its SQL run by Postgres, in one snapshot."""
    table = psycopg.sql.Identifier(view.result_schema, view.result_table)
    query = psycopg.sql.SQL(view.sql.strip().rstrip(";"))
    only_query = psycopg.sql.SQL("(({q}) EXCEPT ALL SELECT * FROM {t})").format(q=query, t=table)
    only_table = psycopg.sql.SQL("(SELECT * FROM {t} EXCEPT ALL ({q}))").format(q=query, t=table)
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        _use_time_zone_of(conn, view.name)
        missing = conn.execute(
            psycopg.sql.SQL("SELECT count(*) FROM {} d").format(only_query)
        ).fetchone()[0]
        extra = conn.execute(
            psycopg.sql.SQL("SELECT count(*) FROM {} d").format(only_table)
        ).fetchone()[0]
        cur = conn.execute(
            psycopg.sql.SQL("SELECT * FROM {} d LIMIT {}").format(
                only_query, psycopg.sql.Literal(sample)
            )
        )
        columns = [c.name for c in cur.description or []]
        missing_rows = cur.fetchall()
        extra_rows = conn.execute(
            psycopg.sql.SQL("SELECT * FROM {} d LIMIT {}").format(
                only_table, psycopg.sql.Literal(sample)
            )
        ).fetchall()
    return RecomputeComparison(int(missing), int(extra), columns, missing_rows, extra_rows)


def _use_time_zone_of(conn: psycopg.Connection, name: str) -> None:
    """SET LOCAL TimeZone to the one view ``name`` was created in (when the catalog has it)."""
    has_column = conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('incview.views') "
        "AND attname = 'time_zone' AND NOT attisdropped"
    ).fetchone()
    if has_column is None:
        return
    row = conn.execute("SELECT time_zone FROM incview.views WHERE name = %s", (name,)).fetchone()
    if row is not None and row[0] is not None:
        conn.execute("SELECT set_config('TimeZone', %s, true)", (row[0],))


def _markdown_rows(columns: Sequence[str], rows: Sequence[tuple]) -> str:
    if not rows:
        return "(none)"
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join(
        "| " + " | ".join("NULL" if v is None else str(v) for v in r) + " |\n" for r in rows
    )
    return head + body


def build_matches_full_recompute_check(
    view: IncView,
    translator: IncViewTranslator,
    *,
    attempts: int = 3,
    retry_delay_s: float = 2.0,
) -> AssetChecksDefinition:
    key = translator.get_asset_key(view)

    @asset_check(
        asset=key,
        name="matches_full_recompute",
        description=(
            f"The result table {view.qualified_name} equals the view's SQL run by Postgres "
            "(EXCEPT ALL both ways); a sample of the differing rows when it does not."
        ),
    )
    def _matches_full_recompute(
        context: AssetCheckExecutionContext, incview: IncViewResource
    ) -> AssetCheckResult:
        with incview.connect() as conn:
            for attempt in range(1, attempts + 1):
                cmp = compare_with_full_recompute(conn, view)
                if cmp.equal:
                    break
                if attempt < attempts:
                    context.log.info(
                        f"{view.name}: {cmp.missing} missing, {cmp.extra} extra rows; "
                        f"re-checking in {retry_delay_s:g} s (the view may be catching up)"
                    )
                    time.sleep(retry_delay_s)
        metadata: dict[str, Any] = {
            "missing_rows": cmp.missing,
            "extra_rows": cmp.extra,
            "attempts": attempt,
        }
        if not cmp.equal:
            metadata["missing_sample"] = MetadataValue.md(
                _markdown_rows(cmp.columns, cmp.missing_sample)
            )
            metadata["extra_sample"] = MetadataValue.md(
                _markdown_rows(cmp.columns, cmp.extra_sample)
            )
            metadata["diff_sample"] = MetadataValue.json(
                {
                    "columns": cmp.columns,
                    "missing": [[_jsonable(v) for v in r] for r in cmp.missing_sample],
                    "extra": [[_jsonable(v) for v in r] for r in cmp.extra_sample],
                }
            )
        return AssetCheckResult(
            passed=cmp.equal,
            severity=AssetCheckSeverity.ERROR,
            metadata=metadata,
            description=None
            if cmp.equal
            else (
                f"{view.qualified_name} differs from its query: {cmp.missing} rows missing, "
                f"{cmp.extra} extra; re-populate it (materialize the asset) and report the SQL"
            ),
        )

    return _matches_full_recompute


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def build_lag_within_check(
    view: IncView,
    translator: IncViewTranslator,
    *,
    max_lag_s: float = 60.0,
    heartbeat_timeout_s: float = 30.0,
    startup_grace_s: float = 180.0,
    startup_wait_s: float = 120.0,
) -> AssetChecksDefinition:
    key = translator.get_asset_key(view)
    threshold_s = view.max_lag_s if view.max_lag_s is not None else max_lag_s

    @asset_check(
        asset=key,
        name="lag_within",
        description=(
            f"The view's lag (how far its result table trails the sources) is at most "
            f"{threshold_s:g} s and its streaming job is alive."
        ),
    )
    def _lag_within(
        context: AssetCheckExecutionContext, incview: IncViewResource
    ) -> AssetCheckResult:
        jobs = incview.streaming_jobs()
        deadline = time.monotonic() + startup_wait_s
        while True:
            records = incview.view_records()
            health = assess_view(
                view.name,
                records.get(view.name),
                jobs.status(view.name),
                incview.state_path,
                heartbeat_timeout_s=heartbeat_timeout_s,
                startup_grace_s=startup_grace_s,
                now=datetime.now(UTC),
            )
            if health.state != STARTING or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        passed = health.state == RUNNING and health.lag_ms is not None
        passed = passed and health.lag_ms <= threshold_s * 1000.0
        metadata: dict[str, Any] = {
            "job_state": health.state,
            "threshold_ms": threshold_s * 1000.0,
            "phase": health.phase or "-",
        }
        if health.lag_ms is not None:
            metadata["lag_ms"] = health.lag_ms
            metadata["lag_source"] = health.lag_source
        if health.heartbeat_age_s is not None:
            metadata["heartbeat_age_s"] = health.heartbeat_age_s
        if passed:
            description = None
        elif health.state in (DEAD, STARTING):
            description = f"the streaming job of {view.name} is not running: {health.reason}"
        elif health.lag_ms is None:
            description = f"{view.name} has no lag figure yet ({health.reason})"
        else:
            description = f"{view.name} lags {health.lag_ms:.0f} ms, more than {threshold_s:g} s"
        return AssetCheckResult(
            passed=passed,
            severity=AssetCheckSeverity.WARN,
            metadata=metadata,
            description=description,
        )

    return _lag_within


def build_view_checks(
    view: IncView, translator: IncViewTranslator, **lag_settings: float
) -> list[AssetChecksDefinition]:
    """Both checks of ``view``; ``lag_settings`` go to ``build_lag_within_check``."""
    return [
        build_matches_full_recompute_check(view, translator),
        build_lag_within_check(view, translator, **lag_settings),
    ]
