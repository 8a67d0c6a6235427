"""One view's health, derived in one place from its catalog row and its streaming job's status.

``assess_view`` turns an ``incview.views`` row (``engine.postgres.view_catalog.ViewRecord``) and
the launcher's ``StreamingJobStatus`` into a ``ViewHealth``: whether the view exists, is being
populated, runs, is starting, or has a dead job (its process is gone, or its heartbeat is older
than ``heartbeat_timeout_s`` once the start-up grace after its launch has passed), plus the
figures the sensors and checks report (lag, last batch throughput, heartbeat age, state size).
Lag is the engine's own figure when the catalog carries one (``lag_ms``); otherwise the age of the
last heartbeat, which bounds the lag while the job keeps up (``lag_source`` says which). The
supervisor sensor and the ``lag_within`` check share this module; it must not start, stop or
populate anything, nor talk to Dagster.
"""

import contextlib
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from engine import ViewRecord
from incview_dagster.jobs import StreamingJobStatus

ABSENT = "absent"  # not in the catalog: never populated (or dropped)
POPULATING = "populating"  # a population or recovery is under way (or was interrupted)
RUNNING = "running"  # fresh heartbeat
STARTING = "starting"  # launched within the start-up grace, no heartbeat since the launch yet
DEAD = "dead"  # the process is gone, or no fresh heartbeat after the grace


@dataclass(frozen=True)
class ViewHealth:
    name: str
    state: str  # ABSENT | POPULATING | RUNNING | STARTING | DEAD
    phase: str | None  # the catalog's phase: populating | running | error | sink_error
    reason: str  # why ``state`` (for logs and metadata)
    heartbeat_age_s: float | None
    lag_ms: float | None
    lag_source: str | None  # engine | heartbeat_age
    rows_per_s: float | None  # of the last applied batch
    state_bytes: int
    last_error: str | None
    last_lsn: int | None

    @property
    def needs_recovery(self) -> bool:
        """The streaming job died, or the sink failed (seed 003: back to population)."""
        return self.state == DEAD or self.phase == "sink_error"


def directory_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def assess_view(
    name: str,
    record: ViewRecord | None,
    job: StreamingJobStatus,
    state_dir: Path,
    *,
    heartbeat_timeout_s: float = 30.0,
    startup_grace_s: float = 180.0,
    now: datetime | None = None,
) -> ViewHealth:
    now = now or datetime.now(UTC)
    if record is None:
        return ViewHealth(
            name, ABSENT, None, "not in incview.views", None, None, None, None, 0, None, None
        )
    beat = record.heartbeat
    age = (now - beat).total_seconds() if beat is not None else None
    fresh = age is not None and age <= heartbeat_timeout_s
    since_launch = (now - job.launched_at).total_seconds() if job.launched_at else None
    beat_since_launch = beat is not None and job.launched_at is not None and beat >= job.launched_at
    runner_host = getattr(record, "runner_host", None)
    ours = runner_host in (None, socket.gethostname())

    stopped = hasattr(record, "runner_pid") and record.runner_pid is None
    if record.phase == "populating":
        state, reason = POPULATING, "phase populating"
    elif job.pid is not None and not job.alive and ours:
        state, reason = DEAD, f"streaming job process {job.pid} is gone (log: {job.log_path})"
    elif job.alive and not beat_since_launch and (since_launch or 0.0) <= startup_grace_s:
        state, reason = STARTING, f"launched {since_launch or 0.0:.0f} s ago, no heartbeat yet"
    elif stopped:
        state, reason = DEAD, "no process runs its streaming job (stopped, or never started)"
    elif fresh:
        state, reason = RUNNING, f"heartbeat {age:.1f} s ago"
    elif age is None:
        state, reason = DEAD, "no streaming job has ever reported a heartbeat"
    else:
        state, reason = DEAD, f"last heartbeat {age:.0f} s ago (limit {heartbeat_timeout_s:g} s)"

    engine_lag = getattr(record, "lag_ms", None)
    if engine_lag is not None:
        lag, lag_source = float(engine_lag), "engine"
    elif state == RUNNING and age is not None:
        lag, lag_source = max(0.0, age * 1000.0), "heartbeat_age"
    else:
        lag, lag_source = None, None
    rate = None
    if record.last_batch_rows is not None and record.last_batch_ms:
        rate = record.last_batch_rows / (record.last_batch_ms / 1000.0)
    return ViewHealth(
        name,
        state,
        record.phase,
        reason,
        age,
        lag,
        lag_source,
        rate,
        directory_bytes(Path(state_dir) / "views" / name),
        record.last_error,
        record.last_lsn,
    )
