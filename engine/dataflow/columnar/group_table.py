"""Fixed-width per-group records in a collection's column family, read a batch at a time.

``GroupTable`` maps a group's key bytes (``kernels.key_bytes``) to one numpy record of a fixed
dtype (counts, 128-bit sums...): ``fetch(keys)`` returns the committed records of a whole batch of
groups in one structured array, ``store(keys, records, alive)`` stages the new ones (and deletes
the dead) in the store's write batch. Records are the raw bytes of the dtype (no pickle): a miss
costs one ``get_many`` for all missing keys and one ``np.frombuffer`` to decode them.

A bounded in-memory cache of recent groups (FIFO eviction, ``max_groups``) answers most reads
without RocksDB. The cache may hold the values of the time in progress; the dataflow always
commits or rolls back a time before the next one starts, and a rollback empties the cache
(``StateStore.drop_caches``; so does the end of a population), so a read never sees a discarded
write. While the table is filled from empty (population, ``StateTable.filling``) nothing is
evicted and a batch's new groups are cached only if the batch mostly found groups seen before
and they fit. Outside population the cache steps aside, empty, while it does not pay
(``HitRateGate``: under half of the groups read found in it; the Q18-shaped group-by finds
~27%). This module must not know what the record's fields mean.
"""

from __future__ import annotations

from itertools import islice, repeat

import numpy as np

from engine.dataflow.columnar import kernels as K
from engine.dataflow.state.hit_rate_gate import HitRateGate, retried
from engine.dataflow.state.store import StateTable
from engine.dataflow.state.written_keys import mostly_known

#: rough Python overhead of one cached group (dict entry + key bytes object), for the budget
_ENTRY_OVERHEAD = 120


class GroupTable:
    def __init__(self, table: StateTable, dtype: np.dtype, cache_bytes: int = 64 << 20) -> None:
        self.table = table
        self.dtype = np.dtype(dtype)
        self.max_groups = self._groups_in(cache_bytes)
        self._slot: dict[bytes, int] = {}
        self._records = np.zeros(1024, dtype=self.dtype)
        self._fetched = np.empty(0, dtype=np.int64)  # slots of the keys of the last fetch
        self._free: list[int] = []
        self._next = 0  # slots handed out so far (free or in use)
        self._shrinks = 0  # smaller budgets given (``resize``, any thread)
        self._shrunk = 0  # of those, the ones this cache's own thread has applied
        self._evicted = False  # whether it dropped groups since it was emptied or resized
        #: the groups it held at most when set aside while full (too small to pay?), else None
        self._aside_full_at: int | None = None
        self._recurring = False  # whether the last fetch found most of its groups
        self.gate = HitRateGate()
        self._found = 0  # groups the last fetch found in the cache (judged at its store)
        table.store.add_cache(self)  # last: the budget sizes it at once

    # -- reads ------------------------------------------------------------------------------------
    def fetch(self, keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(records, present) of a batch of groups: each key's committed record (absent keys
        read as zeros). The next ``store`` must be for the same keys."""
        if self._shrunk != self._shrinks:  # a smaller budget: applied here, between times
            self._shrunk = self._shrinks
            if len(self._slot) > self.max_groups:
                self.clear()
        filling = self.table.filling
        n = len(keys)
        if filling:
            self.gate.reset()
        elif self.gate.aside:
            self.gate.read_past(n)
        else:  # room for new groups (while filling they enter only where they fit: see store)
            self._evict(n)
        if self.gate.aside:
            slots = np.full(n, -1, dtype=np.int64)
        else:
            slots = np.fromiter(map(self._slot.get, keys, repeat(-1, n)), dtype=np.int64, count=n)
        hit = slots >= 0
        self._found = int(hit.sum())
        out = np.zeros(len(keys), dtype=self.dtype)
        out[hit] = self._records[slots[hit]]
        present = hit.copy()
        if not hit.all():
            miss = np.flatnonzero(~hit)
            raws = self.table.get_many([keys[i] for i in miss])
            found = [i for i, raw in zip(miss.tolist(), raws, strict=True) if raw is not None]
            if found:
                blob = b"".join(raw for raw in raws if raw is not None)
                out[found] = np.frombuffer(blob, dtype=self.dtype)
                present[found] = True
        self._fetched = slots
        self._recurring = mostly_known(int(present.sum()), n)
        return out, present

    # -- writes -----------------------------------------------------------------------------------
    def store(self, keys: list[bytes], records: np.ndarray, alive: np.ndarray) -> None:
        """Stage ``records`` for the alive keys (and cache them), deletes for the others."""
        slots = self._fetched
        if len(slots) != len(keys):
            raise RuntimeError("GroupTable.store() must follow fetch() of the same keys")
        live = np.flatnonzero(alive)
        values = records[live].view(f"V{self.dtype.itemsize}").tolist()
        self.table.put_many(K.pick(keys, live), values)
        self.table.delete_many(K.pick(keys, np.flatnonzero(~alive)))
        slot_of, free = self._slot, self._free
        for i in np.flatnonzero(~alive & (slots >= 0)).tolist():  # dead groups leave the cache
            del slot_of[keys[i]]
            free.append(int(slots[i]))
            slots[i] = -1
        new = np.flatnonzero(alive & (slots < 0))
        if self.gate.aside or (
            self.table.filling
            and (not self._recurring or len(slot_of) + len(new) > self.max_groups)
        ):
            # population fills the state from empty: a batch of mostly new groups only churns
            # the cache (Q18: ~1 s of slots and evictions; written_keys.mostly_known); one of
            # groups seen before is cached while it fits
            new = new[:0]
        if len(new):  # new groups enter it: free slots first, then never-used ones
            reused = min(len(new), len(free))
            got = np.concatenate(
                [np.array(free[len(free) - reused :], np.int64), self._grow(len(new) - reused)]
            )
            del free[len(free) - reused :]
            slots[new] = got
            slot_of.update(zip(K.pick(keys, new), got.tolist(), strict=True))
        kept = slots >= 0
        self._records[slots[kept]] = records[kept]
        self._fetched = np.empty(0, dtype=np.int64)
        if (
            not self.table.filling
            and not self.gate.aside
            and self.gate.judge(len(keys), self._found)
        ):
            self._aside_full_at = self.max_groups if self._evicted else None
            self.clear()  # (judged here, after this time's slots were used)

    # -- the cache --------------------------------------------------------------------------------
    def _grow(self, n: int) -> np.ndarray:
        """``n`` never-used slots, the record array doubled as often as they need."""
        size = len(self._records)
        while self._next + n > size:
            size *= 2
        if size > len(self._records):
            bigger = np.zeros(size, dtype=self.dtype)
            bigger[: self._next] = self._records[: self._next]
            self._records = bigger
        self._next += n
        return np.arange(self._next - n, self._next, dtype=np.int64)

    def _evict(self, incoming: int) -> None:
        excess = len(self._slot) + incoming - self.max_groups
        if excess <= 0:
            return
        victims = list(islice(iter(self._slot), excess))
        for k in victims:
            self._free.append(self._slot.pop(k))
        self._evicted = True

    def clear(self) -> None:
        self._evicted = False
        self._slot.clear()
        self._records = np.zeros(1024, dtype=self.dtype)  # the cache's memory goes too
        self._free = []
        self._next = 0

    def resize(self, cache_bytes: int) -> None:
        """A new byte budget, from any thread (``MemoryBudget`` re-divides its part as views
        come and go and as their use changes); a smaller one that cannot hold the cached groups
        empties the cache at its next ``fetch``, in the thread that uses it (its record array,
        sized for the old budget, goes with it): emptied between a ``fetch`` and its ``store``,
        the fetched slots would be written into the new array, over the slots handed to the
        time's new groups."""
        groups = self._groups_in(cache_bytes)
        if groups < self.max_groups:
            self._shrinks += 1
        elif retried(self.gate, self.max_groups, groups, self._aside_full_at):
            self.gate.reset(warm=True)  # judged afresh at its new size
        self.max_groups = groups
        self._evicted = False  # whether it fills the new one: seen from now on

    @property
    def wants_more_than(self) -> int | None:
        """The budget it was set aside at while full (``HitRateGate``: it may pay with more),
        while it is aside; else None."""
        if self._aside_full_at is None or not self.gate.aside:
            return None
        return self._aside_full_at * (self.dtype.itemsize + _ENTRY_OVERHEAD)

    def _groups_in(self, cache_bytes: int) -> int:
        return max(1024, cache_bytes // (self.dtype.itemsize + _ENTRY_OVERHEAD))

    @property
    def cached_groups(self) -> int:
        return len(self._slot)

    @property
    def used_bytes(self) -> int:
        """What the cache holds now, as its budget counts it (``MemoryBudget``'s demand): all of
        its budget once it dropped groups to keep within it (since it was emptied or resized)."""
        if self._evicted:
            return self.max_groups * (self.dtype.itemsize + _ENTRY_OVERHEAD)
        return len(self._slot) * (self.dtype.itemsize + _ENTRY_OVERHEAD)
