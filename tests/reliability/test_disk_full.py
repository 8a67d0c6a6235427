"""Fault: the disk of the state directory fills up (both runners).

The state directory is a small tmpfs (mounted by the test; skipped where the machine does not
allow mounts). A filler file leaves it almost no space, then a burst of changes makes RocksDB's
writes fail with ENOSPC: the view goes to ``error`` naming the full directory and is retried
with backoff (its state reopened at its last commit, never re-populated); once the filler is
removed it catches up, equal to its query, and stays equal across a reopen (no corrupt state).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from engine import Engine
from engine.view_repairs import ViewRepairs
from tests.e2e.test_engine_oracle import diff_rows
from tests.reliability.runners import RUNNERS, use_runner

SQL = "SELECT grp, count(*) AS n, max(note) AS top FROM items GROUP BY grp"


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MB tmpfs, unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow a tmpfs mount: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount, leave: int):
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    filler = mount / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def _insert(conn, start, n):
    conn.execute(
        "INSERT INTO items SELECT i, i %% 50, repeat(md5(i::text), 6) "
        "FROM generate_series(%s::int, %s::int) i",
        (start, start + n - 1),
    )


def _status(engine):
    return {s.name: (s.phase, s.last_error) for s in engine.list_views()}


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
def test_a_full_state_disk_is_an_error_phase_then_recovers(
    request, runner, pg_conn, pg_dsn, small_disk
):
    runner = use_runner(request, runner)
    first_wait = 4 if runner == "local" else 40  # Spark: the streaming query starts first
    pg_conn.execute("CREATE TABLE items (id int PRIMARY KEY, grp int, note text)")
    pg_conn.execute("ALTER TABLE items REPLICA IDENTITY FULL")
    _insert(pg_conn, 1, 1000)
    state = small_disk / "state"
    with Engine(pg_dsn, state, runner=runner) as engine:
        engine.repairs = ViewRepairs(first_delay_s=0.05, cap_s=0.5)
        engine.create_view("items_by_grp", SQL)
        filler = _fill(small_disk, leave=1 << 20)
        for start in range(10_000, 40_000, 5_000):  # ~5 MB of state writes
            _insert(pg_conn, start, 5_000)
        with pytest.raises(TimeoutError):
            engine.catch_up(timeout_s=first_wait)
        phase, error = _status(engine)["items_by_grp"]
        assert phase == "error"
        assert f"the state directory {state} is full" in error
        assert "No space left on device" in error

        filler.unlink()  # space returns
        engine.catch_up(timeout_s=60)
        assert diff_rows(pg_conn, "items_by_grp", SQL) == (0, 0)
        assert _status(engine)["items_by_grp"] == ("running", None)
        pg_conn.execute("DELETE FROM items WHERE id % 3 = 0")
        engine.catch_up()
        assert diff_rows(pg_conn, "items_by_grp", SQL) == (0, 0)
    with Engine(pg_dsn, state, runner=runner) as engine:  # the state opens and is right
        pg_conn.execute("UPDATE items SET note = 'zzz' WHERE id % 7 = 0")
        engine.catch_up()
        assert diff_rows(pg_conn, "items_by_grp", SQL) == (0, 0)
        assert _status(engine)["items_by_grp"] == ("running", None)
