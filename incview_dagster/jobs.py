"""Streaming-job launcher: starts, finds and stops each view's long-lived ``incview run`` process.

A view's running phase lives in its own detached process, ``incview run --view NAME`` (the
engine's CLI, run as ``python -m engine.cli`` with the interpreter of the caller), started in a
new session so it outlives the Dagster run that launched it and never holds a run open. Its pid is
in ``STATE_DIR/jobs/NAME.pid`` (written after the launch; the file's mtime is the launch time) and
its output goes to ``STATE_DIR/jobs/NAME.log``. ``stop`` sends SIGTERM (the engine stops cleanly),
waits, then SIGKILLs. ``lock`` serialises everything that touches one view's state (population,
recovery, restart) across processes with ``flock`` on ``STATE_DIR/jobs/NAME.lock``: RocksDB state
is single-process. The DSN reaches the job through ``INCVIEW_DSN`` (never the command line, where
``ps`` shows it), the Spark settings through ``INCVIEW_SPARK_CONF`` (JSON). The commander's process
(``COMMANDER_JOB``: ``python -m incview_dagster.commander_job``, which answers ``CALL
incview.create_view`` and starts the job of each view it creates) is launched, found and stopped
the same way under the name ``COMMANDER_JOB``. This module starts and stops processes only: it
must not populate views or read the catalog.
"""

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import engine
from engine import MEMORY_MB_ENV

# The directory holding the ``engine`` package: the job imports it from there, whatever its cwd.
_ENGINE_ROOT = str(Path(engine.__file__).resolve().parent.parent)


@dataclass(frozen=True)
class StreamingJobStatus:
    """What the launcher knows of a view's job from its pid file and ``/proc``."""

    view: str
    pid: int | None  # None: never launched from this state dir (or the pid file was removed)
    alive: bool
    launched_at: datetime | None
    log_path: Path


# the launcher's name of the commander's process: in schema incview, which no view may use
COMMANDER_JOB = "incview.commander"
COMMANDER_MODULE = "incview_dagster.commander_job"


def _process_alive(pid: int, view: str) -> bool:
    """``pid`` runs (not a zombie) and, where ``/proc`` tells, is that view's ``run`` process
    (or, for ``COMMANDER_JOB``, the commander's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no /proc: trust kill(0)
    try:
        stat = (proc / "stat").read_text()
        if stat[stat.rindex(")") + 2 :].startswith(("Z", "X")):
            return False
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if view == COMMANDER_JOB:
        return COMMANDER_MODULE.encode() in cmdline
    return b"run" in cmdline and view.encode() in cmdline


class StreamingJobLauncher:
    """Starts and stops the streaming jobs of the views kept under ``state_dir``."""

    def __init__(
        self,
        state_dir: str | Path,
        dsn: str | None,
        runner: str,
        spark_conf: Mapping[str, str] | None = None,
        python: str = sys.executable,
        memory_mb: int | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).absolute()
        self.dsn = dsn
        self.runner = runner
        self.spark_conf = dict(spark_conf or {})
        self.memory_mb = memory_mb  # each job's budget for its views' state (None: its env's)
        self.python = python
        self.jobs_dir = self.state_dir / "jobs"

    # -- files -----------------------------------------------------------------------------
    def pid_path(self, view: str) -> Path:
        return self.jobs_dir / f"{view}.pid"

    def log_path(self, view: str) -> Path:
        return self.jobs_dir / f"{view}.log"

    def command(self, view: str) -> list[str]:
        if view == COMMANDER_JOB:
            return [
                self.python,
                "-m",
                COMMANDER_MODULE,
                "--state-dir",
                str(self.state_dir),
                "--runner",
                self.runner,
            ]
        return [
            self.python,
            "-m",
            "engine.cli",
            "--state-dir",
            str(self.state_dir),
            "--runner",
            self.runner,
            "run",
            "--view",
            view,
        ]

    @contextlib.contextmanager
    def lock(self, view: str, timeout_s: float = 600) -> Iterator[None]:
        """Hold the view's lock (population, recovery and restarts take turns)."""
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.jobs_dir / f"{view}.lock", "w") as f:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"view {view}: another process has held {f.name} for {timeout_s:g} s "
                            "(a population or recovery still running?); retry when it is done"
                        ) from None
                    time.sleep(0.2)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- status ----------------------------------------------------------------------------
    def status(self, view: str) -> StreamingJobStatus:
        path = self.pid_path(view)
        try:
            pid = int(path.read_text().strip())
            launched = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        except (OSError, ValueError):
            return StreamingJobStatus(view, None, False, None, self.log_path(view))
        return StreamingJobStatus(
            view, pid, _process_alive(pid, view), launched, self.log_path(view)
        )

    # -- start / stop ----------------------------------------------------------------------
    def job_env(self) -> dict[str, str]:
        """The environment a streaming job runs in: this process's, with the engine on the
        path and the database, Spark settings and memory budget of this launcher."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ENGINE_ROOT, env.get("PYTHONPATH")) if p)
        env.pop("INCVIEW_DSN", None)
        if self.dsn:
            env["INCVIEW_DSN"] = self.dsn
        if self.spark_conf:
            env["INCVIEW_SPARK_CONF"] = json.dumps(self.spark_conf)
        if self.memory_mb is not None:
            env[MEMORY_MB_ENV] = str(self.memory_mb)
        return env

    def start(self, view: str) -> StreamingJobStatus:
        """Launch the view's streaming job, detached; stops a running one first."""
        self.stop(view)
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        env = self.job_env()
        log = open(self.log_path(view), "ab")  # noqa: SIM115 - handed to the child
        try:
            log.write(f"\n--- {datetime.now(UTC).isoformat()} launched by Dagster\n".encode())
            log.flush()
            proc = subprocess.Popen(
                self.command(view),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(self.state_dir),
                start_new_session=True,
                close_fds=True,
            )
        finally:
            log.close()
        tmp = self.pid_path(view).with_suffix(".pid.tmp")
        tmp.write_text(f"{proc.pid}\n")
        tmp.replace(self.pid_path(view))
        return self.status(view)

    def stop(self, view: str, timeout_s: float = 60) -> bool:
        """SIGTERM the view's job and wait for it (SIGKILL after ``timeout_s``); True if one ran."""
        status = self.status(view)
        if status.pid is None:
            return False
        was_alive = status.alive
        if was_alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(status.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while _process_alive(status.pid, view) and time.monotonic() < deadline:
                _reap(status.pid)
                time.sleep(0.1)
            if _process_alive(status.pid, view):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(status.pid, signal.SIGKILL)
                while _process_alive(status.pid, view):
                    _reap(status.pid)
                    time.sleep(0.05)
        _reap(status.pid)
        self.pid_path(view).unlink(missing_ok=True)
        return was_alive

    def stop_all(self, timeout_s: float = 60) -> list[str]:
        """Stop every job with a pid file under the state dir; returns the views stopped."""
        if not self.jobs_dir.exists():
            return []
        return [
            p.name[: -len(".pid")]
            for p in sorted(self.jobs_dir.glob("*.pid"))
            if self.stop(p.name[: -len(".pid")], timeout_s)
        ]


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our child that exited (a zombie would look alive to kill(0))."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
