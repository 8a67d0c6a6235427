"""End to end: ``dagster dev`` on the repo's workspace, a demo view populated through GraphQL.

Starts ``dagster dev`` (webserver, daemon, code server) on a free local port with a temporary
DAGSTER_HOME against the test's fresh Postgres database, waits for the code location to be
LOADED, launches one run of the demo tables and one demo view (with its checks) through the
GraphQL API, and sees the run succeed, both checks pass, the view's streaming job heartbeat in the
catalog and apply a change, and the supervisor sensor observe the job running; then stops ``dagster dev`` with SIGTERM and waits for it to exit. The runner is
Spark when the engine has it (env ``INCVIEW_E2E_RUNNER`` overrides: ``spark`` or ``local``).
"""

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from engine.postgres.embedded import free_port
from incview_dagster import IncViewResource
from incview_dagster.dev_server import group_alive

REPO = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).parent / "dagster")
VIEW = "demo.revenue_by_segment"
VIEW_KEY = ["views", "demo", "revenue_by_segment"]
TABLE_KEYS = [["pg", "demo", t] for t in ("customers", "products", "orders", "order_items")]
RUN_TIMEOUT_S = 600


def _runner() -> str:
    wanted = os.environ.get("INCVIEW_E2E_RUNNER")
    if wanted:
        return wanted
    return "spark" if importlib.util.find_spec("engine.spark.population") else "local"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class GraphQL:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/graphql"

    def __call__(self, query: str, **variables) -> dict:
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(
            self.url, body, {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = json.load(response)
        assert "errors" not in payload, payload["errors"]
        return payload["data"]


LOCATIONS = """
{ workspaceOrError { __typename ... on Workspace { locationEntries {
    name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } }
} } } }
"""
LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
MATERIALIZATION = """
query Materialization($path: [String!]!) {
  assetOrError(assetKey: {path: $path}) { __typename ... on Asset {
    assetMaterializations(limit: 50) { runId metadataEntries {
      label ... on IntMetadataEntry { intValue }
    } }
  } }
}
"""
OBSERVATIONS = """
query Observations($path: [String!]!) {
  assetOrError(assetKey: {path: $path}) { __typename ... on Asset {
    assetObservations(limit: 1) { metadataEntries {
      label ... on TextMetadataEntry { text }
    } }
  } }
}
"""
RUN = """
query Run($runId: ID!) { runOrError(runId: $runId) { __typename ... on Run { status } } }
"""
LOGS = """
query Logs($runId: ID!) {
  logsForRun(runId: $runId) { __typename ... on EventConnection { events {
    __typename
    ... on MessageEvent { message }
    ... on AssetCheckEvaluationEvent { evaluation { checkName success description } }
    ... on ExecutionStepFailureEvent { error { message stack } }
  } } }
}
"""


def _wait_loaded(gql: GraphQL, proc: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"dagster dev exited:\n{log.read_text()[-4000:]}"
        with contextlib.suppress(OSError):
            data = gql(LOCATIONS)["workspaceOrError"]
            last = data
            entries = data.get("locationEntries") or []
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                errors = [
                    e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"
                ]
                assert not errors, errors
                return
        time.sleep(1)
    raise AssertionError(
        f"code location not LOADED in {timeout_s} s: {last}\n{log.read_text()[-4000:]}"
    )


@pytest.mark.slow
def test_dagster_dev_populates_a_demo_view_through_graphql(pg_dsn, tmp_path):
    runner = _runner()
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    state_dir = tmp_path / "incview"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "INCVIEW_DSN": pg_dsn,
        "INCVIEW_STATE_DIR": str(state_dir),
        "INCVIEW_RUNNER": runner,
        "INCVIEW_DEMO_VIEWS": VIEW,
    }
    port = free_port()
    log = tmp_path / "dagster_dev.log"
    resource = IncViewResource(dsn=pg_dsn, state_dir=str(state_dir), runner=runner)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                DAGSTER,
                "dev",
                "-w",
                str(REPO / "workspace.yaml"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # dagster dev maps SIGTERM to SIGINT's handler: a SIGINT ignored by whoever started
            # pytest (a background job of a non-interactive shell) must not reach it ignored
            preexec_fn=_default_sigint,
        )
    try:
        gql = GraphQL(port)
        _wait_loaded(gql, proc, log)
        selector = {
            "repositoryLocationName": "incview_demo",
            "repositoryName": "__repository__",
            "jobName": "__ASSET_JOB",
            "assetSelection": [{"path": k} for k in [*TABLE_KEYS, VIEW_KEY]],
            "assetCheckSelection": [
                {"assetKey": {"path": VIEW_KEY}, "name": name}
                for name in ("matches_full_recompute", "lag_within")
            ],
        }
        launched = gql(LAUNCH, params={"selector": selector})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]

        deadline = time.monotonic() + RUN_TIMEOUT_S
        status = None
        while time.monotonic() < deadline:
            status = gql(RUN, runId=run_id)["runOrError"]["status"]
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            time.sleep(2)
        events = gql(LOGS, runId=run_id)["logsForRun"]["events"]
        failures = [e["error"] for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
        assert status == "SUCCESS", (status, failures)

        checks = {
            e["evaluation"]["checkName"]: e["evaluation"]
            for e in events
            if e["__typename"] == "AssetCheckEvaluationEvent"
        }
        assert checks["matches_full_recompute"]["success"], checks
        assert checks["lag_within"]["success"], checks

        materialization = gql(MATERIALIZATION, path=VIEW_KEY)["assetOrError"]
        # the population run's own materialization (the supervisor adds run-less ones when the
        # view's content changes, possibly already)
        (latest,) = [m for m in materialization["assetMaterializations"] if m["runId"] == run_id]
        entries = {e["label"]: e.get("intValue") for e in latest["metadataEntries"]}
        assert entries["dagster/row_count"] > 0
        for label in (
            "incview/sql",
            "incview/explain",
            "incview/state_dir",
            "incview/population_s",
        ):
            assert label in entries, entries

        # the run is over; the view's streaming job runs outside Dagster and heartbeats
        record = resource.view_records()[VIEW]
        assert record.phase == "running"
        job = resource.streaming_jobs().status(VIEW)
        assert job.alive, job.log_path.read_text()[-4000:]
        first = record.heartbeat
        while resource.view_records()[VIEW].heartbeat == first:
            assert time.monotonic() < deadline, "the streaming job stopped heartbeating"
            time.sleep(0.5)
        age = (datetime.now(UTC) - resource.view_records()[VIEW].heartbeat).total_seconds()
        assert age < 10
        # and it keeps the view up to date
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE demo.customers SET segment = 'vip' WHERE id = 1")
            sql = "SELECT count(*) FROM demo.revenue_by_segment WHERE segment = 'vip'"
            while conn.execute(sql).fetchone()[0] != 1:
                assert time.monotonic() < deadline, "the change never reached the view"
                time.sleep(0.5)

        # the supervisor sensor (in dagster dev's daemon) reports the running job's health
        observed = None
        while observed != "running":
            assert time.monotonic() < deadline, "no observation of a running job"
            asset = gql(OBSERVATIONS, path=VIEW_KEY)["assetOrError"]
            for obs in asset.get("assetObservations") or []:
                entries = {e["label"]: e.get("text") for e in obs["metadataEntries"]}
                observed = entries.get("job_state")
            time.sleep(2)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
        else:
            code = proc.returncode
        resource.streaming_jobs().stop_all(timeout_s=60)
    assert code in (0, -signal.SIGTERM), f"dagster dev exit code {code}:\n{log.read_text()[-4000:]}"
    # dagster dev's code server and run workers exit too (shortly after dagster dev itself)
    deadline = time.monotonic() + 60
    while group_alive(proc.pid):
        assert time.monotonic() < deadline, "dagster dev left processes behind"
        time.sleep(0.5)
