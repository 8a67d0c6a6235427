"""``StateStore.drop_caches`` empties every cache registered with the store (the join's entry
cache, the reduce's group table, the top-k's heads) at once; reads then come from the committed
state, and a cache that is gone leaves the store's registry."""

from __future__ import annotations

import gc

import numpy as np

from engine.dataflow.columnar.group_table import GroupTable
from engine.dataflow.columnar.partition_heads import HeadCache
from engine.dataflow.state.entry_cache import EntryCache
from engine.dataflow.state.store import StateStore

DTYPE = np.dtype([("count", "<i8"), ("sum", "<i8")])


def _held(entries: EntryCache, groups: GroupTable, heads: HeadCache) -> tuple[int, int, int]:
    return entries.cached_entries, groups.cached_groups, heads.cached_partitions


def test_drop_caches_empties_every_registered_cache(tmp_path):
    with StateStore(tmp_path / "s") as store:
        entries = EntryCache(store.table("e", "point"))
        groups = GroupTable(store.table("g", "point"), DTYPE)
        heads = HeadCache(store, 1 << 20)
        keys = [b"k%d" % i for i in range(50)]
        entries.get_many(keys)
        entries.put_many(keys, [b"v%d" % i for i in range(50)])
        groups.fetch(keys)
        records = np.zeros(50, DTYPE)
        records["count"] = np.arange(1, 51)
        groups.store(keys, records, np.ones(50, bool))
        heads.put_many(keys[:5], [None] * 5, [b"head"] * 5, [1] * 5)
        store.commit(1)
        assert _held(entries, groups, heads) == (50, 50, 5)

        store.drop_caches()
        assert _held(entries, groups, heads) == (0, 0, 0)
        assert len(groups._records) == 1024  # the records' memory went with them
        assert entries.get_many(keys[:2]) == [b"v0", b"v1"]  # from the committed state
        found, present = groups.fetch(keys[:3])
        assert found["count"].tolist() == [1, 2, 3] and present.all()
        assert heads.get_many(keys[:1]) == [None]

        del entries, groups, heads
        gc.collect()
        assert not list(store._caches)
