"""MemoryBudget: one bound on the memory of the views' state in a process, shared by every view.

Without a budget each view's ``StateStore`` has a RocksDB block cache of its own (64 MB), each of
its column families up to three 8 MB memtables, and each stateful collection an in-memory cache
of its hot entries (64 MB, ``EntriesCache``): memory grows with the number of views and of
their collections. A budget of ``total_bytes`` is shared instead:

* an eighth is one RocksDB block cache for the tables of every view (``block_cache``);
* a quarter is for the memtables: every table (column family) of every view may hold
  ``MEMTABLES`` memtables of ``memtable_size`` bytes, resized (``StateStore.size_memtables``)
  when a table or a store comes or goes; a resize takes effect at each table's next memtable,
  and a commit larger than a memtable still goes into one whole. (RocksDB's write buffer
  manager was measured first: it has only the database being written flush, so three stores of
  two tables, 6 MB written to each, kept 27 MB in memtables under its 8 MB limit.)
* the rest goes to the collections' caches, divided by use (``fair_shares``): a cache that
  holds under ``WANTING`` of its share (an idle view's, one whose hit-rate gate set it aside,
  a small group-by's, a new one) is given twice what it holds (at least ``MIN_CACHE_SHARE``),
  and what that leaves goes in equal parts to the caches that fill theirs (and to those their
  hit-rate gate set aside while full, if that gives them more than they had: a bigger share
  ends their time aside, they are tried again at once); while none does,
  what is left over is spread over all (caches alike, new or emptied ones, get equal parts:
  ``cache_share``). A share is never below twice what its cache holds, so a re-division by use
  empties no cache. Every cache a store registers
  (``StateStore.add_cache``) is given its share when one is added or its store closes, and the
  shares are re-divided at most every ``REBALANCE_S`` seconds, at a store's commit. That runs
  in whatever view's thread, so ``resize`` only sets a cache's bound: a smaller one takes
  effect at the cache's next read, in its own thread, and empties it only if what it holds no
  longer fits (a cache given twice what it holds keeps it all).

What it does not bound: the data of a time in flight (``max_buffered_changes`` bounds a huge
transaction's), Python's and the libraries' own memory, RocksDB's table readers, and the page
cache behind state files read through a memory map (the kernel's, counted in a process's RSS
but reclaimable).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Protocol

from rocksdict import Cache

log = logging.getLogger(__name__)

#: the least budget that leaves every part a useful size
MIN_BYTES = 32 << 20
#: the least a collection's cache is given, however many share the budget
MIN_CACHE_SHARE = 1 << 20
#: memtables a table may hold: the one written, and two being flushed
MEMTABLES = 3
#: a cache holding this part of its share or more fills it: it may use more
WANTING = 0.75
#: the least time between two re-divisions of the caches' part by use
REBALANCE_S = 1.0
#: the least a memtable is given, however many tables share the budget (past
#: ``write_buffer_bytes / (MEMTABLES * MIN_MEMTABLE)`` tables the memtables outgrow their part)
MIN_MEMTABLE = 256 << 10


class ResizableCache(Protocol):
    """An in-memory cache with a byte budget that can change (``resize``, from any thread), and
    what it holds now (``used_bytes``)."""

    def resize(self, cache_bytes: int) -> None: ...

    @property
    def used_bytes(self) -> int: ...

    @property
    def wants_more_than(self) -> int | None:
        """Set aside as not paying while full: the budget it had then (a bigger one may pay)."""


def fair_shares(demands: list[int | None], total: int) -> list[int]:
    """Max-min fair shares of ``total`` for these demands (None: as much as it gets): the
    smallest demands are met while they are below an equal part of what is left, the rest split
    what remains equally; what the met demands leave over is spread over all.

    >>> fair_shares([10, None, None], 100)
    [10, 45, 45]
    >>> fair_shares([10, 20], 100)
    [45, 55]
    """
    n = len(demands)
    if not n:
        return []
    shares = [0] * n
    left = total
    met = sorted((d, i) for i, d in enumerate(demands) if d is not None)
    open_ = n
    for d, i in met:
        if d * open_ > left:
            break
        shares[i] = d
        left -= d
        open_ -= 1
    if open_:
        part = left // open_
        for i in range(n):
            if not shares[i]:
                shares[i] = part
    else:
        extra = left // n
        shares = [x + extra for x in shares]
    return shares


class MemtableHolder(Protocol):
    """A state store: how many tables have memtables, and a way to size them."""

    @property
    def memtables(self) -> int: ...

    def size_memtables(self, size: int) -> None: ...


class MemoryBudget:
    """``total_bytes`` for the state of every view that opens its store with this budget."""

    def __init__(self, total_bytes: int, by_use: bool = True) -> None:
        if total_bytes < MIN_BYTES:
            raise ValueError(
                f"a memory budget must be at least {MIN_BYTES >> 20} MB, not "
                f"{total_bytes / (1 << 20):g} MB"
            )
        self.total_bytes = total_bytes
        #: whether the caches' shares follow their use (else equal parts, as before 2026-12-01)
        self.by_use = by_use
        self.block_cache_bytes = total_bytes // 8
        self.write_buffer_bytes = total_bytes // 4
        self.caches_bytes = total_bytes - self.block_cache_bytes - self.write_buffer_bytes
        self.block_cache = Cache(self.block_cache_bytes)
        self._caches: weakref.WeakSet[ResizableCache] = weakref.WeakSet()
        self._stores: weakref.WeakSet[MemtableHolder] = weakref.WeakSet()
        self._sized = 0  # the memtable size the stores were given last
        self._lock = threading.RLock()  # stores open and close from the engine's threads
        self._given: weakref.WeakKeyDictionary[ResizableCache, int] = weakref.WeakKeyDictionary()
        self._rebalanced = time.monotonic()

    @property
    def cache_share(self) -> int:
        """An equal part of the caches' part for each registered cache: what each is given
        while none holds under ``WANTING`` of its share."""
        return max(MIN_CACHE_SHARE, self.caches_bytes // max(1, len(self._caches)))

    def share_of(self, cache: ResizableCache) -> int | None:
        """What ``cache`` was given last (None: not registered)."""
        return self._given.get(cache)

    @property
    def caches(self) -> int:
        """How many collection caches share the budget now."""
        return len(self._caches)

    @property
    def memtable_size(self) -> int:
        """What each memtable of each table may hold now."""
        tables = sum(s.memtables for s in list(self._stores))
        return max(MIN_MEMTABLE, self.write_buffer_bytes // (MEMTABLES * max(1, tables)))

    def add(self, cache: ResizableCache) -> None:
        """Share the budget with ``cache`` too (held weakly): every cache gets the new share."""
        with self._lock:
            self._caches.add(cache)
            self._resize_caches()

    def add_store(self, store: MemtableHolder) -> None:
        """Share the memtables' part with ``store``'s tables too (held weakly)."""
        with self._lock:
            self._stores.add(store)
            self._size_memtables()

    def tables_changed(self) -> None:
        """A store opened or dropped a table: every memtable gets the new size."""
        with self._lock:
            self._size_memtables()

    def release(self, store: MemtableHolder, caches: list[ResizableCache]) -> None:
        """``store`` closes, with its ``caches``: the others get their parts."""
        with self._lock:
            self._stores.discard(store)
            for c in caches:
                self._caches.discard(c)
            self._resize_caches()
            self._size_memtables()

    def rebalance(self) -> None:
        """Re-divide the caches' part by what each holds now (``fair_shares``)."""
        with self._lock:
            self._resize_caches()

    def maybe_rebalance(self) -> None:
        """``rebalance`` if the last re-division is ``REBALANCE_S`` old and no other thread is
        at it (a store's commit calls this: cheap when it is not time)."""
        if time.monotonic() - self._rebalanced < REBALANCE_S:
            return
        if self._lock.acquire(blocking=False):
            try:
                self._resize_caches()
            finally:
                self._lock.release()

    def _demand(self, cache: ResizableCache) -> int | None:
        """What ``cache`` asks for: None (as much as it gets) when it fills its share or was set
        aside while full, else twice what it holds (a new cache: what it holds, nothing yet)."""
        given = self._given.get(cache)
        used = cache.used_bytes
        if (given is not None and used >= WANTING * given) or cache.wants_more_than is not None:
            return None
        return max(MIN_CACHE_SHARE, 2 * used)

    def _resize_caches(self) -> None:
        self._rebalanced = time.monotonic()
        caches = list(self._caches)
        if self.by_use:
            demands = [self._demand(c) for c in caches]
            shares = fair_shares(demands, self.caches_bytes)
            # a cache set aside while full asks for more only if it would get more than it had
            futile = [
                i
                for i, c in enumerate(caches)
                if (had := c.wants_more_than) is not None and shares[i] <= had
            ]
            if futile:
                for i in futile:
                    demands[i] = MIN_CACHE_SHARE
                shares = fair_shares(demands, self.caches_bytes)
        else:
            shares = [self.cache_share] * len(caches)
        for c, share in zip(caches, shares, strict=True):
            share = max(MIN_CACHE_SHARE, share)
            if self._given.get(c) != share:
                self._given[c] = share
                c.resize(share)

    def _size_memtables(self) -> None:
        size = self.memtable_size
        if size != self._sized:
            self._sized = size
            for s in list(self._stores):
                try:
                    s.size_memtables(size)
                except Exception as e:  # e.g. a store whose write failed (full disk): reopened
                    log.warning("could not resize the memtables of %s: %s", s, e)
