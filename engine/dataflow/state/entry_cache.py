"""A bounded in-memory cache in front of a column family whose values are read whole.

``EntryCache`` answers ``get_many`` from a dict of recently written entries and reads only the
misses from RocksDB (one ``get_many``); ``put_many``/``put``/``delete`` stage the write in the
store's write batch and remember the new value (a delete remembers None: absent). Only writes
enter the cache: the collections using it rewrite every key they read in a time, so the written
value is the one the next time reads. Eviction is by generation, within a byte budget (values'
bytes plus ~120 bytes of dict overhead an entry): writes go to a young dict; when it holds half
the budget it becomes the old one and the previous old one is dropped whole, so a read checks two
dicts and eviction costs nothing per entry (a first-in first-out ``OrderedDict`` popped entry by
entry cost TPC-H Q18's population ~4 s: 4.3M evictions). A write larger than half the budget
keeps only its newest entries (and drops both generations: none of them can be stale).

The cache may hold the writes of the time in progress: the dataflow commits or rolls back a time
before the next one starts, and a rollback empties the cache (``StateStore.drop_caches``; so does
the end of a population), so a read never sees a discarded write. While the table is filled from
empty (population, ``StateTable.filling``), a ``put_many`` after a read that found under a
quarter of its keys is not cached (its keys leave the cache): a source clustered by the key
brings new keys chunk after chunk. Used by the columnar join's key entries; ``GroupTable`` is
the fixed-width-record analogue.

Outside population the cache steps aside, empty, while it does not pay (``HitRateGate``: under
half of the keys read found in it).
"""

from __future__ import annotations

from collections import deque
from itertools import repeat

from engine.dataflow.state.hit_rate_gate import HitRateGate, retried
from engine.dataflow.state.store import StateTable
from engine.dataflow.state.written_keys import mostly_known

#: rough Python overhead of one cached entry (dict slot, key and value objects)
_ENTRY_OVERHEAD = 120


class EntryCache:
    def __init__(self, table: StateTable, cache_bytes: int = 64 << 20) -> None:
        self.table = table
        self.cache_bytes = cache_bytes
        self._young: dict[bytes, bytes | None] = {}
        self._old: dict[bytes, bytes | None] = {}
        self._young_bytes = 0  # the young entries' values and overhead
        self._old_bytes = 0  # the same of the old generation, when it turned old
        self._evicted = False  # whether it dropped entries since it was emptied or resized
        #: the budget it was set aside at while full (too small to pay?), else None
        self._aside_full_at: int | None = None
        self._shrinks = 0  # smaller budgets given (``resize``, any thread)
        self._shrunk = 0  # of those, the ones this cache's own thread has applied
        self.hits = 0
        self.misses = 0
        self._recurring = True  # whether the last get_many found most of its keys (filling)
        #: whether the last get_many found none of its keys cached, nothing remembered since
        self._none_cached = False
        self.gate = HitRateGate()
        table.store.add_cache(self)  # last: the budget sizes it at once

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Each key's value (None: absent), from the cache or one read of the misses."""
        if self._shrunk != self._shrinks:  # a smaller budget: applied here, between times
            self._shrunk = self._shrinks
            if self.used_bytes > self.cache_bytes or self._young_bytes > self.cache_bytes // 2:
                self.clear()
        if self.table.filling:
            self.gate.reset()
        elif self.gate.aside:
            self.gate.read_past(len(keys))
            self.misses += len(keys)
            return self.table.get_many(keys)
        out = list(map(self._young.get, keys, repeat(_MISSING)))
        self._none_cached = False
        if out.count(_MISSING) == len(keys) and not self._old:
            # nothing cached (population's new keys): no per-key bookkeeping
            self._none_cached = True  # until the next write is remembered
            out = self.table.get_many(keys)
            self.misses += len(keys)
            self._judge(keys, out, 0)
            return out
        miss = [i for i, v in enumerate(out) if v is _MISSING]
        if miss and self._old:
            old = self._old.get
            for i in miss:
                out[i] = old(keys[i], _MISSING)
            miss = [i for i in miss if out[i] is _MISSING]
        self.hits += len(keys) - len(miss)
        self.misses += len(miss)
        if miss:
            raws = self.table.get_many([keys[i] for i in miss])
            for i, raw in zip(miss, raws, strict=True):
                out[i] = raw
        self._judge(keys, out, len(keys) - len(miss))
        return out  # type: ignore[return-value]

    def _judge(self, keys: list[bytes], out: list, hits: int) -> None:
        """After a read of ``keys`` (``hits`` of them found in the cache): while filling,
        whether the batch's keys recur; otherwise the gate's judgement of the hit rate."""
        if self.table.filling:
            self._recurring = mostly_known(len(keys) - out.count(None), len(keys))
        elif self.gate.judge(len(keys), hits):
            self._aside_full_at = self.cache_bytes if self._evicted else None
            self.clear()

    def put_many(self, keys: list[bytes], values: list[bytes]) -> None:
        """Stage the writes of ``keys``: keys the last ``get_many`` read (a collection rewrites
        the keys it read in a time)."""
        self.table.put_many(keys, values)
        if self.table.filling and not self._recurring:
            # population filling the state from empty, a batch of mostly new keys
            # (written_keys.mostly_known): the batch's keys leave the cache instead, which must
            # not keep an older value of one (none to drop if the read found none of them)
            if not self._none_cached:
                self._forget(keys)
            return
        self._remember(keys, values, sum(map(len, values)))

    def _forget(self, keys: list[bytes]) -> None:
        for d in (self._young, self._old):
            if d:
                deque(map(d.pop, keys, repeat(None)), maxlen=0)

    def put(self, key: bytes, value: bytes) -> None:
        self.table.put(key, value)
        self._remember([key], [value], len(value))

    def delete(self, key: bytes) -> None:
        self.table.delete(key)
        self._remember([key], [None], 0)

    def delete_many(self, keys: list[bytes]) -> None:
        self.table.delete_many(keys)
        self._remember(keys, [None] * len(keys), 0)

    # -- the cache --------------------------------------------------------------------------------
    def _remember(self, keys: list[bytes], values: list[bytes | None], size: int) -> None:
        self._none_cached = False
        if self.gate.aside:
            return
        half = self.cache_bytes // 2
        size += len(keys) * _ENTRY_OVERHEAD
        if size > half:  # the write alone fills a generation: keep its newest entries only
            self._evicted = True
            n = len(keys)
            keep = max(0, int(n * half / size))
            self._old = {}
            self._old_bytes = 0
            self._young = dict(zip(keys[n - keep :], values[n - keep :], strict=True))
            self._young_bytes = size * keep // n
            return
        if self._young_bytes + size > half:
            self._evicted = self._evicted or bool(self._old)
            self._old = self._young
            self._old_bytes = self._young_bytes
            self._young = {}
            self._young_bytes = 0
        young = self._young
        # a key rewritten in its generation replaces its value: its old bytes and its slot
        # are not counted again (a working set rewritten time after time stays its size)
        replaced = sum(map(len, filter(None, map(young.get, keys)))) if young else 0
        before = len(young)
        young.update(zip(keys, values, strict=True))
        kept = len(keys) - (len(young) - before)
        self._young_bytes += size - replaced - kept * _ENTRY_OVERHEAD

    def clear(self) -> None:
        self._young = {}
        self._old = {}
        self._young_bytes = 0
        self._old_bytes = 0
        self._evicted = False

    @property
    def used_bytes(self) -> int:
        """What the cache holds now, as its budget counts it (``MemoryBudget``'s demand): all of
        its budget once it dropped entries to keep within it (since it was emptied or resized)."""
        if self._evicted:
            return self.cache_bytes
        return self._young_bytes + self._old_bytes

    def resize(self, cache_bytes: int) -> None:
        """A new byte budget, from any thread (``MemoryBudget`` re-divides its part as views
        come and go and as their use changes); a smaller one that cannot hold what the cache
        holds (both generations, or the young one in half of it) empties the cache at its
        next ``get_many``, in the thread that uses it: emptied here, it could lose what a read
        of the time in progress found and its put is about to rewrite."""
        if cache_bytes < self.cache_bytes:
            self._shrinks += 1
        elif retried(self.gate, self.cache_bytes, cache_bytes, self._aside_full_at):
            self.gate.reset(warm=True)  # judged afresh at its new size
        self.cache_bytes = cache_bytes
        self._evicted = False  # whether it fills the new one: seen from now on

    @property
    def wants_more_than(self) -> int | None:
        """The budget it was set aside at while full (``HitRateGate``: it may pay with more),
        while it is aside; else None."""
        return self._aside_full_at if self.gate.aside else None

    @property
    def cached_entries(self) -> int:
        """Distinct keys in the cache (a key rewritten since its generation turned old: once)."""
        return len(self._young) + sum(1 for k in self._old if k not in self._young)


_MISSING = object()
