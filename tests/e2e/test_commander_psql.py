"""Views declared from inside Postgres: the real ``psql`` client against a running ``incview run``.

``incview run`` (runner local) is a child process (``python -m engine.cli``); every SQL the
user would type goes through ``psql`` as a login role of its own: members of ``incview_admin``
create and drop views, a role without SELECT on a source is refused, a CALL with no engine
expires, and an engine killed (SIGKILL) between claiming a command and answering it runs it
exactly once after a restart (``INCVIEW_TEST_SLEEP_AFTER_CLAIM`` holds it in between).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from engine.commander import SLEEP_AFTER_CLAIM_ENV

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _psql_binary() -> str:
    found = shutil.which("psql") or next(
        iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"), reverse=True)), None
    )
    if found is None:
        pytest.fail("the psql client is needed: install postgresql-client", pytrace=False)
    return str(found)


PSQL = _psql_binary()


def psql(
    dsn: str, role: str, *commands: str, timeout_s: float = 20, wait: bool = True
) -> subprocess.CompletedProcess | subprocess.Popen:
    """``psql`` as ``role`` running ``commands`` (each its own -c: autocommit), verbose errors."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    args = [PSQL, "-X", "-A", "-t", "-v", "VERBOSITY=verbose", "-v", "ON_ERROR_STOP=1"]
    args += ["-h", str(info["host"]), "-p", str(info["port"]), "-U", role, "-d", info["dbname"]]
    for c in commands:
        args += ["-c", c]
    env = {**os.environ, "PGOPTIONS": f"-c incview.command_timeout={timeout_s}"}
    if not wait:
        return subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout_s + 30)


def start_engine(dsn: str, state: Path, log: Path, **env: str) -> subprocess.Popen:
    """``incview run --runner local`` as a child process, output appended to ``log``."""
    with open(log, "a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "engine.cli", "--dsn", dsn, "--state-dir", str(state)]
            + ["--runner", "local", "run", "--trigger-ms", "20"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        )


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(predicate, timeout_s: float = 20, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def roles(conn: psycopg.Connection) -> dict[str, str]:
    """Login roles of this test: an admin who may read ``t``, an admin who may not read
    ``secret``, and a role that is no admin."""
    suffix = uuid.uuid4().hex[:8]
    names = {k: f"{k}_{suffix}" for k in ("alice", "bob", "carol")}
    for name in names.values():
        conn.execute(f"CREATE ROLE {name} LOGIN")
    conn.execute(f"GRANT incview_admin TO {names['alice']}, {names['bob']}")
    conn.execute(f"GRANT SELECT ON t TO {names['alice']}, {names['bob']}")
    return names


def setup_tables(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, g text, v int)")
    conn.execute("CREATE TABLE secret (id int PRIMARY KEY, s text)")
    conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    conn.execute("ALTER TABLE secret REPLICA IDENTITY FULL")
    conn.execute("INSERT INTO t VALUES (1, 'a', 10), (2, 'a', 5), (3, 'b', 1)")
    conn.execute("INSERT INTO secret VALUES (1, 'x')")


def test_views_created_dropped_and_refused_through_psql(pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        setup_tables(conn)
        from engine import install_schema

        assert "installed" in install_schema(pg_dsn)
        who = roles(conn)
        engine = start_engine(pg_dsn, tmp_path / "state", tmp_path / "run.log")
        try:
            # create: returns once the view is populated; its rows are the caller's to read
            out = psql(
                pg_dsn,
                who["alice"],
                "CALL incview.create_view('sums', 'SELECT g, sum(v) AS total FROM t GROUP BY g')",
                "SELECT g || '=' || total FROM sums ORDER BY g",
            )
            assert out.returncode == 0, out.stderr
            assert out.stdout.split() == ["CALL", "a=15", "b=1"]

            # maintained: the sources change, the view follows
            conn.execute("UPDATE t SET v = 7 WHERE id = 3")
            conn.execute("INSERT INTO t VALUES (4, 'c', 2)")
            conn.execute("DELETE FROM t WHERE id = 2")

            def maintained():
                got = psql(pg_dsn, who["alice"], "SELECT g || '=' || total FROM sums ORDER BY g")
                return got.stdout.split() == ["a=10", "b=7", "c=2"]

            wait_for(maintained, what="the view to follow its sources")

            # list_views() shows it, with its creator, rows and phase
            listed = psql(
                pg_dsn,
                who["carol"],
                "SELECT name, phase, created_by FROM incview.list_views()",
            )
            assert listed.stdout.split() == [f"sums|running|{who['alice']}"], listed.stderr
            wait_for(
                lambda: (
                    conn.execute(
                        "SELECT rows FROM incview.list_views() WHERE name = 'sums'"
                    ).fetchone()
                    == (3,)
                ),
                what="list_views() to count the rows",
            )

            # bad SQL: a psql ERROR with the construct and its position
            bad = psql(
                pg_dsn, who["alice"], "CALL incview.create_view('bad', 'SELECT g,\n now() FROM t')"
            )
            assert bad.returncode != 0
            assert "ERROR:  0A000: now is not deterministic at line 2, column 2" in bad.stderr

            # no SELECT on a source: permission denied, nothing created
            denied = psql(
                pg_dsn, who["bob"], "CALL incview.create_view('peek', 'SELECT s FROM secret')"
            )
            assert "ERROR:  42501: permission denied for table secret" in denied.stderr
            # not an admin: refused before the engine sees it
            outsider = psql(
                pg_dsn, who["carol"], "CALL incview.create_view('mine', 'SELECT g FROM t')"
            )
            assert "ERROR:  42501: permission denied to run incview.create_view" in outsider.stderr
            for name in ("peek", "mine", "bad"):
                assert conn.execute("SELECT to_regclass(%s)", (name,)).fetchone() == (None,)
            assert conn.execute("SELECT name FROM incview.views").fetchall() == [("sums",)]

            # drop
            dropped = psql(pg_dsn, who["alice"], "CALL incview.drop_view('sums')")
            assert dropped.returncode == 0, dropped.stderr
            assert conn.execute("SELECT to_regclass('sums')").fetchone() == (None,)
            assert conn.execute("SELECT count(*) FROM incview.list_views()").fetchone() == (0,)
            assert engine.poll() is None, (tmp_path / "run.log").read_text()
        finally:
            stop(engine)


def test_no_engine_expires_and_a_killed_engine_runs_the_command_once(pg_dsn, tmp_path):
    state, log = tmp_path / "state", tmp_path / "run.log"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        setup_tables(conn)
        from engine import install_schema

        install_schema(pg_dsn)
        who = roles(conn)

        # no engine: the CALL fails after the timeout, and the command never runs later
        started = time.monotonic()
        late = psql(
            pg_dsn, who["alice"], "CALL incview.create_view('late', 'SELECT g FROM t')", timeout_s=1
        )
        assert late.returncode != 0
        assert "no incview engine answered incview.create_view within" in late.stderr
        assert "start `incview run`" in late.stderr
        assert time.monotonic() - started < 15

        # an engine that stops after claiming a command (then killed: SIGKILL)
        engine = start_engine(pg_dsn, state, log, **{SLEEP_AFTER_CLAIM_ENV: "600"})
        try:
            call = psql(
                pg_dsn,
                who["alice"],
                "CALL incview.create_view('once', 'SELECT g, count(*) AS n FROM t GROUP BY g')",
                "SELECT g || '=' || n FROM once ORDER BY g",
                timeout_s=120,
                wait=False,
            )
            wait_for(
                lambda: (
                    conn.execute(
                        "SELECT state FROM incview.commands WHERE name = 'once'"
                    ).fetchone()
                    == ("running",)
                ),
                what="the engine to claim the command",
            )
            engine.kill()
            engine.wait()
        finally:
            stop(engine)
        assert conn.execute("SELECT to_regclass('once')").fetchone() == (None,)

        # restarted: the command runs once, the waiting CALL returns, the expired one stays so
        engine = start_engine(pg_dsn, state, log)
        try:
            out, err = call.communicate(timeout=120)
            assert call.returncode == 0, err
            assert out.split() == ["CALL", "a=2", "b=1"]
            states = conn.execute("SELECT name, state FROM incview.commands ORDER BY id").fetchall()
            assert states == [("late", "expired"), ("once", "done")]
            assert conn.execute("SELECT name FROM incview.views").fetchall() == [("once",)]
            assert conn.execute("SELECT to_regclass('late')").fetchone() == (None,)
            assert "resuming after an interruption" in log.read_text()
        finally:
            stop(engine)
