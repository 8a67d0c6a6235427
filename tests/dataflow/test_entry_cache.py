"""EntryCache answers repeated reads from memory, within its budget, and forgets rolled-back writes."""

from __future__ import annotations

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
    """``delete_many`` deletes in the table and remembers the keys as absent; a full cache evicts
    its oldest entries first, one delete after another (each eviction pops from the front of an
    ``OrderedDict``: a plain dict kept the popped slots and every eviction walked them)."""
    with StateStore(tmp_path / "s") as store:
        table = store.table("t", "point")
        cache = EntryCache(table, cache_bytes=40 * 130)
        keys = [b"k%03d" % i for i in range(100)]
        cache.put_many(keys, [b"v%03d" % i for i in range(100)])
        store.commit(1)
        assert 35 <= cache.cached_entries <= 42  # 5,200 bytes of ~124-byte entries
        assert list(cache._entries)[0] > keys[55]  # the newest writes stay, the oldest went
        for key in keys[90:95]:
            cache.delete(key)
        cache.delete_many(keys[95:])
        store.commit(2)
        assert cache.cached_entries <= 42
        assert cache.get_many(keys[88:]) == [b"v088", b"v089"] + [None] * 10
        cache.clear()  # from the table alone: the deletes were written
        assert cache.get_many(keys[88:]) == [b"v088", b"v089"] + [None] * 10
