"""PostgreSQL binary COPY rows from Arrow columns, with no Python per row on the common types.

``BinaryCopyEncoder(conn, types, type_names).encode(columns, weights)`` turns one chunk of
columns (Arrow arrays, or Python value lists) into the rows of a ``COPY ... FROM STDIN (FORMAT
BINARY)`` stream: per row an int16 field count, then per field an int32 length and the value's
big-endian binary form (length -1 for NULL); the stream starts with ``SIGNATURE`` and ends with
``TRAILER`` (the caller writes those once). Each column becomes an Arrow binary array of its
*fields* (length word + value bytes) built with numpy/pyarrow kernels, and one
``binary_join_element_wise`` lays the fields of every row side by side.

Vector encoders (``vector_encoder``) by Arrow type and target column type:
* integers -> smallint / integer / bigint (range-checked against the column: Postgres'
  ``int4recv`` reads exactly 4 bytes, so an unchecked value would wrap) and -> numeric;
* float64/float32 -> double precision / real (NaN, infinities and -0.0 keep their bits);
* bool -> boolean; date32 -> date (days since 2000-01-01);
* timestamp (s/ms/us) -> timestamp without zone (naive arrays) / with zone (zoned arrays: UTC
  instants), microseconds since 2000-01-01; time64[us] -> time;
* string -> text, varchar, char, name, enum labels, json, jsonb (version byte 1 + text);
  binary -> bytea (strings only when the connection's client encoding is UTF-8);
* decimal128 and integers -> numeric in Postgres' base-10000 form (ndigits, weight, sign,
  dscale = the value's scale, digits; every row of a chunk sends as many digits as its widest
  value, ``numeric_recv`` strips the zero ones), from the unscaled 128-bit integers with numpy
  arithmetic;
* ``NUMERIC_TEXT`` (numeric text such as ``-12.50``, ``125E-3``, ``NaN``, ``Infinity``) ->
  numeric, parsed by a regex kernel and a digit matrix.
Any other pairing (interval, uuid, time of other units, an unparsable numeric text, Arrow types
the engine does not make) falls back to psycopg's own binary dumper for the column's type, one
call per value (``python_fields``): the very bytes ``Copy.write_row`` would send. Chunks of at
most ``SMALL_ROWS`` rows go row by row through those dumpers (a kernel call's fixed cost is more
than a few rows cost). ``columns_from_rows`` converts tuple rows to such columns. This module
must not open transactions or decide what to COPY where; it only makes bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from decimal import Decimal
from operator import itemgetter
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import Format

from engine.dataflow.columnar.arrow_types import (
    NUMERIC_TEXT,
    ColumnConversionError,
    NumericTextType,
    arrow_type,
    to_arrow_column,
    to_python,
)
from engine.sql.types import INT_RANGES, SqlType, TypeKind

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"

_NULL = np.array([-1], dtype=">i4").view(np.uint8)
_PG_EPOCH_DAYS = 10_957  # 2000-01-01 - 1970-01-01
_PG_EPOCH_US = _PG_EPOCH_DAYS * 86_400 * 1_000_000
_US_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}
_FIELDS = pa.large_binary()
_NO_SEPARATOR = pa.scalar(b"", _FIELDS)

# numeric sign words (src/backend/utils/adt/numeric.c)
_NUMERIC_POS, _NUMERIC_NEG = 0x0000, 0x4000
_NUMERIC_NAN, _NUMERIC_PINF, _NUMERIC_NINF = 0xC000, 0xD000, 0xF000
_NUMERIC_TEXT_RE = (
    r"^(?P<sign>[-+]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[-+]?[0-9]{1,6}))?$"
)
_MAX_NUMERIC_TEXT_DIGITS = 4_096  # wider texts (huge exponents) go the per-value way
_FLOAT4_MAX = float(np.finfo(np.float32).max)
SMALL_ROWS = 64  # chunks up to this many rows are encoded row by row (BinaryCopyEncoder)


class CopyValueError(ValueError):
    """A value the target column cannot hold (an int out of its range, a real overflow):
    ``column`` is its position; the message is Postgres' own (``integer out of range``)."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.column = column


class _Fallback(Exception):
    """A column's values need the per-value path (raised by a vector encoder mid-way)."""


# -- fields: one Arrow binary value per row, the field's length word then its bytes --------------


def _valid_mask(array: pa.Array) -> np.ndarray | None:
    if array.null_count == 0:
        return None
    return np.asarray(array.is_valid(), dtype=bool)


def _offsets(sizes: np.ndarray) -> pa.Buffer:
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return pa.py_buffer(offsets)


def _matrix_fields(matrix: np.ndarray, keep: np.ndarray | None) -> pa.Array:
    """Fields from a (rows, bytes) uint8 matrix whose row i holds field i from its first byte;
    ``keep`` (same shape) marks the bytes that belong to it (None: all of them)."""
    n, width = matrix.shape
    if keep is None:
        data = np.ascontiguousarray(matrix).reshape(-1)
        offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int64) * width)
    else:
        data = matrix[keep]
        offsets = _offsets(np.count_nonzero(keep, axis=1))
    return pa.Array.from_buffers(_FIELDS, n, [None, offsets, pa.py_buffer(data)])


def _fixed_fields(values: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """Fields of fixed-width big-endian ``values`` (a numpy array of a '>' dtype)."""
    n, width = len(values), values.dtype.itemsize
    rec = np.empty(n, dtype=[("len", ">i4"), ("v", values.dtype)])
    rec["len"] = width
    rec["v"] = values
    matrix = rec.view(np.uint8).reshape(n, 4 + width)
    return _masked_fields(matrix, valid)


def _masked_fields(matrix: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """Fields of the rows of ``matrix`` (a 4-byte length then the value); NULL rows (``valid``
    False) become the length -1 alone."""
    if valid is None:
        return _matrix_fields(matrix, None)
    matrix[~valid, :4] = _NULL
    keep = np.ones(matrix.shape, dtype=bool)
    keep[~valid, 4:] = False
    return _matrix_fields(matrix, keep)


def _null_fields(n: int) -> pa.Array:
    return _matrix_fields(np.tile(_NULL, (n, 1)), None)


def _varlen_fields(array: pa.Array, prefix: bytes = b"") -> pa.Array:
    """Fields of a string/binary array: the byte length (+ len(prefix)), ``prefix``, the bytes."""
    n = len(array)
    valid = _valid_mask(array)
    lengths = np.asarray(pc.binary_length(array).fill_null(0), dtype=np.int64) + len(prefix)
    head = np.empty((n, 4 + len(prefix)), dtype=np.uint8)
    head[:, :4] = lengths.astype(">i4").view(np.uint8).reshape(n, 4)
    if prefix:
        head[:, 4:] = np.frombuffer(prefix, dtype=np.uint8)
    keep = None
    if valid is not None:
        head[~valid, :4] = _NULL
        if prefix:
            keep = np.ones(head.shape, dtype=bool)
            keep[~valid, 4:] = False
    body = array.cast(pa.large_binary()) if not pa.types.is_large_binary(array.type) else array
    return pc.binary_join_element_wise(
        _matrix_fields(head, keep), body.fill_null(_NO_SEPARATOR), _NO_SEPARATOR
    )


def _values(array: pa.Array, dtype: Any) -> np.ndarray:
    """The array's values as numpy (NULLs read as 0)."""
    if array.null_count:
        array = array.fill_null(pa.scalar(0, array.type))
    return array.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


# -- per type ------------------------------------------------------------------------------------


def _int_encoder(kind: TypeKind) -> Callable[[pa.Array], pa.Array]:
    lo, hi, message = INT_RANGES[kind]
    dtype = {TypeKind.SMALLINT: ">i2", TypeKind.INTEGER: ">i4", TypeKind.BIGINT: ">i8"}[kind]

    def encode(array: pa.Array) -> pa.Array:
        if pa.types.is_uint64(array.type) and (pc.max(array).as_py() or 0) > hi:
            raise CopyValueError(message, -1)
        values = _values(array, np.int64)
        if len(values) and (values.min() < lo or values.max() > hi):
            raise CopyValueError(message, -1)
        return _fixed_fields(values.astype(dtype), _valid_mask(array))

    return encode


def _float_encoder(kind: TypeKind) -> Callable[[pa.Array], pa.Array]:
    def encode(array: pa.Array) -> pa.Array:
        values = _values(array, np.float64)
        if kind is TypeKind.REAL:
            with np.errstate(over="ignore"):
                narrow = values.astype(np.float32)
            if np.isinf(narrow).any() and not np.array_equal(np.isinf(narrow), np.isinf(values)):
                raise CopyValueError("value out of range: overflow", -1)
            return _fixed_fields(narrow.astype(">f4"), _valid_mask(array))
        return _fixed_fields(values.astype(">f8"), _valid_mask(array))

    return encode


def _bool_fields(array: pa.Array) -> pa.Array:
    values = np.asarray(array.fill_null(False), dtype=bool).astype(np.uint8)
    return _fixed_fields(values, _valid_mask(array))


def _date_fields(array: pa.Array) -> pa.Array:
    days = _values(array.cast(pa.int32()), np.int64) - _PG_EPOCH_DAYS
    return _fixed_fields(days.astype(">i4"), _valid_mask(array))


def _timestamp_fields(array: pa.Array) -> pa.Array:
    micros = _values(array.cast(pa.int64()), np.int64) * _US_PER[array.type.unit]
    return _fixed_fields((micros - _PG_EPOCH_US).astype(">i8"), _valid_mask(array))


def _time_fields(array: pa.Array) -> pa.Array:
    return _fixed_fields(
        _values(array.cast(pa.int64()), np.int64).astype(">i8"), _valid_mask(array)
    )


# -- numeric -------------------------------------------------------------------------------------


def _numeric_fields(
    groups: np.ndarray,
    weight0: int,
    neg: np.ndarray,
    dscale: np.ndarray | int,
    valid: np.ndarray | None,
    special: np.ndarray | None = None,
) -> pa.Array:
    """Numeric fields from base-10000 digit ``groups`` (rows x G, most significant first; group
    0 has weight ``weight0``); ``special``: a sign word per row (NaN, +-Infinity) or 0.

    Every row sends all G digits (a fixed-width field: no per-row compaction): ``numeric_recv``
    strips leading and trailing zero digits itself (``make_result``), so the stored value is the
    one Postgres would make from the shortest form, zero's sign included (-0 is stored as 0)."""
    n, g = groups.shape
    words = np.empty((n, 6 + g), dtype=">u2")
    words[:, 0] = 0  # the field's length word, high half
    words[:, 1] = 8 + 2 * g
    words[:, 2] = g
    words[:, 3] = weight0 & 0xFFFF
    words[:, 4] = np.where(neg, _NUMERIC_NEG, _NUMERIC_POS)
    words[:, 5] = dscale
    words[:, 6:] = groups
    if special is not None:
        odd = special != 0
        if odd.any():
            words[odd, 4] = special[odd]
            words[odd, 5] = 0
    matrix = words.view(np.uint8)
    return _masked_fields(matrix, valid)


def _unscaled_words(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A decimal128 array's unscaled values as (low uint64, high int64) words (NULLs read 0)."""
    words = np.frombuffer(array.buffers()[1], dtype="<i8", count=2 * (array.offset + len(array)))
    words = words[2 * array.offset :].reshape(-1, 2)
    lo, hi = words[:, 0].view(np.uint64).copy(), words[:, 1].copy()
    valid = _valid_mask(array)
    if valid is not None:
        lo[~valid], hi[~valid] = 0, 0
    return lo, hi


_MASK32 = np.uint64(0xFFFFFFFF)
_BASE = np.uint64(10_000)


def _base10000(limbs: list[np.ndarray]) -> list[np.ndarray]:
    """Base-10000 digits (least significant first) of non-negative integers given as 32-bit
    limbs (uint64 arrays, most significant first); one uint64 limb when the values fit."""
    digits: list[np.ndarray] = []
    if len(limbs) == 1:
        x = limbs[0].copy()
        while x.any() or not digits:
            digits.append(x % _BASE)
            x //= _BASE
        return digits
    limbs = list(limbs)
    while any(limb.any() for limb in limbs) or not digits:
        rest = np.zeros_like(limbs[0])
        for k, limb in enumerate(limbs):
            cur = (rest << np.uint64(32)) | limb
            limbs[k] = cur // _BASE
            rest = cur % _BASE
        digits.append(rest)
    return digits


def numeric_from_unscaled(
    lo: np.ndarray, hi: np.ndarray, scale: int, valid: np.ndarray | None
) -> pa.Array:
    """Numeric fields of the values ``(hi * 2**64 + lo) * 10**-scale`` (two's complement)."""
    neg = hi < 0
    lo = lo.view(np.uint64)
    hi = hi.view(np.uint64)
    # |value|: two's complement negation of the negative ones
    neg_lo = ~lo + np.uint64(1)
    neg_hi = ~hi + (neg_lo == 0).astype(np.uint64)
    lo, hi = np.where(neg, neg_lo, lo), np.where(neg, neg_hi, hi)
    pad = -scale % 4  # align the decimal point on a base-10000 digit boundary
    factor = 10**pad
    if not hi.any() and lo.max(initial=0) <= np.iinfo(np.uint64).max // factor:
        limbs = [lo * np.uint64(factor)]
    else:
        # little-endian 32-bit limbs times 10**pad, the carry making a fifth limb
        low_first = [lo & _MASK32, lo >> np.uint64(32), hi & _MASK32, hi >> np.uint64(32)]
        carry = np.zeros_like(lo)
        for k, limb in enumerate(low_first):
            t = limb * np.uint64(factor) + carry
            low_first[k], carry = t & _MASK32, t >> np.uint64(32)
        limbs = [carry, *low_first[::-1]]
    digits = _base10000(limbs)
    groups = np.stack(digits[::-1], axis=1)
    weight0 = len(digits) - 1 - (scale + pad) // 4
    return _numeric_fields(groups, weight0, neg, scale, valid)


def _decimal_fields(array: pa.Array) -> pa.Array:
    lo, hi = _unscaled_words(array)
    return numeric_from_unscaled(lo, hi, array.type.scale, _valid_mask(array))


def _int_numeric_fields(array: pa.Array) -> pa.Array:
    values = _values(array.cast(pa.int64()), np.int64)
    return numeric_from_unscaled(values.view(np.uint64), values >> 63, 0, _valid_mask(array))


def _numeric_text_fields(array: pa.Array) -> pa.Array:
    """Numeric fields of numeric texts (``NUMERIC_TEXT`` storage or strings): digit strings
    placed in a matrix so the decimal point falls on a base-10000 boundary."""
    if isinstance(array.type, pa.ExtensionType):
        array = array.storage
    n = len(array)
    valid = _valid_mask(array)
    text = array.fill_null("")
    special = np.zeros(n, dtype=np.uint16)
    for word, code in (("NaN", _NUMERIC_NAN), ("Infinity", _NUMERIC_PINF)):
        special[np.asarray(pc.equal(text, word))] = code
    for word in ("-Infinity", "+Infinity"):
        hit = np.asarray(pc.equal(text, word))
        special[hit] = _NUMERIC_NINF if word[0] == "-" else _NUMERIC_PINF
    parts = pc.extract_regex(text, _NUMERIC_TEXT_RE)
    matched = np.asarray(parts.is_valid(), dtype=bool)
    plain = matched & (special == 0)
    if valid is not None:
        plain &= valid
    # a number needs a digit; ``-``, ``.`` and ``e5`` match the pattern and are no numbers
    int_part, frac = parts.field("int").fill_null(""), parts.field("frac").fill_null("")
    digits = pc.binary_join_element_wise(int_part, frac, "")
    lengths = np.asarray(pc.utf8_length(digits), dtype=np.int64)
    wanted = special == 0 if valid is None else (special == 0) & valid
    if not np.array_equal(plain, wanted) or (lengths[plain] == 0).any():
        raise _Fallback
    exp = pc.utf8_ltrim(parts.field("exp").fill_null(""), "+")
    exp = pc.if_else(pc.equal(exp, ""), "0", exp)
    exponent = np.asarray(pc.cast(exp, pa.int64()), dtype=np.int64)
    frac_digits = np.asarray(pc.utf8_length(frac), dtype=np.int64) - exponent
    lengths[~plain] = 0
    frac_digits[~plain] = 0
    int_digits = lengths - frac_digits
    int_width = 4 * max(-(-int(int_digits.max(initial=1)) // 4), 1)
    frac_width = 4 * -(-max(int(frac_digits.max(initial=0)), 0) // 4)
    width = int_width + frac_width
    if width > _MAX_NUMERIC_TEXT_DIGITS:
        raise _Fallback
    matrix = np.full((n, width), ord("0"), dtype=np.uint8)
    if plain.any():
        digits = digits.cast(pa.large_string()).filter(pa.array(plain))
        offsets = np.frombuffer(digits.buffers()[1], dtype=np.int64)[
            digits.offset : digits.offset + len(digits) + 1
        ]
        data = np.frombuffer(digits.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
        rows = np.flatnonzero(plain)
        start = rows * width + int_width + frac_digits[plain] - lengths[plain]
        dest = np.repeat(start - (offsets[:-1] - offsets[0]), lengths[plain])
        dest += np.arange(len(data), dtype=np.int64)
        matrix.reshape(-1)[dest] = data
    quads = (matrix - ord("0")).astype(np.uint16).reshape(n, width // 4, 4)
    groups = quads[:, :, 0] * 1000 + quads[:, :, 1] * 100 + quads[:, :, 2] * 10 + quads[:, :, 3]
    neg = np.asarray(pc.equal(parts.field("sign").fill_null(""), "-"), dtype=bool)
    return _numeric_fields(
        groups, int_width // 4 - 1, neg, np.maximum(frac_digits, 0), valid, special
    )


# -- dispatch ------------------------------------------------------------------------------------

_STRING_KINDS = frozenset(
    {
        TypeKind.TEXT,
        TypeKind.VARCHAR,
        TypeKind.CHAR,
        TypeKind.NAME,
        TypeKind.ENUM,
        TypeKind.UNKNOWN,
        TypeKind.JSON,
    }
)


def vector_encoder(
    have: pa.DataType, want: SqlType, *, utf8: bool = True
) -> Callable[[pa.Array], pa.Array] | None:
    """The field encoder of Arrow type ``have`` into a column of type ``want``, or None (the
    per-value fallback). ``utf8``: whether the connection's client encoding is UTF-8."""
    kind = want.kind
    if isinstance(have, NumericTextType):
        return _numeric_text_fields if kind is TypeKind.NUMERIC else None
    if pa.types.is_integer(have):
        if kind in INT_RANGES:
            return _int_encoder(kind)
        return _int_numeric_fields if kind is TypeKind.NUMERIC else None
    if pa.types.is_decimal128(have):
        return _decimal_fields if kind is TypeKind.NUMERIC else None
    if pa.types.is_floating(have) and not pa.types.is_float16(have):
        return _float_encoder(kind) if kind in (TypeKind.DOUBLE, TypeKind.REAL) else None
    if pa.types.is_boolean(have):
        return _bool_fields if kind is TypeKind.BOOLEAN else None
    if pa.types.is_date32(have):
        return _date_fields if kind is TypeKind.DATE else None
    if pa.types.is_timestamp(have) and have.unit in _US_PER:
        zoned = have.tz is not None
        if kind is (TypeKind.TIMESTAMPTZ if zoned else TypeKind.TIMESTAMP):
            return _timestamp_fields
        return None
    if pa.types.is_time64(have) and have.unit == "us":
        return _time_fields if kind is TypeKind.TIME else None
    if pa.types.is_string(have) or pa.types.is_large_string(have):
        if not utf8:
            return None
        if kind in _STRING_KINDS:
            return _varlen_fields
        if kind is TypeKind.JSONB:
            return lambda array: _varlen_fields(array, b"\x01")
        return None
    if pa.types.is_binary(have) or pa.types.is_large_binary(have):
        return _varlen_fields if kind is TypeKind.BYTEA else None
    return None


def python_fields(values: Sequence[Any], oid: int, tx: Transformer) -> pa.Array:
    """Fields of Python ``values`` dumped by psycopg's binary dumper for type ``oid`` (what
    ``Copy.write_row`` sends after ``set_types``): the per-value fallback."""
    tx.set_dumper_types([oid], Format.BINARY)
    dump = tx.dump_sequence
    fmt = [PyFormat.BINARY]
    null = b"\xff\xff\xff\xff"
    fields: list[bytes] = []
    append = fields.append
    for v in values:
        if v is None:
            append(null)
            continue
        b = dump((v,), fmt)[0]
        append(len(b).to_bytes(4, "big") + bytes(b))
    return pa.array(fields, _FIELDS)


def normalized_column(array: Any) -> Any:
    """A column as ``encode`` reads it: chunks combined, dictionaries decoded."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array, pa.Array) and pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


class BinaryCopyEncoder:
    """Encodes chunks of rows for ``COPY <table> (<columns>) FROM STDIN (FORMAT BINARY)``.

    ``types``: the COPY target columns' types; ``type_names``: psycopg's name of each (the
    per-value fallback dumps with it, as ``Copy.set_types`` would). ``encode`` takes one Arrow
    array or Python value list per column (equal lengths) and, optionally, int64 weights as a
    last bigint column. Chunks of at most ``small_rows`` rows are encoded row by row with
    psycopg's dumpers: a vector kernel's fixed cost (tens of microseconds a call, ~1 ms a chunk)
    is more than a few rows cost value by value.
    """

    def __init__(
        self,
        conn: psycopg.Connection,
        types: Sequence[SqlType],
        type_names: Sequence[str],
        small_rows: int = SMALL_ROWS,
    ) -> None:
        self.types = list(types)
        self.small_rows = small_rows
        self._tx = Transformer(conn)
        self._oids = [conn.adapters.types[name].oid for name in type_names]
        self._bytea_oid = conn.adapters.types["bytea"].oid
        self._int8_oid = conn.adapters.types["int8"].oid
        self._codec = conn.info.encoding
        self._utf8 = self._codec == "utf-8"
        self._vectors: dict[tuple[int, pa.DataType], Callable | None] = {}
        self.fallback_columns: set[int] = set()  # columns that went per value (tests)

    def column_fields(self, i: int, column: Any) -> pa.Array:
        """The fields of column ``i`` (an Arrow array or a list of Python values)."""
        column = normalized_column(column)
        if isinstance(column, pa.Array):
            if pa.types.is_null(column.type):
                return _null_fields(len(column))
            key = (i, column.type)
            if key not in self._vectors:
                self._vectors[key] = vector_encoder(column.type, self.types[i], utf8=self._utf8)
            encode = self._vectors[key]
            if encode is not None:
                try:
                    return encode(column)
                except CopyValueError as e:
                    raise CopyValueError(str(e), i) from None
                except _Fallback:
                    pass
        self.fallback_columns.add(i)
        values, oid = self._python_column(i, column)
        return python_fields(values, oid, self._tx)

    def _python_column(self, i: int, column: Any) -> tuple[list, int]:
        """Column ``i``'s Python values and the type oid to dump them with (per value)."""
        values = to_python(column) if isinstance(column, pa.Array) else list(column)
        kind = self.types[i].kind
        if kind in INT_RANGES:  # psycopg's int2/int4 dumpers would wrap an out-of-range int
            lo, hi, message = INT_RANGES[kind]
            if any(type(v) is int and not lo <= v <= hi for v in values):
                raise CopyValueError(message, i)
        if kind is TypeKind.REAL and any(
            type(v) is float and abs(v) > _FLOAT4_MAX and abs(v) != math.inf for v in values
        ):  # psycopg's float4 dumper raises a bare OverflowError
            raise CopyValueError("value out of range: overflow", i)
        if kind is TypeKind.JSONB:
            # jsonb's binary form is a version byte and the text (psycopg has no binary jsonb
            # dumper for text; the row path COPYs such tables as text): sent as raw bytes
            codec = self._codec
            values = [None if v is None else b"\x01" + str(v).encode(codec) for v in values]
            return values, self._bytea_oid
        return values, self._oids[i]

    def encode(self, columns: Sequence[Any], weights: np.ndarray | None = None) -> Any:
        """The COPY rows (no signature, no trailer) of one chunk, as a bytes-like object."""
        if len(columns) != len(self.types):
            raise ValueError(f"{len(columns)} columns for {len(self.types)} COPY columns")
        n = len(columns[0]) if len(columns) else 0
        if n <= self.small_rows:
            return self._encode_rows(columns, weights)
        fields = [self.column_fields(i, c) for i, c in enumerate(columns)]
        if weights is not None:
            fields.append(_fixed_fields(np.asarray(weights, dtype=">i8"), None))
        count = np.full(n, len(fields), dtype=">i2").view(np.uint8).reshape(n, 2)
        rows = pc.binary_join_element_wise(_matrix_fields(count, None), *fields, _NO_SEPARATOR)
        offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)
        start, end = int(offsets[rows.offset]), int(offsets[rows.offset + len(rows)])
        return rows.buffers()[2][start:end]

    def _encode_rows(self, columns: Sequence[Any], weights: np.ndarray | None) -> bytes:
        """A small chunk, row by row with psycopg's binary dumpers (``Copy.write_row``'s way)."""
        values, oids = [], []
        for i, column in enumerate(columns):
            v, oid = self._python_column(i, normalized_column(column))
            values.append(v)
            oids.append(oid)
        if weights is not None:
            values.append(np.asarray(weights, dtype=np.int64).tolist())
            oids.append(self._int8_oid)
        tx = self._tx
        tx.set_dumper_types(oids, Format.BINARY)
        dump, formats = tx.dump_sequence, [PyFormat.BINARY] * len(oids)
        head, null = len(oids).to_bytes(2, "big"), b"\xff\xff\xff\xff"
        out = bytearray()
        for row in zip(*values, strict=True):
            out += head
            for b in dump(row, formats):
                if b is None:
                    out += null
                else:
                    out += len(b).to_bytes(4, "big")
                    out += b
        return bytes(out)


_NUMERIC_PY = frozenset({Decimal, int, type(None)})
_ROW_ARROW: dict[TypeKind, pa.DataType] = {
    TypeKind.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    TypeKind.TIME: pa.time64("us"),
    TypeKind.BYTEA: pa.binary(),
    **{kind: pa.string() for kind in _STRING_KINDS | {TypeKind.JSONB}},
}


def columns_from_rows(rows: Sequence[tuple], types: Sequence[SqlType]) -> list[Any]:
    """The columns of tuple ``rows`` for ``BinaryCopyEncoder.encode``: an Arrow array where the
    column's values convert exactly (numerics through their text, as ``NUMERIC_TEXT``: every
    scale, NaN and infinities included), else the list of Python values (per-value fallback)."""
    if rows and len(rows[0]) != len(types):
        raise ValueError(f"rows have {len(rows[0])} columns, the COPY {len(types)}")
    columns: list[Any] = []
    for i, t in enumerate(types):
        values = list(map(itemgetter(i), rows))
        try:
            if t.kind is TypeKind.NUMERIC:
                if not {type(v) for v in values} <= _NUMERIC_PY:
                    raise ColumnConversionError("not Decimal values")
                text = pa.array([None if v is None else str(v) for v in values], pa.string())
                columns.append(pa.ExtensionArray.from_storage(NUMERIC_TEXT, text))
                continue
            typ = _ROW_ARROW.get(t.kind) or arrow_type(t)
            columns.append(values if typ is None else to_arrow_column(values, typ))
        except (ColumnConversionError, TypeError, ValueError):
            columns.append(values)
    return columns
