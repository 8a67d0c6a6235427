"""Partition, order and identity keys of a whole batch of rows, in Arrow and numpy (the columnar
top-k's state keys).

Every function takes the Arrow columns of ``row_block.RowCodec`` types (numeric NaN as NULL plus
a mask, ``codec_columns``) and returns one binary value per row:

* ``partition_bytes(columns, nans)``: ``u32 length | kernels.key_bytes`` of the partition
  columns, equal for rows of one partition (SQL GROUP BY equality: NULL = NULL, NaN = NaN,
  -0.0 = 0.0, numerics by value at the column's scale; a numeric NaN is its own value).
* ``sortable_bytes(columns, nans, descending, nulls_first)``: memcomparable; the byte order is
  ORDER BY's (Postgres' NULL placement, NaN above every number, text by code point = the C
  collation) and equal bytes mean peers. Per column: a flag byte (0x00 NULL placed first, 0x01 a
  value, 0x02 NULL placed last), then a fixed-width big-endian value whose sign bit is flipped
  (inverted for DESC), or for text its UTF-8 bytes with 0x00 escaped as 0x00 0xff and ended by
  0x00 0x00 (inverted for DESC). Prefix-free, so concatenated columns compare column by column.
* ``identity_bytes(columns, nans)``: exactly ``keycodec.encode_key(row)`` (the repr of the
  normalized tuple): the row TopK breaks ties among peers by these bytes, so the columnar one
  does the same (of the columns that are not partition or ORDER BY columns: among peers those
  are equal, and the bytes of the rest order peers alike). Built from string kernels; per-value Python only where those do not give
  Python's repr: floats, text outside printable ASCII or holding backslashes or both quotes,
  numerics below 1e-6 (scientific notation) or of more than 28 digits (``normalize`` rounds).

This module must not know about state or collections.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar.arrow_types import to_python
from engine.dataflow.columnar.value_counts import NAN_INT
from engine.dataflow.state.keycodec import normalize_key

_SIGN = np.uint64(1 << 63)
_NULL_FIRST, _VALUE, _NULL_LAST = 0, 1, 2
_DAY_US = 86_400_000_000
_NAN_LO = int(np.uint64(NAN_INT & ((1 << 64) - 1)).view(np.int64))  # the sentinel's low word


# -- partitions ------------------------------------------------------------------------------------
def partition_bytes(columns: Sequence[pa.Array], nans: Sequence[np.ndarray | None], n: int):
    """``u32 len | key bytes`` of each row's partition values (4 zero bytes without columns)."""
    if not columns:
        return pa.array([b"\x00\x00\x00\x00"] * n, pa.binary())
    keyed = [_nan_sentinel(c, m) for c, m in zip(columns, nans, strict=True)]
    return K.length_prefixed(b"", K.key_bytes_array(keyed))


def _nan_sentinel(col: pa.Array, nan: np.ndarray | None) -> pa.Array:
    """A decimal column whose numeric NaNs (NULL + mask) hold a sentinel past every decimal128."""
    if nan is None or not nan.any():
        return col
    words = _decimal_words(col).copy()
    words[nan, 0] = _NAN_LO
    words[nan, 1] = NAN_INT >> 64
    valid = np.asarray(pc.is_valid(col), dtype=bool) | nan
    return pa.Array.from_buffers(
        col.type,
        len(col),
        [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(words)],
    )


def _decimal_words(col: pa.Array) -> np.ndarray:
    """(n, 2) int64 words (lo, hi) of a decimal128 column (NULL slots as they are)."""
    words = np.frombuffer(col.buffers()[1], "<i8", 2 * (col.offset + len(col)))
    return words[2 * col.offset :].reshape(-1, 2)


# -- ORDER BY ----------------------------------------------------------------------------------------
def sortable_bytes(
    columns: Sequence[pa.Array],
    nans: Sequence[np.ndarray | None],
    descending: Sequence[bool],
    nulls_first: Sequence[bool | None],
) -> pa.Array:
    """Memcomparable ORDER BY keys (see the module docstring)."""
    pieces: list[pa.Array] = []
    for col, nan, desc, nf in zip(columns, nans, descending, nulls_first, strict=True):
        pieces.extend(_sortable_column(col, nan, bool(desc), desc if nf is None else bool(nf)))
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, b"")


def _sortable_column(col: pa.Array, nan, desc: bool, nulls_first: bool) -> list[pa.Array]:
    n = len(col)
    present = np.asarray(pc.is_valid(col), dtype=bool)
    if nan is not None:
        present = present | nan
    flag = np.where(present, _VALUE, _NULL_FIRST if nulls_first else _NULL_LAST)
    flag_bytes = K.fixed_width_bytes(flag.astype(np.uint8).reshape(n, 1))
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        text = pc.fill_null(col.cast(pa.binary()), b"")
        text = pc.replace_substring(text, b"\x00", b"\x00\xff")
        body = pc.binary_join_element_wise(text, b"\x00\x00", b"")
        return [flag_bytes, _inverted(body) if desc else body]
    value = _sortable_values(col, nan)
    if desc:
        value = 255 - value
    return [flag_bytes, K.fixed_width_bytes(value)]


def _sortable_values(col: pa.Array, nan: np.ndarray | None) -> np.ndarray:
    """An (n, w) uint8 matrix of big-endian values whose byte order is the value order."""
    t = col.type
    n = len(col)
    if pa.types.is_boolean(t):
        return np.asarray(pc.fill_null(col, False), dtype=np.uint8).reshape(n, 1)
    if pa.types.is_date32(t):
        v = np.asarray(pc.fill_null(col.view(pa.int32()), 0), dtype=np.int32)
        return (v.view(np.uint32) ^ np.uint32(1 << 31)).astype(">u4").view(np.uint8).reshape(n, 4)
    if pa.types.is_decimal(t):
        words = _decimal_words(col)
        be = np.empty((n, 2), dtype=">u8")
        be[:, 0] = words[:, 1].view(np.uint64) ^ _SIGN
        be[:, 1] = words[:, 0].view(np.uint64)
        be[~np.asarray(pc.is_valid(col), dtype=bool)] = 0
        if nan is not None:
            be[nan] = np.uint64((1 << 64) - 1)  # NaN above every number
        return be.view(np.uint8).reshape(n, 16)
    if pa.types.is_floating(t):
        f = np.asarray(pc.fill_null(K.normalize_floats(col), 0.0), dtype=np.float64)
        bits = f.view(np.uint64)
        bits = np.where(bits & _SIGN, ~bits, bits | _SIGN)  # the canonical NaN lands above +inf
        return bits.astype(">u8").view(np.uint8).reshape(n, 8)
    if pa.types.is_timestamp(t):
        col = col.view(pa.int64())
    v = np.asarray(pc.fill_null(col.cast(pa.int64()), 0), dtype=np.int64)
    return (v.view(np.uint64) ^ _SIGN).astype(">u8").view(np.uint8).reshape(n, 8)


def _inverted(values: pa.Array) -> pa.Array:
    """Each byte of a binary array's values inverted (255 - b)."""
    bufs = values.buffers()
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return pa.Array.from_buffers(
        pa.binary(),
        len(values),
        [None, bufs[1], pa.py_buffer(255 - data)],
        offset=values.offset,
    )


# -- identity (encode_key) ---------------------------------------------------------------------------
def identity_bytes(
    columns: Sequence[pa.Array], nans: Sequence[np.ndarray | None], n: int | None = None
) -> pa.Array:
    """``keycodec.encode_key(row)`` of every row, as a binary array (``n`` rows of ``()``
    without columns).

    Among rows whose other columns are equal (the same partition and ORDER BY values), these
    bytes of the remaining columns order the rows as ``encode_key`` of the whole rows does:
    equal values have one normalized repr, so dropping them leaves the first difference where it
    was, and no value's repr is a proper prefix of another's of its type (a longer one never
    goes on with ``)``, ``*``, ``+`` or ``,``, the characters between the two ends a repr can
    meet), so the end of a tuple compares as the separator did."""
    if not columns:
        return pa.array([b"()"] * (n or 0), pa.binary())
    reprs = [_repr_column(c, m) for c, m in zip(columns, nans, strict=True)]
    if len(reprs) == 1:
        return pc.binary_join_element_wise("(", reprs[0], ",)", "").cast(pa.binary())
    inner = pc.binary_join_element_wise(*reprs, ", ")
    return pc.binary_join_element_wise("(", inner, ")", "").cast(pa.binary())


def _repr_column(col: pa.Array, nan: np.ndarray | None) -> pa.Array:
    """``repr`` of each value as ``encode_key`` normalizes it ("None" for NULL), as strings."""
    t = col.type
    if pa.types.is_integer(t):
        out = col.cast(pa.int64()).cast(pa.string())
    elif pa.types.is_boolean(t):
        out = pc.if_else(col, "True", "False")
    elif pa.types.is_decimal(t):
        out = _decimal_reprs(col, nan)
    elif pa.types.is_date32(t):
        out = _date_reprs(col)
    elif pa.types.is_timestamp(t):
        out = _timestamp_reprs(col)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        out = _text_reprs(col.cast(pa.string()))
    else:  # floats: Python's shortest repr, after encode_key's normalization
        out = pa.array([_py_repr(v) for v in to_python(col)], pa.string())
    return pc.fill_null(out, "None")


def _py_repr(v: object) -> str:
    return repr(normalize_key((v,))[0])


def _joined(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _decimal_reprs(col: pa.Array, nan: np.ndarray | None) -> pa.Array:
    """An integral value is its int ("12"), else ``Decimal('12.5')`` (trailing zeros gone)."""
    text = col.cast(pa.string())
    scale = col.type.scale
    if scale:
        text = pc.replace_substring_regex(text, r"0+$", "")
        integral = pc.ends_with(text, ".")
        text = pc.if_else(
            integral, pc.utf8_slice_codeunits(text, 0, -1), _joined("Decimal('", text, "')")
        )
    words = _decimal_words(col)
    lo, hi = words[:, 0], words[:, 1]
    fits64 = hi == (lo >> 63)
    slow = ~fits64  # past 64 bits (rare): Python's normalize, which rounds past 28 digits
    if scale > 6:  # 0 < |v| < 1e-6: Python writes it in scientific notation
        slow |= fits64 & (lo != 0) & (np.abs(lo) < 10 ** (scale - 6))
    slow &= np.asarray(pc.is_valid(col), dtype=bool)
    if nan is not None:
        text = pc.if_else(pa.array(nan), "Decimal('NaN')", text)
        slow &= ~nan
    return _patched(text, slow, lambda idx: [_py_repr(v) for v in to_python(col.take(idx))])


def _patched(text: pa.Array, slow: np.ndarray, make) -> pa.Array:
    """``text`` with the rows ``slow`` replaced by ``make(their indices)``."""
    if not slow.any():
        return text
    idx = np.flatnonzero(slow)
    values = text.to_pylist()
    for i, v in zip(idx.tolist(), make(pa.array(idx)), strict=True):
        values[i] = v
    return pa.array(values, pa.string())


def _ints(values: np.ndarray) -> pa.Array:
    return pa.array(values, pa.int64()).cast(pa.string())


def _date_reprs(col: pa.Array) -> pa.Array:
    y, m, d = (pc.cast(f(col), pa.string()) for f in (pc.year, pc.month, pc.day))
    return _joined("datetime.date(", y, ", ", m, ", ", d, ")")


def _timestamp_reprs(col: pa.Array) -> pa.Array:
    """``datetime.datetime(Y, M, D, h, m[, s[, us]])``: Python drops a zero microsecond, then a
    zero second."""
    v = np.asarray(pc.fill_null(col.cast(pa.timestamp("us")).view(pa.int64()), 0), np.int64)
    days = np.floor_divide(v, _DAY_US)
    rest = v - days * _DAY_US
    sec_of_day, us = np.divmod(rest, 1_000_000)
    hour, rem = np.divmod(sec_of_day, 3600)
    minute, sec = np.divmod(rem, 60)
    date = pa.array(days.astype(np.int32), pa.int32()).view(pa.date32())
    y, mo, d = (pc.cast(f(date), pa.string()) for f in (pc.year, pc.month, pc.day))
    with_sec = pa.array((sec != 0) | (us != 0))
    tail = pc.if_else(with_sec, _joined(", ", _ints(sec)), "")
    tail = pc.if_else(pa.array(us != 0), _joined(tail, ", ", _ints(us)), tail)
    out = _joined("datetime.datetime(", y, ", ", mo, ", ", d, ", ", _ints(hour), ", ")
    out = _joined(out, _ints(minute), tail, ")")
    return pc.if_else(pc.is_valid(col), out, pa.scalar(None, pa.string()))


def _text_reprs(col: pa.Array) -> pa.Array:
    """'text' (or "text" when it holds a ' and no "), Python's repr elsewhere."""
    plain = pc.match_substring_regex(col, r"^[ -~]*$")  # printable ASCII: no escapes...
    plain = pc.and_(plain, pc.invert(pc.match_substring(col, "\\")))  # ...but backslashes
    single = pc.match_substring(col, "'")
    double = pc.match_substring(col, '"')
    simple = pc.and_(plain, pc.invert(pc.and_(single, double)))
    quote = pc.if_else(single, '"', "'")
    out = _joined(quote, col, quote)
    slow = ~np.asarray(pc.fill_null(simple, True), dtype=bool)
    return _patched(out, slow, lambda idx: [repr(v) for v in col.take(idx).to_pylist()])
