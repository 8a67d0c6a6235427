"""Arrow kernels: one column's pgoutput text values (tokens in a ``MessageBuffer``) -> a typed array.

``vector_type(column, timezone)`` names the Arrow type a column's values are parsed into without
Python work per value, or None when its type has no exact vector parse (interval, time, uuid,
bytea, arrays, enums, domains, unconstrained numeric...; those columns take the row decoder's
per-value parser). ``parse_column(buf, kinds, starts, lengths, typ, padded)`` builds the array:
the values' text is addressed in place as the even elements of one Arrow string array over the
whole buffer (offsets ``s0 e0 s1 e1 ...``, the odd elements, the bytes between two values, are
NULL), cast by Arrow's own parsers (int64, float64, decimal128, date32, timestamp), then the even
elements are kept; text is gathered with one ``take`` and checked to be UTF-8; booleans are read
as bytes. Each result equals what ``engine.postgres.values`` gives value by value once
``arrow_types.to_python`` converts it back (shared NaN, Decimals at the column's scale, UTC
datetimes); where a value has no exact vector parse (numeric NaN or Infinity, dates BC or
infinite, years past 9999, invalid UTF-8) the function returns None and the caller parses that
column value by value, so errors keep the row decoder's messages. This module must not know
about messages, relations' lifetimes or transactions.
"""

from __future__ import annotations

import contextlib
import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar.arrow_types import arrow_type
from engine.postgres import values as V
from engine.postgres.pgoutput import Column
from engine.postgres.pgoutput_tokens import TEXT, MessageBuffer

_INTS = {V.INT2, V.INT4, V.INT8, V.OID}
_FLOATS = {V.FLOAT4, V.FLOAT8}
_TEXTS = {V.TEXT, V.VARCHAR, V.NAME, V.CHAR, V.JSON, V.JSONB, V.BPCHAR}
_TSTZ = pa.timestamp("us", tz="UTC")
_TRUE, _FALSE = ord("t"), ord("f")
_WORDS = {4: np.dtype(np.int32), 8: np.dtype(np.int64), 16: np.dtype((np.void, 16))}


def vector_type(column: Column, timezone: datetime.tzinfo = datetime.UTC) -> pa.DataType | None:
    """The Arrow type column values are parsed into by ``parse_column``, or None (per value).

    >>> vector_type(Column("n", V.NUMERIC, (12 << 16 | 2) + 4, False))
    Decimal128Type(decimal128(12, 2))
    >>> vector_type(Column("n", V.NUMERIC, -1, False)) is None
    True
    """
    oid = column.type_oid
    if oid in _INTS:
        return pa.int64()
    if oid in _FLOATS:
        return pa.float64()
    if oid in _TEXTS:
        return pa.string()
    if oid == V.BOOL:
        return pa.bool_()
    if oid == V.DATE:
        return pa.date32()
    if oid == V.TIMESTAMP:
        return pa.timestamp("us")
    if oid == V.TIMESTAMPTZ:
        return _TSTZ if timezone is datetime.UTC else None
    if oid == V.NUMERIC:
        t = V.sql_type_for(oid, column.type_modifier)
        if t is None or t.precision is None or t.precision > 38 or (t.scale or 0) < 0:
            return None  # unconstrained (every value its own scale), too wide, or scale < 0
        return arrow_type(t)
    return None


def _validity(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    nulls = len(valid) - int(np.count_nonzero(valid))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def text_slices(
    buf: MessageBuffer, valid: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> pa.Array:
    """The values' text in place: an Arrow string array of ``2n - 1`` elements over the whole
    buffer whose element ``2k`` is value ``k`` (NULL where not ``valid``), odd elements NULL.
    Not UTF-8 checked; ``starts`` must be non-decreasing."""
    n = len(starts)
    big = len(buf.data) >= 2**31 - 1
    offsets = np.empty(2 * n, np.int64 if big else np.int32)
    offsets[0::2] = starts
    offsets[1::2] = starts + lengths
    bits = np.zeros(2 * n - 1, bool)
    bits[0::2] = valid
    validity, nulls = _validity(bits)
    return pa.Array.from_buffers(
        pa.large_string() if big else pa.string(),
        2 * n - 1,
        [validity, pa.py_buffer(offsets), pa.py_buffer(buf.data)],
        null_count=nulls,
    )


def parse_column(
    buf: MessageBuffer,
    kinds: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    typ: pa.DataType,
    padded: bool = False,
) -> pa.Array | None:
    """The column's values (``kinds`` t or n only) as an array of ``typ`` (from ``vector_type``),
    or None if some value has no exact vector parse. ``padded``: character(n), whose trailing
    blanks are dropped as ``values.parse_bpchar`` does."""
    n = len(kinds)
    valid = kinds == TEXT
    if not n:
        return pa.array([], typ)
    if pa.types.is_boolean(typ):
        return _booleans(buf, valid, starts, lengths)
    if pa.types.is_string(typ):
        return _texts(buf, valid, starts, lengths, padded)
    if pa.types.is_date32(typ) and np.any(lengths[valid] != 10):
        return None  # BC, infinity, a five-digit year: the per-value parser explains
    try:
        parsed = pc.cast(text_slices(buf, valid, starts, lengths), typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    word = _WORDS[typ.byte_width]
    raw = np.frombuffer(parsed.buffers()[1], word, len(parsed), word.itemsize * parsed.offset)
    even = np.ascontiguousarray(raw[0::2])
    validity, nulls = _validity(valid)
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(even)], null_count=nulls)


def _texts(
    buf: MessageBuffer, valid: np.ndarray, starts: np.ndarray, lengths: np.ndarray, padded: bool
) -> pa.Array | None:
    slices = text_slices(buf, valid, starts, lengths)
    out = slices.take(pa.array(np.arange(0, len(slices), 2, dtype=np.int32)))
    try:
        out.validate(full=True)  # UTF-8, as bytes.decode checks it
    except pa.ArrowInvalid:
        return None
    if out.type != pa.string():  # over a buffer of 2 GB or more (else large_string stays)
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowCapacityError):
            out = out.cast(pa.string())
    if padded:
        out = pc.utf8_rtrim(out, characters=" ")
    return out


def _booleans(
    buf: MessageBuffer, valid: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> pa.Array | None:
    first = buf.u8[starts]
    if np.any(lengths[valid] != 1):
        return None
    picked = first[valid]
    if np.any((picked != _TRUE) & (picked != _FALSE)):
        return None
    validity, nulls = _validity(valid)
    bits = np.packbits(first == _TRUE, bitorder="little")
    return pa.Array.from_buffers(
        pa.bool_(), len(valid), [validity, pa.py_buffer(bits)], null_count=nulls
    )
