"""``MemoryBudget``: the state stores of several views share one bound. Their collections'
caches get equal shares, re-divided as caches come and stores close; a smaller share evicts;
all memtables together stay near the budget's write-buffer part (RocksDB flushes them), where a
store without a budget keeps far more in memory; the data stays whole."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from engine.dataflow.columnar.group_table import GroupTable
from engine.dataflow.columnar.partition_heads import HeadCache
from engine.dataflow.state import hit_rate_gate
from engine.dataflow.state.entry_cache import EntryCache
from engine.dataflow.state.memory_budget import MIN_CACHE_SHARE, MemoryBudget, fair_shares
from engine.dataflow.state.store import StateStore
from engine.memory_setting import (
    MEMORY_MB_ENV,
    SHARES_ENV,
    memory_budget_setting,
    memory_mb_setting,
)

DTYPE = np.dtype([("count", "<i8"), ("sum", "<i8")])
MB = 1 << 20


def test_caches_share_the_budget_and_take_a_closed_stores_part(tmp_path):
    budget = MemoryBudget(64 * MB)
    assert budget.block_cache_bytes + budget.write_buffer_bytes + budget.caches_bytes == 64 * MB
    a = StateStore(tmp_path / "a", budget=budget)
    b = StateStore(tmp_path / "b", budget=budget)
    entries = EntryCache(a.table("e", "point"))
    groups = GroupTable(a.table("g", "point"), DTYPE)
    heads = HeadCache(b, 64 * MB)
    share = budget.caches_bytes // 3
    assert budget.caches == 3 and budget.cache_share == share
    assert entries.cache_bytes == heads.cache_bytes == share
    assert groups.max_groups == share // (DTYPE.itemsize + 120)

    a.close()  # its two caches leave; the one left takes the whole part
    assert budget.caches == 1
    assert heads.cache_bytes == budget.caches_bytes
    b.close()
    assert budget.caches == 0

    del entries, groups  # a cache that is gone no longer counts (held weakly)
    c = StateStore(tmp_path / "c", budget=budget)
    one, two = EntryCache(c.table("x", "point")), EntryCache(c.table("y", "point"))
    assert budget.caches == 2 and one.cache_bytes == budget.caches_bytes // 2
    del two
    gc.collect()
    three = EntryCache(c.table("z", "point"))
    assert budget.caches == 2 and three.cache_bytes == one.cache_bytes
    c.close()


@pytest.mark.slow
def test_many_caches_keep_a_least_share(tmp_path):
    budget = MemoryBudget(32 * MB)
    with StateStore(tmp_path / "s", budget=budget) as store:
        caches = [EntryCache(store.table(f"t{i}", "point")) for i in range(10)]
        assert budget.cache_share == budget.caches_bytes // 10 > MIN_CACHE_SHARE
        caches += [EntryCache(store.table(f"u{i}", "point")) for i in range(200)]
        assert budget.cache_share == MIN_CACHE_SHARE
        assert {c.cache_bytes for c in caches} == {MIN_CACHE_SHARE}


def test_a_smaller_share_evicts_and_the_data_stays(tmp_path):
    with StateStore(tmp_path / "s") as store:
        entries = EntryCache(store.table("e", "point"), 1 * MB)
        groups = GroupTable(store.table("g", "point"), DTYPE, 64 * MB)
        heads = HeadCache(store, 1 * MB)
        keys = [b"k%04d" % i for i in range(2000)]
        entries.get_many(keys)
        entries.put_many(keys, [b"v" * 100] * 2000)
        groups.fetch(keys)
        records = np.zeros(2000, DTYPE)
        records["count"] = np.arange(1, 2001)
        groups.store(keys, records, np.ones(2000, bool))
        heads.put_many(keys, [b"end"] * 2000, [b"h" * 200] * 2000, [1] * 2000)
        store.commit(1)
        assert (entries.cached_entries, groups.cached_groups, heads.cached_partitions) == (
            2000,
            2000,
            2000,
        )

        entries.resize(2 * MB)  # larger: nothing leaves
        assert entries.cached_entries == 2000
        entries.resize(64 << 10)
        groups.resize(64 << 10)
        heads.resize(200_000)
        assert groups.max_groups == 1024  # the least a group table holds
        # a smaller budget (given from any thread) is applied at each cache's next read, in the
        # thread that uses it: nothing has left yet
        assert (entries.cached_entries, groups.cached_groups, heads.cached_partitions) == (
            2000,
            2000,
            2000,
        )
        # the newest partitions stay (first in, first out)
        assert heads.get_many([keys[-1]])[0] is not None and heads.get_many(keys[:1]) == [None]
        assert 0 < heads.cached_partitions < 2000 and heads._bytes <= 200_000
        # reads come from the committed state
        assert entries.get_many(keys[:2]) == [b"v" * 100] * 2
        found, present = groups.fetch(keys[-3:])
        assert found["count"].tolist() == [1998, 1999, 2000] and present.all()
        assert entries.cached_entries == 0 and groups.cached_groups == 0


def test_a_smaller_budget_between_a_read_and_its_write_keeps_every_record(tmp_path):
    """A budget re-divides its part when another view's store opens or closes, from that
    view's thread, at any moment of this one's time: between a group table's ``fetch`` and
    its ``store``, or an entry cache's ``get_many`` and ``put_many``. The records stay each
    their own group's (the group table once wrote the fetched groups' records into the slots
    it had just handed to the time's new groups), and the smaller budget holds from the next
    read on."""
    with StateStore(tmp_path / "s") as store:
        groups = GroupTable(store.table("g", "point"), DTYPE, 64 * MB)
        entries = EntryCache(store.table("e", "point"), 64 * MB)
        old = [b"k%05d" % i for i in range(3000)]
        records, _ = groups.fetch(old)
        records["count"] = np.arange(3000)
        groups.store(old, records, np.ones(3000, bool))
        entries.get_many(old)
        entries.put_many(old, [b"%d" % i for i in range(3000)])
        store.commit(1)

        keys = [b"n%05d" % i for i in range(100)] + old[:50]  # new groups, then cached ones
        records, present = groups.fetch(keys)
        assert present.tolist() == [False] * 100 + [True] * 50
        values = entries.get_many(keys)
        groups.resize(64 << 10)  # another view's store opens: too small for what they hold
        entries.resize(64 << 10)
        records["count"] += 1000
        groups.store(keys, records, np.ones(len(keys), bool))
        entries.put_many(keys, [b"new " + (v or b"") for v in values])
        store.commit(2)

        again, present = groups.fetch(keys)
        assert present.all() and again["count"].tolist() == records["count"].tolist()
        assert groups.cached_groups == 0 and groups.max_groups == 1024
        assert entries.get_many(keys) == [b"new "] * 100 + [b"new %d" % i for i in range(50)]
        assert entries.cached_entries == 0
        records["count"] += 1  # and the cache works on at its new size
        groups.store(keys, records, np.ones(len(keys), bool))
        store.commit(3)
        assert groups.cached_groups == len(keys)
        assert groups.fetch(keys)[0]["count"].tolist() == records["count"].tolist()


def _fill(store: StateStore, name: str, megabytes: int) -> None:
    """``megabytes`` of 1 kB values in ``name``, committed in batches of 64 kB."""
    table = store.table(name, "point")
    value = os.urandom(1024)
    for start in range(0, megabytes * 1024, 64):
        keys = [b"%s-%08d" % (name.encode(), i) for i in range(start, start + 64)]
        table.put_many(keys, [value] * len(keys))
        store.commit((store.committed_time or 0) + 1)


def _six_tables(root, budget: MemoryBudget | None) -> list[StateStore]:
    """Three stores of two tables, 6 MB written to each (under one memtable's 8 MB)."""
    stores = [StateStore(root / f"s{i}", budget=budget) for i in range(3)]
    for s in stores:
        s.table("t0", "point"), s.table("t1", "point")  # every table open before the writes
    for s in stores:
        _fill(s, "t0", 6)
        _fill(s, "t1", 6)
    return stores


def test_the_memtables_of_all_stores_stay_within_the_budgets_part(tmp_path):
    alone = _six_tables(tmp_path / "alone", None)
    try:  # without a budget each table keeps its 6 MB in memory
        unbudgeted = sum(s.memtable_bytes() for s in alone)
        assert unbudgeted >= 6 * 6 * MB
    finally:
        for s in alone:
            s.close()

    budget = MemoryBudget(64 * MB)  # memtables: 16 MB for nine tables (six and the metadata's)
    stores = _six_tables(tmp_path / "shared", budget)
    try:
        assert budget.memtable_size == budget.write_buffer_bytes // (3 * 9)
        held = sum(s.memtable_bytes() for s in stores)
        print(f"memtables: {unbudgeted / MB:.1f} MB without a budget, {held / MB:.1f} MB with")
        assert held <= budget.write_buffer_bytes
        for s in stores:  # nothing lost to the flushes
            for n in ("t0", "t1"):
                got = s.table(n, "point").get_many(
                    [b"%s-%08d" % (n.encode(), i) for i in (0, 3000, 6 * 1024 - 1, 6 * 1024)]
                )
                assert [g is not None and len(g) == 1024 for g in got] == [True, True, True, False]
    finally:
        for s in stores:
            s.close()
    assert budget.memtable_size == budget.write_buffer_bytes // 3  # no store left: one table's


def test_the_setting(monkeypatch):
    monkeypatch.delenv(MEMORY_MB_ENV, raising=False)
    assert memory_budget_setting(None) is None and memory_budget_setting(0) is None
    assert memory_budget_setting(256).total_bytes == 256 * MB
    monkeypatch.setenv(MEMORY_MB_ENV, " 48 ")
    assert memory_budget_setting(None).total_bytes == 48 * MB
    assert memory_budget_setting(0) is None  # the argument wins over the environment
    for bad in ("lots", "-1", "16", "1.5"):
        monkeypatch.setenv(MEMORY_MB_ENV, bad)
        with pytest.raises(ValueError, match=f"{MEMORY_MB_ENV} must be a whole number"):
            memory_budget_setting(None)
    for bad in (-5, 31, True, 64.0):
        with pytest.raises(ValueError, match="memory_mb must be a whole number of megabytes"):
            memory_mb_setting(bad)
    monkeypatch.delenv(SHARES_ENV, raising=False)
    assert memory_budget_setting(64).by_use
    monkeypatch.setenv(SHARES_ENV, "equal")
    assert not memory_budget_setting(64).by_use
    monkeypatch.setenv(SHARES_ENV, "fair")
    with pytest.raises(ValueError, match=f"{SHARES_ENV} must be 'use' or 'equal', not 'fair'"):
        memory_budget_setting(64)


def test_equal_shares_when_asked(tmp_path):
    budget = MemoryBudget(64 * MB, by_use=False)
    with StateStore(tmp_path / "s", budget=budget) as store:
        busy, idle = EntryCache(store.table("b", "point")), EntryCache(store.table("i", "point"))
        _use(busy, "busy", 0.8 * budget.caches_bytes / 2 / MB)
        budget.rebalance()
        assert busy.cache_bytes == idle.cache_bytes == budget.cache_share
    with pytest.raises(ValueError, match="at least 32 MB"):
        MemoryBudget(16 * MB)


def test_fair_shares_meet_small_demands_and_split_the_rest():
    assert fair_shares([None, None], 100) == [50, 50]
    # 5 is under an equal part of what is left: met; 100 is not: it splits the rest
    assert fair_shares([None, 5, 100, None], 100) == [31, 5, 31, 31]
    assert fair_shares([30, 30, None], 100) == [30, 30, 40]
    assert fair_shares([40, 40, None], 100) == [33, 33, 33]
    # every demand met: what is left over goes to all
    assert fair_shares([10, 20, 30], 90) == [20, 30, 40]
    assert fair_shares([], 100) == []


def _use(cache: EntryCache, name: str, megabytes: float) -> None:
    """Write ``megabytes`` of 1 kB values through ``cache``, 1 MB at a time (as a collection
    does, time after time: read, then write the keys)."""
    keys = [b"%s-%07d" % (name.encode(), i) for i in range(int(megabytes * 1024))]
    for at in range(0, len(keys), 1024):
        cache.get_many(keys[at : at + 1024])
        cache.put_many(keys[at : at + 1024], [b"v" * 1024] * len(keys[at : at + 1024]))


def test_caches_that_fill_their_shares_get_what_idle_ones_do_not_use(tmp_path, monkeypatch):
    budget = MemoryBudget(64 * MB)
    part = budget.caches_bytes
    with (
        StateStore(tmp_path / "a", budget=budget) as a,
        StateStore(tmp_path / "b", budget=budget) as b,
    ):
        busy, small, idle = (
            EntryCache(a.table("busy", "point")),
            EntryCache(b.table("small", "point")),
            EntryCache(b.table("idle", "point")),
        )
        assert {c.cache_bytes for c in (busy, small, idle)} == {part // 3}  # new: equal parts
        _use(busy, "busy", 0.8 * part / 3 / MB)  # fills its share
        _use(small, "small", 0.1)
        a.commit(1), b.commit(1)
        held = small.cached_entries
        budget.rebalance()
        # the idle caches keep twice what they hold (at least the least share), the busy one
        # takes the rest; nothing cached is lost (a cache given twice what it holds keeps it)
        assert small.cache_bytes == max(MIN_CACHE_SHARE, 2 * small.used_bytes)
        assert idle.cache_bytes == MIN_CACHE_SHARE
        assert busy.cache_bytes == part - small.cache_bytes - idle.cache_bytes
        small.get_many([b"small-0000000"])
        assert small.cached_entries == held > 0 and busy.cached_entries > 0

        _use(small, "small", 0.9)  # the small one fills its share too: the two split the part
        b.commit(2)
        monkeypatch.setattr("engine.dataflow.state.memory_budget.REBALANCE_S", 0.0)
        b.commit(3)  # a commit re-divides, once the last re-division is old enough
        assert small.cache_bytes == busy.cache_bytes == (part - MIN_CACHE_SHARE) // 2
        assert budget.share_of(small) == small.cache_bytes

        a.drop_caches(), b.drop_caches()  # none holds anything: equal parts again
        budget.rebalance()
        assert {c.cache_bytes for c in (busy, small, idle)} == {budget.cache_share}


def test_a_cache_set_aside_while_full_is_tried_again_with_more(tmp_path, monkeypatch):
    """Too small for its keys, a cache misses, evicts and its hit-rate gate sets it aside; the
    budget then gives it more (if it can) and it comes back at once, its first window after that
    not judged (a window as long as one pass over its keys), and keeps what it finds."""
    monkeypatch.setattr(hit_rate_gate, "WINDOW_KEYS", 4096)
    budget = MemoryBudget(64 * MB)
    with StateStore(tmp_path / "s", budget=budget) as store:
        cache, other = EntryCache(store.table("c", "point")), EntryCache(store.table("o", "point"))
        cache.resize(MIN_CACHE_SHARE)  # as if its share had been cut: 1 MB for 4 MB of keys
        for _ in range(3):
            _use(cache, "c", 4)
        assert cache.gate.aside and cache.wants_more_than == MIN_CACHE_SHARE
        budget.rebalance()  # wants more than it had: the part but the idle one's 1 MB
        assert cache.cache_bytes == budget.caches_bytes - MIN_CACHE_SHARE == budget.share_of(cache)
        assert not cache.gate.aside and other.cache_bytes == MIN_CACHE_SHARE
        for _ in range(3):
            _use(cache, "c", 4)
        assert not cache.gate.aside and cache.hits >= 2 * 4 * 1024

        other.resize(MIN_CACHE_SHARE // 4)  # 256 kB for 1 MB of keys
        for _ in range(6):
            _use(other, "o", 1)
        assert other.gate.aside and other.wants_more_than == MIN_CACHE_SHARE // 4
        budget.rebalance()
        assert not other.gate.aside and other.cache_bytes > MIN_CACHE_SHARE


def test_a_cache_set_aside_that_held_everything_asks_for_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(hit_rate_gate, "WINDOW_KEYS", 2048)
    budget = MemoryBudget(64 * MB)
    with StateStore(tmp_path / "s", budget=budget) as store:
        cache = EntryCache(store.table("c", "point"))
        for i in range(3):  # new keys every time: nothing found, nothing evicted
            _use(cache, f"c{i}", 1)
        assert cache.gate.aside and cache.wants_more_than is None
        EntryCache(store.table("busy", "point"))  # another cache comes
        budget.rebalance()
        assert cache.gate.aside and cache.cache_bytes == budget.cache_share
