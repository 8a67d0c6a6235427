"""Which keys a column family may hold while it is being filled from empty (population).

A fresh state's column family holds only what was written to it since it was empty, so a read of
a key never written cannot find anything: ``WrittenKeys`` remembers every key put into it (one bit
per key hash in a fixed bitmap, a one-hash Bloom filter: no false "absent", some false "maybe"),
and ``StateTable.get_many`` reads RocksDB only for the keys it may hold. During population most
reads are of new keys (a chunk's join keys and groups, absent from the state until the chunk
writes them): TPC-H Q18 at SF 1 did ~4M such point reads, each ~1-3 us through RocksDB, against
~0.1 us here. Deletes need no bookkeeping (a deleted key reads as absent either way), rolled-back
writes only leave false "maybe"s.

Only exact while every key of the table was written through the table with the filter on:
``StateStore.fresh_reads`` turns it on for empty tables only, and off again when population ends
(the bitmap is memory for the population's duration only). Python's ``hash`` of bytes is salted
per process, which is fine for a filter that never leaves it.
"""

from __future__ import annotations

import numpy as np

#: while a table is filled, a batch is worth caching when at least this share of its keys was
#: already there (``mostly_known``)
_KNOWN_SHARE = 0.25


def mostly_known(found: int, keys: int) -> bool:
    """Whether a batch that found ``found`` of its ``keys`` keys in a table being filled is worth
    caching: a source clustered by the key brings new keys chunk after chunk (TPC-H Q18's 1.5M
    groups by ``l_orderkey``, each seen once), caching them only churns the caches of
    ``GroupTable`` and ``EntryCache``; keys seen before (Q13's customers, in every chunk of
    orders) come back."""
    return keys > 0 and found >= _KNOWN_SHARE * keys


#: bits of the bitmap (8 MB): ~9% false "maybe" at 6M keys, ~2% at 1.5M
_BITS = 1 << 26
#: past this many keys added the filter answers "maybe" for everything (too full to help)
_FULL = _BITS // 3


class WrittenKeys:
    """A one-hash Bloom filter of the keys written to one column family since it was empty."""

    def __init__(self) -> None:
        self._raw: bytearray | None = None  # allocated by the first add (per-key Python access)
        self._bits = np.empty(0, np.uint8)  # the same memory, for batches
        self.added = 0

    @property
    def useful(self) -> bool:
        return self.added < _FULL

    def add(self, keys: list[bytes]) -> None:
        if not keys:
            return
        if self._raw is None:
            self._raw = bytearray(_BITS // 8)
            self._bits = np.frombuffer(self._raw, np.uint8)
        if len(keys) < _BATCH:
            for k in keys:
                self.add_one(k)
            return
        self.added += len(keys)
        h = _slots(keys)
        np.bitwise_or.at(self._bits, h >> 3, np.left_shift(1, h & 7).astype(np.uint8))

    def add_one(self, key: bytes) -> None:
        """``add([key])`` at a tenth of its cost (the row arrangements put key by key)."""
        raw = self._raw
        if raw is None:
            self.add([key])
            return
        self.added += 1
        h = hash(key) & _MASK
        raw[h >> 3] |= 1 << (h & 7)

    def may_hold(self, key: bytes) -> bool:
        if self._raw is None:
            return False
        h = hash(key) & _MASK
        return bool(self._raw[h >> 3] >> (h & 7) & 1)

    def maybe(self, keys: list[bytes]) -> np.ndarray:
        """Per key, whether the table may hold it (False: it certainly does not)."""
        if self._raw is None:
            return np.zeros(len(keys), bool)
        h = _slots(keys)
        return (self._bits[h >> 3] >> (h & 7).astype(np.uint8)) & 1 != 0


#: fewer keys than this are added one by one in Python (numpy's call overhead is ~5 us)
_BATCH = 32
_MASK = _BITS - 1


def _slots(keys: list[bytes]) -> np.ndarray:
    return np.fromiter(map(hash, keys), np.int64, len(keys)) & _MASK
