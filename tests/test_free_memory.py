"""``engine.free_memory.release_free_memory`` gives freed heap pages back to the OS."""

from __future__ import annotations

import sys

import psycopg
import pytest

from engine.engine import Engine
from engine.free_memory import ThrottledRelease, _malloc_trim, release_free_memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or _malloc_trim() is None, reason="glibc on Linux"
)
def test_freed_heap_pages_go_back_to_the_os():
    # 2 KB chunks come from malloc's heap; keeping every 64th alive pins the heap's top, so
    # free() alone cannot shrink it: only a trim returns the free pages between them
    chunks = [bytes(2048) for _ in range(120_000)]
    chunks = [c if i % 64 == 0 else None for i, c in enumerate(chunks)]
    before = _rss_mb()
    release_free_memory()
    after = _rss_mb()
    assert before - after > 100, (before, after)
    assert sum(c is not None for c in chunks) > 1000  # the live ones are untouched
    release_free_memory()  # nothing left to free: still fine


def test_a_throttled_release_runs_at_most_once_an_interval():
    now = [100.0]
    released = []
    release = ThrottledRelease(10.0, clock=lambda: now[0], release=lambda: released.append(now[0]))
    assert not release()  # just made: the interval counts from there
    now[0] = 109.9
    assert not release()
    now[0] = 110.0
    assert release() and released == [110.0]
    now[0] = 115.0
    assert not release()
    now[0] = 121.0
    assert release() and released == [110.0, 121.0] and release.releases == 2


def test_a_running_engine_releases_after_catch_up(pg_dsn, tmp_path):
    """``catch_up`` ends with the engine's throttled release (interval 0 here: every call)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE freed (id int PRIMARY KEY, v int)")
        conn.execute("ALTER TABLE freed REPLICA IDENTITY FULL")
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("freed_sum", "SELECT sum(v) AS s FROM freed")
            eng._release_memory.interval_s = 0.0
            before = eng._release_memory.releases
            conn.execute("INSERT INTO freed SELECT i, i FROM generate_series(1, 100) i")
            eng.catch_up(timeout_s=60)
            assert eng._release_memory.releases == before + 1
            assert conn.execute("SELECT s FROM freed_sum").fetchone() == (5050,)
