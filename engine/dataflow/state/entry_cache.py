"""A bounded in-memory cache in front of a column family whose values are read whole.

``EntryCache`` answers ``get_many`` from a dict of recently written entries and reads only the
misses from RocksDB (one ``get_many``); ``put_many``/``put``/``delete`` stage the write in the
store's write batch and remember the new value (a delete remembers None: absent). Only writes
enter the cache: the collections using it rewrite every key they read in a time, so the written
value is the one the next time reads. Eviction is first-in first-out by a byte budget (values'
bytes plus ~120 bytes of dict overhead an entry), from an ``OrderedDict`` (O(1) per evicted entry);
the bookkeeping is a few C-level passes per batch, no Python loop per key except over evicted
entries.

The cache may hold the writes of the time in progress: the dataflow commits or rolls back a time
before the next one starts, and a rollback (``StateStore.rollbacks`` moved) empties the cache, so
a read never sees a discarded write. Used by the columnar join's key entries; ``GroupTable`` is
the fixed-width-record analogue.
"""

from __future__ import annotations

from collections import OrderedDict

from engine.dataflow.state.store import StateTable

#: rough Python overhead of one cached entry (dict slot, key and value objects)
_ENTRY_OVERHEAD = 120


def _len(value: bytes | None) -> int:
    return len(value) if value is not None else 0


class EntryCache:
    def __init__(self, table: StateTable, cache_bytes: int = 64 << 20) -> None:
        self.table = table
        self.cache_bytes = cache_bytes
        self._entries: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._bytes = 0  # the cached values' lengths
        self._rollbacks = table.store.rollbacks
        self.hits = 0
        self.misses = 0

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Each key's value (None: absent), from the cache or one read of the misses."""
        self._check_generation()
        out = list(map(self._entries.get, keys, [_MISSING] * len(keys)))
        miss = [i for i, v in enumerate(out) if v is _MISSING]
        self.hits += len(keys) - len(miss)
        self.misses += len(miss)
        if miss:
            raws = self.table.get_many([keys[i] for i in miss])
            for i, raw in zip(miss, raws, strict=True):
                out[i] = raw
        return out  # type: ignore[return-value]

    def put_many(self, keys: list[bytes], values: list[bytes]) -> None:
        self.table.put_many(keys, values)
        entries = self._entries
        old = [v for v in map(entries.get, keys) if v is not None]
        self._bytes += sum(map(len, values)) - sum(map(len, old))
        entries.update(zip(keys, values, strict=True))
        self._evict()

    def put(self, key: bytes, value: bytes) -> None:
        self.table.put(key, value)
        self._remember([key], [value])

    def delete(self, key: bytes) -> None:
        self.table.delete(key)
        self._remember([key], [None])

    def delete_many(self, keys: list[bytes]) -> None:
        self.table.delete_many(keys)
        self._remember(keys, [None] * len(keys))

    # -- the cache --------------------------------------------------------------------------------
    def _remember(self, keys: list[bytes], values: list[bytes | None]) -> None:
        entries = self._entries
        old = [v for v in map(entries.get, keys) if v is not None]
        self._bytes += sum(map(len, [v for v in values if v is not None])) - sum(map(len, old))
        entries.update(zip(keys, values, strict=True))
        self._evict()

    def _evict(self) -> None:
        entries = self._entries
        excess = self._bytes + len(entries) * _ENTRY_OVERHEAD - self.cache_bytes
        pop = entries.popitem
        while excess > 0 and entries:
            # an OrderedDict: popping the oldest is O(1); a dict popped from its front leaves
            # dummy slots that every later scan from the front walks (a full cache paid ~0.5 ms
            # per delete: TPC-H Q12's deletes of 1,500 orders took 700 ms)
            _, value = pop(last=False)
            size = _len(value)
            self._bytes -= size
            excess -= size + _ENTRY_OVERHEAD

    def _check_generation(self) -> None:
        if self.table.store.rollbacks != self._rollbacks:
            self._rollbacks = self.table.store.rollbacks
            self.clear()

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    @property
    def cached_entries(self) -> int:
        return len(self._entries)


_MISSING = object()
