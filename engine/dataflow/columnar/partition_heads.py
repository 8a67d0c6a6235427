"""The first rows of many partitions, as arrays, and a bounded in-memory cache of them: the
columnar top-k's view of each partition's selection.

``KeyedRows`` holds rows of several partitions at once: per row its partition (an index into the
time's partitions), its key within the partition (``rk`` = ORDER BY bytes + identity bytes: the
row's state entry is ``P | rk``) and its record (``row_block.Rows``, ``rec["w"]`` = the row's
count). Rows are ordered by (partition, rk).

``pack_heads`` turns the rows of many partitions into one ``bytes`` per partition, and
``unpack_heads`` reads many of those back, each in one pass over all of them::

    head = n x u32 rk length | n records | rk bytes | text values (row by row)

``HeadCache`` keeps, per partition prefix, where its head ends in state (``head_end``: the rk of
the last row the head covers; None when the head is the whole partition, ``complete``), and the
packed head (None until it was read); first in, first out within a byte budget. It may hold the
time in progress: a rollback empties it (``StateStore.drop_caches``). ``encode_meta`` /
``decode_meta`` are the persisted form of ``head_end`` (absent = an empty, complete partition).
This module must not know which rows are selected.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice, repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar.row_block import (
    RowCodec,
    Rows,
    binary_over,
    gather_segments,
    large_offsets,
    row_major_text,
    run_starts,
    text_columns,
)
from engine.dataflow.state.store import StateStore

_ENTRY_OVERHEAD = 160  # rough Python overhead of a cached partition (dict slot, tuple, objects)


class KeyedRows:
    """Rows of several partitions: ``part``, ``rk`` (binary), ``rows`` (see module)."""

    __slots__ = ("part", "rk", "rows")

    def __init__(self, part: np.ndarray, rk: pa.Array, rows: Rows) -> None:
        self.part, self.rk, self.rows = part, rk, rows

    def __len__(self) -> int:
        return len(self.part)

    @property
    def counts(self) -> np.ndarray:
        return self.rows.rec["w"]

    def take(self, idx: np.ndarray) -> KeyedRows:
        return KeyedRows(
            self.part[idx], self.rk.take(pa.array(idx, pa.int64())), self.rows.take(idx)
        )

    @staticmethod
    def concat(parts: Sequence[KeyedRows]) -> KeyedRows:
        return KeyedRows(
            np.concatenate([p.part for p in parts]),
            pa.concat_arrays([p.rk.cast(pa.large_binary()) for p in parts]),
            Rows.concat([p.rows for p in parts]),
        )


def pack_heads(codec: RowCodec, heads: KeyedRows, nparts: int) -> list[bytes]:
    """One packed head per partition 0..nparts-1 (``heads`` ordered by partition)."""
    counts = np.bincount(heads.part, minlength=nparts)
    first = run_starts(counts)
    rk = heads.rk.cast(pa.large_binary())
    rk_off = large_offsets(rk)
    lengths = np.diff(rk_off).astype("<u4")
    text, row_text = row_major_text(heads.rows)
    size = codec.dtype.itemsize
    pieces = [
        binary_over(first * 4, lengths.tobytes()),
        binary_over(first * size, heads.rows.rec.tobytes()),
        binary_over(rk_off[first] - rk_off[0], _data(rk, rk_off)),
        binary_over(row_text[first] - row_text[0], text),
    ]
    return pc.binary_join_element_wise(*pieces, pa.scalar(b"", pa.large_binary())).to_pylist()


def _data(values: pa.Array, offsets: np.ndarray) -> pa.Buffer | None:
    buf = values.buffers()[2]
    if buf is None:
        return None
    return buf.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def unpack_heads(codec: RowCodec, blobs: Sequence[bytes], counts: np.ndarray) -> KeyedRows:
    """The rows of packed heads; ``counts[j]`` rows in ``blobs[j]``, which is partition j."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    part = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    if not total:
        return KeyedRows(part, pa.array([], pa.large_binary()), codec.empty())
    size = codec.dtype.itemsize
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
    buf = pa.py_buffer(b"".join(blobs))
    at = run_starts(lengths)[:-1]
    rk_len = np.frombuffer(gather_segments(buf, at, 4 * counts), "<u4").astype(np.int64)
    rec_at = at + 4 * counts
    rec = np.frombuffer(gather_segments(buf, rec_at, size * counts), codec.dtype).copy()
    rk_at = rec_at + size * counts
    csum = run_starts(rk_len)
    first = run_starts(counts)
    rk_bytes = csum[first[1:]] - csum[first[:-1]]
    rk = binary_over(csum, gather_segments(buf, rk_at, rk_bytes))
    strs = text_columns(codec, rec, counts, rk_at + rk_bytes, buf)
    return KeyedRows(part, rk, Rows(rec, strs))


# -- persisted head ends ------------------------------------------------------------------------
def encode_meta(head_end: bytes | None) -> bytes:
    return b"\x01" if head_end is None else b"\x00" + head_end


def decode_meta(raw: bytes | None) -> bytes | None:
    """The head end of a stored meta value (None: the head is the whole partition)."""
    if raw is None or raw[:1] == b"\x01":
        return None
    return raw[1:]


class HeadCache:
    """Per partition prefix: ``(head_end, packed head or None, rows in it)``, FIFO by bytes."""

    def __init__(self, store: StateStore, cache_bytes: int) -> None:
        self.store = store
        self.cache_bytes = cache_bytes
        self._entries: dict[bytes, tuple[bytes | None, bytes | None, int]] = {}
        self._sizes: dict[bytes, int] = {}
        self._bytes = 0
        self._evicted = False  # whether it dropped partitions since it was emptied or resized
        store.add_cache(self)

    def get_many(
        self, prefixes: list[bytes]
    ) -> list[tuple[bytes | None, bytes | None, int] | None]:
        self._evict()  # a smaller budget (``resize``) is applied here, in the cache's own thread
        return list(map(self._entries.get, prefixes))

    def put_many(
        self,
        prefixes: list[bytes],
        ends: list[bytes | None],
        heads: list[bytes | None],
        counts: list[int],
    ) -> None:
        """Remember these partitions (a partition keeps its place in the FIFO order)."""
        if not prefixes:
            return
        n = len(prefixes)
        sizes = np.fromiter(map(_len, ends), np.int64, n) + np.fromiter(
            map(_len, heads), np.int64, n
        )
        sizes += np.fromiter(map(len, prefixes), np.int64, n) + _ENTRY_OVERHEAD
        self._bytes -= sum(map(self._sizes.get, prefixes, repeat(0)))
        self._bytes += int(sizes.sum())
        self._entries.update(zip(prefixes, zip(ends, heads, counts, strict=True), strict=True))
        self._sizes.update(zip(prefixes, sizes.tolist(), strict=True))
        self._evict()

    def _evict(self) -> None:
        excess = self._bytes - self.cache_bytes
        if excess <= 0:
            return
        victims = []
        for p in islice(iter(self._entries), len(self._entries)):
            victims.append(p)
            excess -= self._sizes[p]
            if excess <= 0:
                break
        for p in victims:
            del self._entries[p]
            self._bytes -= self._sizes.pop(p)
        self._evicted = True

    def clear(self) -> None:
        self._entries.clear()
        self._sizes.clear()
        self._bytes = 0
        self._evicted = False

    def resize(self, cache_bytes: int) -> None:
        """A new byte budget, from any thread (``MemoryBudget`` re-divides its part as other
        views' stores open and close): the oldest partitions go until the cache fits it, at
        its next ``get_many`` or ``put_many``, in the thread that uses it (evicting here could
        change the dicts while that thread walks them)."""
        self.cache_bytes = cache_bytes
        self._evicted = False  # whether it fills the new one: seen from now on

    @property
    def cached_partitions(self) -> int:
        return len(self._entries)

    @property
    def used_bytes(self) -> int:
        """What the cache holds now, as its budget counts it (``MemoryBudget``'s demand): all of
        its budget once it dropped partitions to keep within it (since emptied or resized)."""
        return self.cache_bytes if self._evicted else self._bytes

    @property
    def wants_more_than(self) -> int | None:
        """None: a head cache is never set aside (``MemoryBudget``'s protocol)."""
        return None


def _len(value: bytes | None) -> int:
    return len(value) if value is not None else 0
