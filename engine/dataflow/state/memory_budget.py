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
* the rest goes to the collections' caches, in equal shares (``cache_share``): every cache a
  store registers (``StateStore.add_cache``) is resized when one is added or its store closes.
  That happens in the thread of the view whose store opens or closes, so ``resize`` only sets a
  cache's bound: a smaller one takes effect at the cache's next read, in its own thread.

What it does not bound: the data of a time in flight (``max_buffered_changes`` bounds a huge
transaction's), Python's and the libraries' own memory, RocksDB's table readers, and the page
cache behind state files read through a memory map (the kernel's, counted in a process's RSS
but reclaimable).
"""

from __future__ import annotations

import logging
import threading
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
#: the least a memtable is given, however many tables share the budget (past
#: ``write_buffer_bytes / (MEMTABLES * MIN_MEMTABLE)`` tables the memtables outgrow their part)
MIN_MEMTABLE = 256 << 10


class ResizableCache(Protocol):
    """An in-memory cache with a byte budget that can change (``resize``)."""

    def resize(self, cache_bytes: int) -> None: ...


class MemtableHolder(Protocol):
    """A state store: how many tables have memtables, and a way to size them."""

    @property
    def memtables(self) -> int: ...

    def size_memtables(self, size: int) -> None: ...


class MemoryBudget:
    """``total_bytes`` for the state of every view that opens its store with this budget."""

    def __init__(self, total_bytes: int) -> None:
        if total_bytes < MIN_BYTES:
            raise ValueError(
                f"a memory budget must be at least {MIN_BYTES >> 20} MB, not "
                f"{total_bytes / (1 << 20):g} MB"
            )
        self.total_bytes = total_bytes
        self.block_cache_bytes = total_bytes // 8
        self.write_buffer_bytes = total_bytes // 4
        self.caches_bytes = total_bytes - self.block_cache_bytes - self.write_buffer_bytes
        self.block_cache = Cache(self.block_cache_bytes)
        self._caches: weakref.WeakSet[ResizableCache] = weakref.WeakSet()
        self._stores: weakref.WeakSet[MemtableHolder] = weakref.WeakSet()
        self._sized = 0  # the memtable size the stores were given last
        self._lock = threading.RLock()  # stores open and close from the engine's threads

    @property
    def cache_share(self) -> int:
        """What each registered collection cache may hold now."""
        return max(MIN_CACHE_SHARE, self.caches_bytes // max(1, len(self._caches)))

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

    def _resize_caches(self) -> None:
        share = self.cache_share
        for c in list(self._caches):
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
