"""An Engine with a memory budget (``memory_mb`` or ``INCVIEW_MEMORY_MB``): every view's state
shares it (one block cache, memtables sized over all their tables, the collections' caches
divided by use, re-divided as views come and go), and the views stay exactly their queries under
random changes with the smallest budget and memtables of 64 kB (many flushes), and while views
are created and dropped from another thread than the one applying changes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest

import engine.dataflow.state.memory_budget as memory_budget
from engine.engine import Engine
from engine.memory_setting import MEMORY_MB_ENV
from tests.e2e.test_engine_oracle_many import QUICK, VIEWS, Workload, diff_counts, run_engine_oracle

MB = 1 << 20
#: a join, a group-by and a top-k: each keeps an in-memory cache
NAMES = ("join_inner", "agg_basic", "window_top_k_per_group")


def test_every_view_shares_the_engines_budget(pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        work = Workload(conn, 5)
        work.setup()
        with Engine(pg_dsn, tmp_path / "state", runner="local", memory_mb=48) as eng:
            budget = eng.memory_budget
            assert budget is not None and budget.total_bytes == 48 * MB
            for name in NAMES:
                eng.create_view(name, VIEWS[name])
            stores = [eng.views[n].store for n in NAMES]
            caches = [c for s in stores for c in s._caches]
            assert len(caches) >= len(NAMES) and budget.caches == len(caches)
            budget.rebalance()  # caches emptied after their populations, none filling: equal parts
            assert {c.cache_bytes for c in caches if hasattr(c, "cache_bytes")} == {
                budget.cache_share
            }
            tables = sum(s.memtables for s in stores)
            assert budget.memtable_size == budget.write_buffer_bytes // (3 * tables)
            assert all(s._memtable_size == budget.memtable_size for s in stores)
            assert all(s._cache is budget.block_cache for s in stores)

            share = budget.cache_share
            eng.drop_view(NAMES[0])  # its caches and tables leave; the others' parts grow
            assert budget.caches < len(caches) and budget.cache_share > share
            assert budget.memtable_size > budget.write_buffer_bytes // (3 * tables)
            for _ in range(3):
                work.transaction(12)
            eng.catch_up(timeout_s=120)
            for name in NAMES[1:]:
                assert diff_counts(conn, name, VIEWS[name]) == (0, 0)
        assert Engine.__init__.__kwdefaults__["memory_mb"] is None  # no budget unless asked


def test_a_bad_budget_is_refused_by_name(pg_dsn, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="memory_mb must be a whole number of megabytes"):
        Engine(pg_dsn, tmp_path / "a", runner="local", memory_mb=8)
    monkeypatch.setenv(MEMORY_MB_ENV, "a lot")
    with pytest.raises(ValueError, match=f"{MEMORY_MB_ENV} must be a whole number"):
        Engine(pg_dsn, tmp_path / "b", runner="local")


@pytest.mark.slow
def test_engine_oracle_within_the_smallest_budget(pg_dsn, tmp_path, monkeypatch):
    monkeypatch.setenv(MEMORY_MB_ENV, "32")
    monkeypatch.setattr(memory_budget, "MIN_MEMTABLE", 64 << 10)  # RocksDB's least
    during, truncates = run_engine_oracle(pg_dsn, tmp_path / "state", QUICK, batches=4, seed=43)
    assert during > 0 and truncates > 0


@contextlib.contextmanager
def beside(work: Callable[[threading.Event], None]) -> Iterator[None]:
    """Run ``work(stop)`` in a thread of its own for the block; then set ``stop``, wait for it,
    and fail with what it raised, if anything."""
    stop, raised = threading.Event(), []

    def target() -> None:
        try:
            work(stop)
        except Exception as e:  # reported by the main thread
            raised.append(e)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    assert not raised, raised


@pytest.mark.slow
def test_views_come_and_go_while_others_apply_within_one_budget(pg_dsn, tmp_path, monkeypatch):
    """Views created and dropped from another thread while the views already there apply their
    changes: the budget re-divides its part from that thread, and by use at every commit
    (``REBALANCE_S`` 0 here), while the others' group tables, entry caches and top-k heads are
    in the middle of their times. The views stay exactly their queries."""
    monkeypatch.setattr(memory_budget, "REBALANCE_S", 0.0)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        work = Workload(conn, 9)
        work.setup()
        with Engine(pg_dsn, tmp_path / "state", runner="local", memory_mb=32) as eng:
            for name in NAMES:
                eng.create_view(name, VIEWS[name])
            churned = [0]

            def churn(stop: threading.Event) -> None:  # another view, again and again
                while not stop.is_set():
                    eng.create_view("churned", VIEWS["agg_count_distinct"])
                    eng.drop_view("churned")
                    churned[0] += 1

            with beside(churn):
                for _ in range(10):
                    for _ in range(3):
                        work.transaction(12)
                    eng.catch_up(timeout_s=120)
                    for name in NAMES:
                        assert diff_counts(conn, name, VIEWS[name]) == (0, 0), name
            assert churned[0] >= 3
            assert {s.phase for s in eng.list_views()} == {"running"}


@pytest.mark.slow
def test_a_view_created_and_dropped_while_run_polls_in_another_thread(pg_dsn, tmp_path):
    """``run()`` polling in a thread of its own while the caller creates a view, writes and drops
    it: each call waits for the poll under way; the running view and the new one stay their
    queries."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        work = Workload(conn, 13)
        work.setup()
        with Engine(pg_dsn, tmp_path / "state", runner="local", memory_mb=32) as eng:
            eng.create_view("join_inner", VIEWS["join_inner"])
            with beside(lambda stop: eng.run(["join_inner"], stop=stop, commands=False)):
                for rnd in range(3):
                    eng.create_view("agg_basic", VIEWS["agg_basic"])
                    for _ in range(4):
                        work.transaction(12)
                    eng.catch_up(timeout_s=120)
                    for name in ("join_inner", "agg_basic"):
                        assert diff_counts(conn, name, VIEWS[name]) == (0, 0), (rnd, name)
                    eng.drop_view("agg_basic")
            assert diff_counts(conn, "join_inner", VIEWS["join_inner"]) == (0, 0)
