"""Byte encodings of rows and keys for RocksDB state.

Three encodings, each deterministic (equal inputs give equal bytes, whatever the objects' identity,
which rules out pickle and marshal: both memoize by object identity):

* ``encode_exact(row)``: identity of a row as stored (Decimal('1.0') and Decimal('1.00') differ).
  Used where a row must be found again exactly, e.g. to retract it.
* ``encode_key(values)``: SQL equality of grouping/join keys: numerics normalized so that
  1 = 1.0 = Decimal('1.00'), -0.0 = 0.0; NULLs equal each other (GROUP BY semantics; joins check
  for NULL themselves).
* ``encode_sortable(values, descending, nulls_first)``: memcomparable: the byte order of the
  encodings is the SQL order of the values (numbers by value, text by code point = the C
  collation, NULLS LAST ascending by default). Each encoded value is prefix-free, so composite
  keys compare column by column and inverting the bytes gives descending order.

No decoding: state stores the rows themselves in values; keys are only compared and looked up.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

_PACK_D = struct.Struct(">d").pack
_PACK_Q = struct.Struct(">Q").pack
_SIGN64 = 1 << 63
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def encode_exact(row: tuple) -> bytes:
    """Identity of ``row`` as bytes: ``repr`` is deterministic and injective for SQL value types."""
    return repr(row).encode()


# -- equality keys --------------------------------------------------------------------------------
def _normalize(v: Any) -> Any:
    t = type(v)
    if t is Decimal:
        if v.is_finite():
            if v == v.to_integral_value():
                return int(v)
            return v.normalize()
        return v
    if t is float:
        if v.is_integer():
            return int(v)
        if v != v:
            return "NaN"
        return v
    if t is bool:
        return v
    return v


_NEEDS_NORMALIZING = frozenset((Decimal, float))


def normalize_key(values: tuple) -> tuple:
    """The canonical form of a key tuple under SQL equality (see module docstring)."""
    for v in values:
        if type(v) in _NEEDS_NORMALIZING:
            return tuple(map(_normalize, values))
    return values


def encode_key(values: tuple) -> bytes:
    """Bytes equal iff the key tuples are equal under SQL equality (NULL = NULL here)."""
    for v in values:
        if type(v) in _NEEDS_NORMALIZING:  # normalize only the numbers (a call per value costs)
            needs = _NEEDS_NORMALIZING
            return repr(tuple([_normalize(x) if type(x) in needs else x for x in values])).encode()
    return repr(values).encode()


def merge_by_key(rows: Sequence[tuple], weights: Sequence[int]) -> dict[bytes, list]:
    """Weights summed per SQL-equal row: ``encode_key(row) -> [first row, weight]``."""
    merged: dict[bytes, list] = {}
    for r, w in zip(rows, weights, strict=True):
        k = encode_key(r)
        e = merged.get(k)
        if e is None:
            merged[k] = [r, w]
        else:
            e[1] += w
    return merged


# -- order-preserving keys ------------------------------------------------------------------------
# Tags order the type classes (only matters for mixed-type columns, which typed plans never have).
_T_NULL_FIRST = b"\x01"
_T_BOOL = b"\x10"
_T_NUMERIC = b"\x20"
_T_FLOAT = b"\x21"
_T_TEXT = b"\x30"
_T_BYTES = b"\x31"
_T_DATE = b"\x40"
_T_TIMESTAMP = b"\x41"
_T_TIMESTAMPTZ = b"\x42"
_T_TIME = b"\x43"
_T_INTERVAL = b"\x44"
_T_NULL_LAST = b"\xfe"


def _escape(raw: bytes) -> bytes:
    # prefix-free: 0x00 -> 0x00 0xff, terminator 0x00 0x00
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def _numeric_digits(sign: int, digits: str, adjusted: int) -> bytes:
    """Finite nonzero number as sign class + exponent + digit string (memcomparable)."""
    body = (adjusted + 0x8000).to_bytes(2, "big") + digits.encode() + b"\x00"
    if sign < 0:
        return b"\x01" + bytes(255 - b for b in body)
    return b"\x03" + body


def _enc_int(v: int) -> bytes:
    if v > 0:  # _numeric_digits inlined for the common case
        s = str(v)
        return b"\x20\x03" + (len(s) + 0x7FFF).to_bytes(2, "big") + s.rstrip("0").encode() + b"\x00"
    if v == 0:
        return _T_NUMERIC + b"\x02"
    s = str(-v)
    return _T_NUMERIC + _numeric_digits(-1, s.rstrip("0"), len(s) - 1)


def _enc_decimal(v: Decimal) -> bytes:
    if v.is_nan():
        return _T_NUMERIC + b"\x06"
    if v.is_infinite():
        return _T_NUMERIC + (b"\x00" if v < 0 else b"\x05")
    if v == 0:
        return _T_NUMERIC + b"\x02"
    sign, digits, exp = v.normalize().as_tuple()
    ds = "".join(map(str, digits))
    return _T_NUMERIC + _numeric_digits(-1 if sign else 1, ds, exp + len(ds) - 1)


def _enc_float(v: float) -> bytes:
    if v != v:
        return _T_FLOAT + b"\xff\xf8\x00\x00\x00\x00\x00\x00"  # NaN above +inf, as Postgres
    if v == 0.0:
        v = 0.0
    (bits,) = struct.unpack(">Q", _PACK_D(v))
    bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits & _SIGN64 else bits | _SIGN64
    return _T_FLOAT + _PACK_Q(bits)


def _enc_i64(tag: bytes, v: int) -> bytes:
    return tag + _PACK_Q((v + _SIGN64) & 0xFFFFFFFFFFFFFFFF)


def _enc_datetime(v: dt.datetime) -> bytes:
    if v.tzinfo is None:
        delta = v - _EPOCH
        tag = _T_TIMESTAMP
    else:
        delta = v - _EPOCH_UTC
        tag = _T_TIMESTAMPTZ
    return _enc_i64(tag, (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)


def _enc_time(v: dt.time) -> bytes:
    micros = ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    return _enc_i64(_T_TIME, micros)


def _enc_interval(v: dt.timedelta) -> bytes:
    return _enc_i64(_T_INTERVAL, (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds)


_ENCODERS = {
    bool: lambda v: _T_BOOL + (b"\x01" if v else b"\x00"),
    int: _enc_int,
    Decimal: _enc_decimal,
    float: _enc_float,
    str: lambda v: _T_TEXT + _escape(v.encode("utf-8", "surrogatepass")),
    bytes: lambda v: _T_BYTES + _escape(v),
    dt.date: lambda v: _enc_i64(_T_DATE, v.toordinal()),
    dt.datetime: _enc_datetime,
    dt.time: _enc_time,
    dt.timedelta: _enc_interval,
}


def _encode_value(v: Any) -> bytes:
    enc = _ENCODERS.get(type(v))
    if enc is None:
        for base, e in _ENCODERS.items():
            if isinstance(v, base):
                enc = e
                break
        else:
            raise TypeError(f"cannot order values of type {type(v).__name__}: {v!r}")
    return enc(v)


_INVERT = bytes(255 - i for i in range(256))


def encode_sortable(
    values: Sequence[Any],
    descending: Sequence[bool] | None = None,
    nulls_first: Sequence[bool] | None = None,
) -> bytes:
    """Memcomparable encoding of ``values`` under SQL ORDER BY semantics.

    ``descending[i]`` reverses column i; ``nulls_first[i]`` defaults to Postgres' rule (NULLS
    FIRST for DESC, NULLS LAST for ASC).

    >>> encode_sortable((1,)) < encode_sortable((2,)) < encode_sortable((None,))
    True
    >>> encode_sortable((1,), [True]) > encode_sortable((2,), [True])
    True
    """
    parts = []
    for i, v in enumerate(values):
        desc = bool(descending[i]) if descending is not None else False
        nf = nulls_first[i] if nulls_first is not None and nulls_first[i] is not None else desc
        # for NULL: after inversion (desc) the tag flips, so pick the tag that lands where asked
        enc = (_T_NULL_FIRST if nf != desc else _T_NULL_LAST) if v is None else _encode_value(v)
        parts.append(enc.translate(_INVERT) if desc else enc)
    return b"".join(parts)


def encode_sortable_value(v: Any) -> bytes:
    """``encode_sortable((v,))`` (ascending, NULLS LAST) without the per-column machinery."""
    if v is None:
        return _T_NULL_LAST
    enc = _ENCODERS.get(type(v))
    return enc(v) if enc is not None else _encode_value(v)


def is_nan(v: Any) -> bool:
    """True for float or Decimal NaN (Postgres sorts NaN above every number and equal to itself)."""
    if type(v) is float:
        return math.isnan(v)
    return type(v) is Decimal and v.is_nan()
