"""``dagster dev`` on the repository's demo definitions, started, awaited and stopped from Python.

``DagsterDev`` runs ``dagster dev -w workspace.yaml`` (``definitions.py``: the demo's tables and
views) on 127.0.0.1 in its own session with SIGINT at its default (dagster dev maps SIGTERM to
SIGINT's handler; a SIGINT ignored by whoever started us must not reach it ignored), waits until
its code location is LOADED (GraphQL), and stops it with SIGTERM (SIGKILL to its process group
after a timeout). ``serve_demo`` is ``incview demo --dagster``: it serves the demo with the
given database (default: the embedded PostgreSQL under the demo's state dir) and runner, prints
the URL, and on Ctrl-C stops ``dagster dev`` and the views' streaming jobs. Configuration reaches
``definitions.py`` through the environment (``INCVIEW_DSN``, ``INCVIEW_STATE_DIR``,
``INCVIEW_RUNNER``, ``INCVIEW_SPARK_CONF``). This module starts processes only: it must not
materialize anything itself.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKSPACE = REPO / "workspace.yaml"
LOCATION = "incview_demo"

_LOCATIONS = """
{ workspaceOrError { __typename ... on Workspace { locationEntries {
    name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } }
} } } }
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class DagsterDevError(RuntimeError):
    """``dagster dev`` exited, or its code location did not load, in time."""


class DagsterDev:
    """One ``dagster dev`` process: ``start()``, ``url``, ``graphql(query)``, ``stop()``."""

    def __init__(
        self,
        dagster_home: str | Path,
        env: Mapping[str, str] | None = None,
        *,
        port: int | None = None,
        workspace: str | Path = WORKSPACE,
        log_path: str | Path | None = None,
    ) -> None:
        self.home = Path(dagster_home).absolute()
        self.port = port or free_port()
        self.workspace = Path(workspace).absolute()
        self.env = {**os.environ, **(env or {}), "DAGSTER_HOME": str(self.home)}
        self.log_path = Path(log_path or self.home / "dagster_dev.log")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def graphql(self, query: str, **variables) -> dict:
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", body, {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = json.load(response)
        if "errors" in payload:
            raise DagsterDevError(f"GraphQL errors: {payload['errors']}")
        return payload["data"]

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def start(self, timeout_s: float = 180) -> "DagsterDev":
        """Start ``dagster dev`` and return once its code location is LOADED."""
        if not self.workspace.exists():
            raise DagsterDevError(
                f"{self.workspace} not found: `dagster dev` on the demo runs from a checkout of "
                "incview (workspace.yaml and definitions.py at its root)"
            )
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "dagster.yaml"
        if not config.exists():
            config.write_text("telemetry:\n  enabled: false\n")
        dagster = str(Path(sys.executable).parent / "dagster")
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    dagster,
                    "dev",
                    "-w",
                    str(self.workspace),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                ],
                cwd=self.workspace.parent,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_default_sigint,
            )
        try:
            self._wait_loaded(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_loaded(self, timeout_s: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DagsterDevError(
                    f"dagster dev exited ({self.proc.returncode}):\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                data = self.graphql(_LOCATIONS)["workspaceOrError"]
                last = data
                entries = data.get("locationEntries") or []
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    errors = [
                        e["locationOrLoadError"]["message"]
                        for e in entries
                        if e["locationOrLoadError"]["__typename"] == "PythonError"
                    ]
                    if errors:
                        raise DagsterDevError(f"the code location failed to load: {errors}")
                    return
            time.sleep(0.5)
        raise DagsterDevError(
            f"code location not LOADED in {timeout_s} s: {last}\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 90) -> int | None:
        """SIGTERM ``dagster dev`` (it stops its webserver, daemon and code server), SIGKILL its
        process group after ``timeout_s``; returns its exit code (None if it had to be killed)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return None
        # its code server and run workers exit shortly after it
        deadline = time.monotonic() + 30
        while group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.returncode


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is still alive."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def demo_env(
    dsn: str | None, state_dir: str | Path, runner: str, spark_conf: Mapping[str, str] | None
) -> dict[str, str]:
    """The environment ``definitions.py`` reads its configuration from."""
    env = {"INCVIEW_STATE_DIR": str(Path(state_dir).absolute()), "INCVIEW_RUNNER": runner}
    if dsn:
        env["INCVIEW_DSN"] = dsn
    if spark_conf:
        env["INCVIEW_SPARK_CONF"] = json.dumps(dict(spark_conf))
    # the code server, run workers and streaming jobs import this checkout's packages
    path = os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + path if path else "")
    return env


def serve_demo(
    dsn: str | None = None,
    state_dir: str | Path = ".incview-demo",
    runner: str = "spark",
    spark_conf: Mapping[str, str] | None = None,
    port: int = 3000,
) -> int:
    """``incview demo --dagster``: serve the demo's views in ``dagster dev`` until Ctrl-C."""
    from incview_dagster.resource import IncViewResource

    state = Path(state_dir).absolute()
    where = "the database of INCVIEW_DSN / --dsn" if dsn else f"embedded PostgreSQL in {state}"
    print(f"starting dagster dev on the incview demo ({where}, runner {runner}) ...", flush=True)
    started = time.monotonic()
    dev = DagsterDev(state / "dagster_home", demo_env(dsn, state, runner, spark_conf), port=port)
    stop = threading.Event()
    restore = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        dev.start()
        print(
            f"\ndagster dev is serving the demo: {dev.url}  (ready after "
            f"{time.monotonic() - started:.0f} s; log {dev.log_path})\n"
            f'  asset graph: {dev.url}/asset-groups  - "Materialize all" creates the demo\'s '
            "data (demo_tables) and populates the four views; their checks run with them\n"
            "  Ctrl-C stops dagster dev and the views' streaming jobs",
            flush=True,
        )
        while not stop.is_set() and dev.proc is not None and dev.proc.poll() is None:
            stop.wait(0.5)
        if dev.proc is not None and dev.proc.poll() not in (None, 0):
            print(f"dagster dev exited ({dev.proc.returncode}); log {dev.log_path}")
            return 1
        return 0
    finally:
        print("stopping dagster dev and the views' streaming jobs ...", flush=True)
        dev.stop()
        resource = IncViewResource(dsn=dsn, state_dir=str(state), runner=runner)
        with contextlib.suppress(Exception):
            resource.streaming_jobs().stop_all(timeout_s=60)
        for sig, handler in restore.items():
            signal.signal(sig, handler)
