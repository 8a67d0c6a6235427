"""EntryCache answers repeated reads from memory, within its budget, and forgets rolled-back writes."""

from __future__ import annotations

import random

from engine.dataflow.state import hit_rate_gate
from engine.dataflow.state.entry_cache import EntryCache
from engine.dataflow.state.store import StateStore


def test_reads_writes_eviction_and_rollback(tmp_path):
    with StateStore(tmp_path / "s") as store:
        table = store.table("t", "point")
        cache = EntryCache(table, cache_bytes=10 * 200)
        keys = [f"k{i}".encode() for i in range(30)]
        assert cache.get_many(keys[:3]) == [None, None, None]
        assert cache.cached_entries == 0  # reads do not enter the cache, writes do
        cache.put_many(keys[:20], [b"v%d" % i for i in range(20)])
        cache.delete(keys[0])
        store.commit(1)
        assert cache.cached_entries <= 16  # the budget holds ~15 entries of this size
        cache.hits = cache.misses = 0
        assert cache.get_many(keys[:20]) == [None] + [b"v%d" % i for i in range(1, 20)]
        assert cache.misses > 0 and cache.hits > 0
        hits = cache.hits
        assert cache.get_many(keys[15:20]) == [b"v%d" % i for i in range(15, 20)]
        assert cache.hits == hits + 5  # just read: served from memory
        cache.put(keys[19], b"staged")  # a write of a time that the sink then fails
        assert cache.get_many([keys[19]]) == [b"staged"]
        store.rollback()
        assert cache.get_many([keys[19]]) == [b"v19"]


def test_deletes_in_a_full_cache_evict_the_oldest_and_read_as_absent(tmp_path):
    """``delete_many`` deletes in the table and remembers the keys as absent; a full cache drops
    its oldest generation whole: the newest writes stay, the oldest go, the budget holds."""
    with StateStore(tmp_path / "s") as store:
        table = store.table("t", "point")
        cache = EntryCache(table, cache_bytes=40 * 124)
        keys = [b"k%03d" % i for i in range(100)]
        for i in range(0, 100, 5):  # ~124-byte entries, 5 a write: 8 writes fill a generation
            cache.put_many(keys[i : i + 5], [b"v%03d" % j for j in range(i, i + 5)])
        store.commit(1)
        assert 20 <= cache.cached_entries <= 40
        cache.hits = cache.misses = 0
        cache.get_many(keys[80:])
        assert cache.hits == 20  # the newest writes stay
        cache.get_many(keys[:40])
        assert cache.misses == 40  # the oldest went
        for key in keys[90:95]:
            cache.delete(key)
        cache.delete_many(keys[95:])
        store.commit(2)
        assert cache.cached_entries <= 40
        assert cache.get_many(keys[88:]) == [b"v088", b"v089"] + [None] * 10
        cache.clear()  # from the table alone: the deletes were written
        assert cache.get_many(keys[88:]) == [b"v088", b"v089"] + [None] * 10


def test_a_write_larger_than_a_generation_keeps_its_newest_entries(tmp_path):
    """One write past half the budget replaces both generations by its newest entries: a value
    written earlier and rewritten by it is never read stale from the cache."""
    with StateStore(tmp_path / "s") as store:
        table = store.table("t", "point")
        cache = EntryCache(table, cache_bytes=40 * 124)
        keys = [b"k%03d" % i for i in range(100)]
        cache.put_many(keys[:10], [b"old%d" % i for i in range(10)])
        store.commit(1)
        cache.put_many(keys, [b"n%03d" % i for i in range(100)])
        store.commit(2)
        assert 0 < cache.cached_entries <= 20
        assert cache.get_many(keys[:10]) == [b"n%03d" % i for i in range(10)]
        cache.hits = 0
        cache.get_many(keys[-cache.cached_entries :])
        assert cache.hits == cache.cached_entries


def test_filling_from_empty_reads_as_the_model_says(tmp_path):
    """Population (``fresh_reads``): batches of mostly new keys are not cached (and leave the
    cache), batches of keys seen before are; every read is the last committed write."""
    rng = random.Random(3)
    committed: dict[bytes, bytes] = {}
    with StateStore(tmp_path / "s") as store:
        cache = EntryCache(store.table("t", "point"), cache_bytes=400 * 150)
        with store.fresh_reads():
            assert cache.table.filling
            for t in range(1, 50):
                old = {b"k%04d" % rng.randrange(600) for _ in range(rng.randrange(1, 300))}
                if t % 3 == 0:  # mostly new keys, a few cached ones among them
                    old = set(list(old)[:5]) | {b"n%02d-%03d" % (t, i) for i in range(200)}
                keys = list(old)
                assert cache.get_many(keys) == [committed.get(k) for k in keys]
                _write_time(store, cache, committed, t, keys, gone_every=7, rollback_every=11)
        everything = sorted(committed) + [b"never"]
        assert cache.get_many(everything) == [committed.get(k) for k in everything]


def test_steps_aside_when_few_reads_hit_and_comes_back(tmp_path, monkeypatch):
    """Outside population, a window of reads that mostly miss empties the cache and sends reads
    and writes to the table for a while; then the cache fills again. Every read, through all of
    it (rollbacks included), is the last committed write."""
    monkeypatch.setattr(hit_rate_gate, "WINDOW_KEYS", 100)
    monkeypatch.setattr(hit_rate_gate, "BYPASS_KEYS", 300)
    rng = random.Random(5)
    committed: dict[bytes, bytes] = {}
    states = []
    with StateStore(tmp_path / "s") as store:
        cache = EntryCache(store.table("t", "point"), cache_bytes=1 << 20)
        for t in range(1, 120):
            spread = 5000 if (t // 30) % 2 else 40  # spread-out keys, then a few hot ones
            keys = list({b"k%05d" % rng.randrange(spread) for _ in range(rng.randrange(1, 40))})
            assert cache.get_many(keys) == [committed.get(k) for k in keys]
            states.append(cache.gate.aside)
            assert not (cache.gate.aside and cache.cached_entries)  # aside: it holds nothing
            _write_time(store, cache, committed, t, keys, gone_every=5, rollback_every=13)
        assert any(states) and not all(states)  # it stepped aside and came back
        hot = [s for t, s in enumerate(states, 1) if not (t // 30) % 2 and t > 5]
        assert hot.count(False) > len(hot) // 2  # hot keys: mostly served from memory
        everything = sorted(committed) + [b"never"]
        assert cache.get_many(everything) == [committed.get(k) for k in everything]


def _write_time(store, cache, committed, t, keys, gone_every, rollback_every) -> None:
    """Time ``t``'s writes through the cache: new values for ``keys``, then deletes of every
    ``gone_every``-th; rolled back when ``t`` is a multiple of ``rollback_every``, else committed
    and recorded in the model ``committed``."""
    values = [b"v%d-%d" % (t, i) for i in range(len(keys))]
    cache.put_many(keys, values)
    gone = keys[::gone_every]
    cache.delete_many(gone)
    if t % rollback_every == 0:
        store.rollback()
        return
    store.commit(t)
    committed.update(zip(keys, values, strict=True))
    for k in gone:
        committed.pop(k)


def test_a_working_set_rewritten_every_time_stays_in_its_generation(tmp_path):
    """Rewriting the same keys counts their bytes once: a working set of a third of a
    generation, rewritten 50 times, never rotates the generations (before, each rewrite added
    its bytes again, and every third time pushed the set into the old generation)."""
    with StateStore(tmp_path / "s") as store:
        table = store.table("t", "point")
        cache = EntryCache(table, cache_bytes=2 * 60 * (120 + 100))
        keys = [b"k%02d" % i for i in range(20)]
        for t in range(1, 51):
            cache.get_many(keys)
            cache.put_many(keys, [bytes([t]) * 100] * 20)
            store.commit(t)
            assert cache._young_bytes == 20 * (120 + 100)
        assert not cache._old and not cache._evicted
        assert cache.get_many(keys) == [bytes([50]) * 100] * 20
        cache.delete_many(keys[:5])  # a delete's value is counted as nothing
        assert cache._young_bytes == 15 * (120 + 100) + 5 * 120
