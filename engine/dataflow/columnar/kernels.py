"""Pure array kernels of the columnar core: grouping, key bytes, exact 128-bit sums.

Every function takes and returns arrays (pyarrow or numpy) and holds no state; each one is
checked against a row-at-a-time reference in ``tests/dataflow/columnar/test_kernels.py``.

* ``group_index(columns)``: the groups of rows under SQL GROUP BY equality (NULLs equal each
  other, NaN equals NaN, -0.0 equals 0.0): a group id per row and the first row of each group.
* ``key_bytes(columns)``: one deterministic byte string per row, equal for rows that
  ``group_index`` puts together (state keys; no pickle, no per-row Python).
* ``group_sums(ids, n, values)``: exact int64 sums per group (raises ``OverflowError`` where an
  int64 could overflow, so callers switch to ``group_sums_exact``).
* ``add_int128`` / ``int128_to_ints``: 128-bit accumulators as (lo: uint64, hi: int64) pairs.

This module must not know about collections, plans or RocksDB.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NAN = pa.scalar(float("nan"), pa.float64())
_ZERO = pa.scalar(0.0, pa.float64())
_INT64_SAFE = float(2**62)
#: rows of at least this many columns are grouped by a verified row hash (``hash_groups``)
_HASHED_COLUMNS = 3


def pick(items: list, at: np.ndarray) -> list:
    """``[items[i] for i in at]`` by a C-level itemgetter."""
    if len(at) > 1:
        return list(itemgetter(*at.tolist())(items))
    return [items[i] for i in at.tolist()]


def normalize_floats(column: pa.Array) -> pa.Array:
    """Floats with one NaN bit pattern and -0.0 as 0.0 (SQL equality is bitwise equality after)."""
    if not pa.types.is_floating(column.type):
        return column
    column = pc.add(column.cast(pa.float64()), _ZERO)  # -0.0 + 0.0 == +0.0
    return pc.if_else(pc.is_nan(column), _NAN, column)


def _plain(column: pa.Array) -> pa.Array:
    """The storage of an extension column (its values as a plain Arrow type)."""
    return column.storage if isinstance(column.type, pa.ExtensionType) else column


#: columns shorter than this are hashed (the sort path's fixed costs)
_MIN_RUN_CODES = 1024
#: at most one descent in this many rows sends an integer column to ``_sorted_run_codes``
_MAX_DESCENT_SHARE = 64


def _codes(column: pa.Array) -> tuple[np.ndarray, int]:
    """Dense codes of one column's distinct values (NULL is a value) and how many there are,
    numbered by first appearance."""
    column = _plain(column)
    runs = _sorted_run_codes(column)
    if runs is not None:
        return runs
    enc = pc.dictionary_encode(normalize_floats(column), null_encoding="encode")
    return np.asarray(enc.indices, dtype=np.int64), len(enc.dictionary)


def _sorted_run_codes(column: pa.Array) -> tuple[np.ndarray, int] | None:
    """``_codes`` of a NULL-free integer (or date, timestamp) column made of a few ascending runs,
    by sorting instead of hashing; None for any other column.

    A table read in the order of its key (TPC-H's lineitem and orders by order key, any table
    loaded in key order) hands population such columns, one run or a few (the parallel readers'
    pages interleave). ``dictionary_encode`` hashes every value: 100k distinct int64 keys cost it
    5-6 ms, whose hash table outgrows the CPU cache; one ascending run is numbered in one pass
    (0.6 ms), and 70 runs by a stable sort, which merges runs (timsort: 1.8 ms). Columns with
    more than one descent in ``_MAX_DESCENT_SHARE`` rows are left to hashing (the check costs
    ~0.05 ms).
    """
    t, n = column.type, len(column)
    if n < _MIN_RUN_CODES or column.null_count:
        return None
    if pa.types.is_temporal(t) and t.bit_width in (32, 64):  # not intervals (128 bits)
        column = column.view(pa.int32() if t.bit_width == 32 else pa.int64())
    elif not pa.types.is_integer(t):
        return None
    values = np.asarray(column)
    descents = int(np.count_nonzero(values[1:] < values[:-1]))
    if descents > n // _MAX_DESCENT_SHARE:
        return None
    order = None if not descents else np.argsort(values, kind="stable")
    ordered = values if order is None else values[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    ids = np.cumsum(new, dtype=np.int64)
    ids -= 1
    groups = int(ids[-1]) + 1
    if order is None:  # runs numbered in order of appearance already
        return ids, groups
    # number the groups by their first row (stable: a group's first sorted row is its first)
    rank = np.empty(groups, dtype=np.int64)
    rank[np.argsort(order[new], kind="stable")] = np.arange(groups)
    codes = np.empty(n, dtype=np.int64)
    codes[order] = rank[ids]
    return codes, groups


def group_index(columns: list[pa.Array], n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(group id of each row, index of each group's first row); ids follow first appearance.

    >>> ids, first = group_index([pa.array([3, 1, 3, None, None])])
    >>> ids.tolist(), first.tolist()
    ([0, 1, 0, 2, 2], [0, 1, 3])
    """
    if not columns:
        rows = 0 if n is None else n
        return np.zeros(rows, dtype=np.int64), np.zeros(1 if rows else 0, dtype=np.int64)
    if len(columns) >= _HASHED_COLUMNS and len(columns[0]):
        from engine.dataflow.columnar.hash_groups import hash_group_index

        hashed = hash_group_index(columns)
        if hashed is not None:
            return hashed
    return exact_group_index(columns)


def exact_group_index(columns: list[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """``group_index`` by combined dictionary codes (exact for every Arrow type)."""
    combined, card = _codes(columns[0])
    if len(columns) == 1:  # dictionary codes already number values by first appearance
        return _firsts(combined)
    for col in columns[1:]:
        codes, k = _codes(col)
        if card * k < 2**62:
            combined = combined * k + codes
            card *= k
        else:  # re-densify before the product could overflow
            _, combined = np.unique(combined, return_inverse=True)
            card = int(combined.max(initial=-1)) + 1
            combined = combined * k + codes
            card *= k
    return first_appearance_groups(pa.array(combined))


def first_appearance_groups(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(group id of each value, numbered by first appearance; each group's first position)."""
    runs = _sorted_run_codes(values)
    if runs is not None:
        return _firsts(runs[0])
    return _firsts(np.asarray(pc.dictionary_encode(values).indices, dtype=np.int64))


def _firsts(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``ids``, numbered by first appearance, and each id's first position)."""
    if not len(ids):
        return ids, ids
    seen = np.maximum.accumulate(ids)
    new = np.empty(len(ids), bool)
    new[0] = True
    new[1:] = ids[1:] > seen[:-1]
    return ids, np.flatnonzero(new)


def byte_order(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(order, rank) of binary values in byte order: ``values.take(order)`` is sorted and
    ``rank[i]`` is where value i lands. State keys taken so are read and written in RocksDB's
    order: sorted reads find their blocks warm, sorted writes need no ordering (the columnar
    join, reduce, top-k and distinct)."""
    order = np.asarray(pc.sort_indices(values), np.int64)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return order, rank


def fixed_width_bytes(values: np.ndarray) -> pa.Array:
    """A binary array holding each row of a (n, w) uint8 matrix."""
    n, w = values.shape
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(w), n, [None, pa.py_buffer(np.ascontiguousarray(values).tobytes())]
    )
    return fixed.cast(pa.binary())


def _column_bytes(column: pa.Array) -> list[pa.Array]:
    """Prefix-free byte pieces of one column: a NULL flag, then the value (length-prefixed if
    variable width). Equal values under ``group_index`` give equal bytes."""
    column = _plain(column)
    valid = np.asarray(pc.is_valid(column), dtype=np.uint8).reshape(-1, 1)
    pieces = [fixed_width_bytes(valid)]
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        data = pc.fill_null(column.cast(pa.binary()), b"")
        lengths = np.asarray(pc.binary_length(data), dtype=">u4").view(np.uint8).reshape(-1, 4)
        return [*pieces, fixed_width_bytes(lengths), data]
    if pa.types.is_boolean(t):
        v = np.asarray(pc.fill_null(column, False), dtype=np.uint8).reshape(-1, 1)
    elif pa.types.is_floating(t):
        v = np.asarray(pc.fill_null(normalize_floats(column), 0.0), dtype=">f8")
        v = v.view(np.uint8).reshape(-1, 8)
    elif pa.types.is_decimal(t):
        words = np.frombuffer(column.buffers()[1], dtype="<i8")
        words = words[2 * column.offset : 2 * (column.offset + len(column))].reshape(-1, 2)
        be = np.empty((len(column), 2), dtype=">i8")
        be[:, 0], be[:, 1] = words[:, 1], words[:, 0]
        be[valid[:, 0] == 0] = 0
        v = be.view(np.uint8).reshape(-1, 16)
    elif pa.types.is_integer(t) or pa.types.is_temporal(t):
        if pa.types.is_temporal(t):  # its integer storage (Arrow casts no date to int64)
            column = column.view(pa.int32() if t.bit_width == 32 else pa.int64())
        raw = np.asarray(pc.fill_null(column.cast(pa.int64()), 0), dtype=np.int64)
        v = raw.astype(">i8").view(np.uint8).reshape(-1, 8)
    else:
        raise TypeError(f"no key encoding for Arrow type {t}")
    return [*pieces, fixed_width_bytes(v)]


def key_bytes(columns: list[pa.Array]) -> list[bytes]:
    """One byte string per row identifying its values under GROUP BY equality.

    >>> key_bytes([pa.array([1, None])]) == key_bytes([pa.array([1, None])])
    True
    """
    if not columns:
        return []
    return key_bytes_array(columns).to_pylist()


def key_bytes_array(columns: list[pa.Array]) -> pa.Array:
    """``key_bytes`` as an Arrow binary array (no Python object per row)."""
    pieces = [p for col in columns for p in _column_bytes(col)]
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, b"")


def length_prefixed(tag: bytes, values: pa.Array) -> pa.Array:
    """``tag | len(value) (4 bytes, big-endian) | value`` for each binary value, as Arrow."""
    lengths = np.asarray(pc.binary_length(values), dtype=">u4")
    four = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(4), len(values), [None, pa.py_buffer(lengths.tobytes())]
    )
    return pc.binary_join_element_wise(
        pa.scalar(tag, pa.binary()), four.cast(pa.binary()), values.cast(pa.binary()), b""
    )


def group_sums(ids: np.ndarray, ngroups: int, values: np.ndarray) -> np.ndarray:
    """Exact per-group sums of int64 ``values``; ``OverflowError`` if an int64 could overflow."""
    if len(values) and float(np.abs(values.astype(np.float64)).sum()) >= _INT64_SAFE:
        raise OverflowError("per-group sum may exceed 64 bits")
    out = np.zeros(ngroups, dtype=np.int64)
    np.add.at(out, ids, values)
    return out


def group_sums_exact(ids: np.ndarray, ngroups: int, values: list[int]) -> list[int]:
    """Per-group sums of Python ints of any size (the slow, exact fallback of ``group_sums``)."""
    out = [0] * ngroups
    for g, v in zip(ids.tolist(), values, strict=True):
        out[g] += v
    return out


def add_int128(lo: np.ndarray, hi: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) + a signed int64 ``delta`` per element, exactly (two's complement 128 bits)."""
    d = delta.astype(np.int64)
    new_lo = lo + d.view(np.uint64)
    carry = (new_lo < lo).astype(np.int64)
    return new_lo, hi + carry + (d >> 63)


def add_int128_ints(
    lo: np.ndarray, hi: np.ndarray, delta: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) + arbitrary Python int deltas (exact; raises OverflowError past 128 bits)."""
    total = [a + b for a, b in zip(int128_to_ints(lo, hi), delta, strict=True)]
    return ints_to_int128(total)


def int128_to_ints(lo: np.ndarray, hi: np.ndarray) -> list[int]:
    """The 128-bit values as Python ints."""
    return [(h << 64) | l_ for l_, h in zip(lo.tolist(), hi.tolist(), strict=True)]


def ints_to_int128(values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Python ints as (lo, hi) arrays; ``OverflowError`` past 128 bits."""
    limit = 1 << 127
    if any(v >= limit or v < -limit for v in values):
        raise OverflowError("a sum exceeds 128 bits")
    lo = np.array([v & 0xFFFFFFFFFFFFFFFF for v in values], dtype=np.uint64)
    hi = np.array([v >> 64 for v in values], dtype=np.int64)
    return lo, hi


def int128_fits_int64(lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether every value is within int64 (then ``lo.view(int64)`` is the value)."""
    return bool(np.array_equal(hi, lo.view(np.int64) >> 63))


def concat_columns(
    batches: list[list[pa.Array]], weights: list[np.ndarray]
) -> tuple[list[pa.Array], np.ndarray] | None:
    """Columns of several batches end to end (None when their column types differ)."""
    types = [c.type for c in batches[0]]
    if any([c.type for c in cols] != types for cols in batches[1:]):
        return None
    ncols = len(batches[0])
    columns = [pa.concat_arrays([cols[i] for cols in batches]) for i in range(ncols)]
    return columns, np.concatenate(weights)


def consolidate_columns(
    columns: list[pa.Array], weights: np.ndarray
) -> tuple[list[pa.Array], np.ndarray]:
    """The Z-set normal form of a columnar batch: one row per distinct row, weights summed,
    zero weights dropped; rows keep their first appearance's values and order."""
    n = len(weights)
    if not n:
        return list(columns), weights
    ids, first = group_index(columns, n)
    if len(first) == n and weights.all():  # already consolidated: every row its own group
        return list(columns), weights
    totals = np.zeros(len(first), dtype=np.int64)
    np.add.at(totals, ids, weights)
    keep = np.flatnonzero(totals != 0)
    take = pa.array(first[keep])
    return [c.take(take) for c in columns], totals[keep]


# -- row hashing and joins (the columnar join) -----------------------------------------------------
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_P = np.uint64(0x100000001B3)  # FNV prime: powers of it weigh each byte of a string


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over uint64 values (a bijection that spreads every input bit)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def combine_hashes(h: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The running hash ``h`` extended by the values ``x`` (both uint64; order matters)."""
    return mix64(h * _GOLDEN + mix64(x))


_HASH_BLOCK_BYTES = 1 << 20  # string bytes hashed at a time: ~40 bytes of temporaries each


def string_hashes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A deterministic uint64 hash of each byte string ``data[offsets[i]:offsets[i+1]]``
    (``data``: uint8, ``offsets``: n+1 int64), computed in numpy (cost ~ the bytes), in blocks
    of rows of about ``_HASH_BLOCK_BYTES`` so the temporaries stay bounded (a population chunk
    of 200k rows with a text column made ~80 MB of them at once).

    >>> o = np.array([0, 2, 2, 4]); d = np.frombuffer(b"abab", np.uint8)
    >>> h = string_hashes(d, o); bool(h[0] == h[2]), bool(h[0] != h[1])
    (True, True)
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    out = np.empty(max(n, 0), dtype=np.uint64)
    i = 0
    while i < n:
        # rows i..j-1: as many as fit in the block, at least one (a longer string alone)
        j = int(np.searchsorted(offsets, offsets[i] + _HASH_BLOCK_BYTES, side="right")) - 1
        j = min(max(j, i + 1), n)
        out[i:j] = _block_string_hashes(data, offsets[i : j + 1])
        i = j
    return out


def _block_string_hashes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    lengths = np.diff(offsets)
    n = len(lengths)
    out = lengths.astype(np.uint64) * _GOLDEN
    total = int(lengths.sum())
    if total:
        start, end = int(offsets[0]), int(offsets[-1])
        pos = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1] - start, lengths)
        powers = np.cumprod(np.full(int(lengths.max()), _P, dtype=np.uint64))
        terms = (data[start:end].astype(np.uint64) + np.uint64(1)) * powers[pos]
        nonempty = np.flatnonzero(lengths)
        out[nonempty] += np.add.reduceat(terms, offsets[:-1][nonempty] - start)
    return mix64(out) if n else out


def stable_order(ids: np.ndarray, bound: int) -> np.ndarray:
    """The indices that sort ``ids`` (integers in [0, ``bound``)) stably, by least significant
    digit radix sort: numpy's stable sort of 16-bit integers is a radix sort (O(n)), so ids below
    2**16 take one pass and ids below 2**32 two (the low halves, then the high halves in that
    order). On 100k-400k ids ~6x the SIMD quicksort of ``id * n + position`` this replaced,
    which was ~5x ``argsort(kind="stable")`` (timsort for int64); wider ids fall back to those.

    >>> stable_order(np.array([2, 0, 2, 1, 0]), 3).tolist()
    [1, 4, 3, 0, 2]
    >>> stable_order(np.array([70000, 5, 70000, 65541, 5]), 70001).tolist()
    [1, 4, 3, 0, 2]
    """
    n = len(ids)
    if n < 2:
        return np.arange(n, dtype=np.intp)
    if bound <= 1 << 16:
        return np.argsort(np.asarray(ids).astype(np.uint16), kind="stable")
    if bound <= 1 << 32:
        wide = np.asarray(ids).astype(np.uint32)
        low = np.argsort(wide.astype(np.uint16), kind="stable")  # the low 16 bits
        return low[np.argsort((wide >> 16).astype(np.uint16)[low], kind="stable")]
    if bound * n >= 2**62:
        return np.argsort(ids, kind="stable")
    return np.argsort(np.asarray(ids, dtype=np.int64) * n + np.arange(n, dtype=np.int64))


def join_pairs(
    left_keys: np.ndarray, right_keys: np.ndarray, nkeys: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j) with ``left_keys[i] == right_keys[j]`` (dense key ids < ``nkeys``), as two
    index arrays, grouped by left row (a vectorized hash join; no Python per pair).

    >>> li, ri = join_pairs(np.array([0, 1, 0]), np.array([0, 0, 2]), 3)
    >>> li.tolist(), ri.tolist()
    ([0, 0, 2, 2], [0, 1, 0, 1])
    """
    right_keys = np.asarray(right_keys, dtype=np.int64)
    order = stable_order(right_keys, nkeys)
    counts = np.bincount(right_keys, minlength=nkeys)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    per_left = counts[left_keys]
    total = int(per_left.sum())
    li = np.repeat(np.arange(len(left_keys), dtype=np.int64), per_left)
    first = np.cumsum(per_left) - per_left
    within = np.arange(total, dtype=np.int64) - np.repeat(first, per_left)
    ri = order[np.repeat(starts[left_keys], per_left) + within]
    return li, ri
