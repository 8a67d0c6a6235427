"""Column values as vectorized expressions compute on them: numpy arrays with a validity mask.

A ``Vec`` is one SQL value per row of a batch, or one value for every row (a constant: numpy
scalars broadcast). Numbers and times are numpy arrays of one dtype per ``Kind`` (integers int64;
floats float64; numerics the unscaled int64 integers of one ``scale``; booleans bool; dates int64
days since 1970-01-01; timestamps int64 microseconds), text stays an Arrow string array. NULLs
are ``valid == False`` (``valid is None``: none); the values under a NULL are arbitrary and no
kernel may let them raise or decide anything.

``from_arrow`` reads an input column (the batch's own Arrow array) and ``to_arrow`` makes an
output column of the Arrow type ``arrow_types.to_arrow_column`` gives the SQL type (numerics:
decimal128(38, s) at the values' scale). ``NeedsRows`` is the one signal of the vectorized
path: a batch holds a value the kernels cannot represent exactly, or a row that would raise;
the collection then evaluates that batch row by row, which gives the exact values and errors.
This module must not know about SQL syntax or collections.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar.arrow_types import ColumnConversionError, unscaled_int64


class NeedsRows(Exception):
    """This batch must be evaluated row by row (an error, or a value without an exact kernel)."""


class Kind(enum.Enum):
    INT = "int"
    FLOAT = "float"
    NUMERIC = "numeric"
    BOOL = "bool"
    TEXT = "text"
    DATE = "date"
    TIMESTAMP = "timestamp"


_DTYPES = {
    Kind.INT: np.int64,
    Kind.FLOAT: np.float64,
    Kind.NUMERIC: np.int64,
    Kind.BOOL: np.bool_,
    Kind.DATE: np.int64,
    Kind.TIMESTAMP: np.int64,
}

_EPOCH = datetime.date(1970, 1, 1)
_EPOCH_TS = datetime.datetime(1970, 1, 1)
#: the days of Python's date range (the row path's dates are Python dates)
MIN_DAY = (datetime.date.min - _EPOCH).days
MAX_DAY = (datetime.date.max - _EPOCH).days
DAY_US = 86_400_000_000
#: the microseconds of Python's datetime range
MIN_US = MIN_DAY * DAY_US
MAX_US = (MAX_DAY + 1) * DAY_US - 1


@dataclass(frozen=True, slots=True)
class Vec:
    """Values of one kind; ``values``/``valid`` are arrays of the batch's length or 0-d."""

    kind: Kind
    values: Any
    valid: Any = None  # None: no NULLs; else a bool array (or a 0-d bool for a constant)
    scale: int = 0  # numerics: the scale of every value

    @property
    def is_scalar(self) -> bool:
        if self.kind is Kind.TEXT:
            return not isinstance(self.values, (pa.Array, pa.ChunkedArray))
        return np.ndim(self.values) == 0

    def valid_mask(self, n: int) -> np.ndarray:
        """The validity as a bool array of length ``n``."""
        if self.valid is None:
            return np.ones(n, dtype=bool)
        return np.broadcast_to(np.asarray(self.valid, dtype=bool), (n,))


def raise_if_any(bad: Any, valid: Any, what: str) -> None:
    """``NeedsRows(what)`` if ``bad`` holds for a non-NULL row (``valid``: None = every row)."""
    bad = np.asarray(bad)
    if valid is not None:
        bad = bad & valid
    if bad.any():
        raise NeedsRows(what)


def beyond(x: Any, bound: int) -> Any:
    """``|x| > bound`` for int64 ``x``, without np.abs (which overflows on the smallest int64)."""
    return (x > bound) | (x < -bound)


def both_valid(a: Vec, b: Vec) -> Any:
    """The validity of a strict function of ``a`` and ``b`` (None: no NULLs)."""
    if a.valid is None:
        return b.valid
    if b.valid is None:
        return a.valid
    return a.valid & b.valid


def constant(kind: Kind, value: Any, scale: int = 0) -> Vec:
    """A constant of ``kind``; ``value`` None is a NULL of that kind."""
    if value is None:
        if kind is Kind.TEXT:
            return Vec(kind, pa.scalar(None, pa.string()), np.bool_(False))
        return Vec(kind, _DTYPES[kind](0), np.bool_(False), scale)
    if kind is Kind.TEXT:
        return Vec(kind, pa.scalar(value, pa.string()))
    return Vec(kind, _DTYPES[kind](value), None, scale)


def python_constant(kind: Kind, value: Any) -> Vec | None:
    """The Vec of a Python constant (as the row compiler folds them), None if it has none."""
    if value is None:
        return constant(kind, None)
    if kind is Kind.INT and type(value) is int and -(2**63) <= value < 2**63:
        return constant(kind, value)
    if kind is Kind.FLOAT and type(value) is float:
        return constant(kind, value)
    if kind is Kind.BOOL and type(value) is bool:
        return constant(kind, value)
    if kind is Kind.TEXT and type(value) is str:
        return constant(kind, value)
    if kind is Kind.DATE and type(value) is datetime.date:
        return constant(kind, (value - _EPOCH).days)
    if kind is Kind.TIMESTAMP and type(value) is datetime.datetime and value.tzinfo is None:
        delta = value - _EPOCH_TS
        return constant(kind, (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds)
    if kind is Kind.NUMERIC and type(value) is Decimal and value.is_finite():
        sign, digits, exponent = value.as_tuple()
        scale = max(0, -exponent)  # type: ignore[operator]
        unscaled = int(value.scaleb(scale))
        if -(2**63) < unscaled < 2**63:
            return constant(kind, unscaled, scale)
    return None


# --- Arrow in ----------------------------------------------------------------------------------


def _kind_of(t: pa.DataType) -> Kind | None:
    if isinstance(t, pa.ExtensionType):
        return None  # e.g. avg's NUMERIC_TEXT: each value has its own scale
    if pa.types.is_integer(t) and pa.types.is_signed_integer(t):
        return Kind.INT
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return Kind.FLOAT
    if pa.types.is_decimal128(t):
        return Kind.NUMERIC
    if pa.types.is_boolean(t):
        return Kind.BOOL
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return Kind.TEXT
    if pa.types.is_date32(t):
        return Kind.DATE
    if pa.types.is_timestamp(t) and t.unit == "us" and t.tz is None:
        return Kind.TIMESTAMP
    return None


def _valid(array: pa.Array) -> np.ndarray | None:
    if array.null_count == 0:
        return None
    return np.asarray(array.is_valid()).astype(bool, copy=False)


def from_arrow(array: pa.Array, kind: Kind) -> Vec:
    """The input column ``array`` as a Vec of ``kind``; ``NeedsRows`` when its Arrow type does
    not hold ``kind`` the way the kernels read it, or a value does not fit (a numeric past 64
    bits)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if _kind_of(array.type) is not kind:
        raise NeedsRows(f"a {kind.value} column arrived as {array.type}")
    valid = _valid(array)
    if kind is Kind.TEXT:
        return Vec(kind, array, valid)
    if kind is Kind.NUMERIC:
        try:
            return Vec(kind, unscaled_int64(array), valid, array.type.scale)
        except ColumnConversionError:
            raise NeedsRows("a numeric past 64 bits") from None
    if kind is Kind.DATE:
        array = array.cast(pa.int32())
    elif kind is Kind.TIMESTAMP:
        array = array.cast(pa.int64())
    if valid is not None:
        array = pc.fill_null(array, False if kind is Kind.BOOL else 0)
    values = array.to_numpy(zero_copy_only=False)
    return Vec(kind, values.astype(_DTYPES[kind], copy=False), valid)


# --- Arrow out ---------------------------------------------------------------------------------


def broadcast(v: Vec, n: int) -> Vec:
    """``v`` with arrays of length ``n`` (a constant repeated)."""
    if v.kind is Kind.TEXT:
        values = v.values
        if not isinstance(values, (pa.Array, pa.ChunkedArray)):
            values = pa.repeat(values, n)
        valid = None if v.valid is None else v.valid_mask(n)
        return Vec(v.kind, values, valid)
    values = np.broadcast_to(np.asarray(v.values, dtype=_DTYPES[v.kind]), (n,))
    valid = None if v.valid is None else v.valid_mask(n)
    return Vec(v.kind, values, valid, v.scale)


def _bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def to_arrow(v: Vec, n: int) -> pa.Array:
    """``v`` as an Arrow array of length ``n``: int64, float64, decimal128(38, scale), bool,
    string, date32 or timestamp[us]."""
    v = broadcast(v, n)
    if v.kind is Kind.TEXT:
        values = v.values
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        return values if values.type == pa.string() else values.cast(pa.string())
    valid = None if v.valid is None else np.ascontiguousarray(v.valid)
    mask = _bitmap(valid)
    nulls = 0 if mask is None else int(n - np.count_nonzero(valid))
    if v.kind is Kind.NUMERIC:
        if v.scale > 38:
            raise NeedsRows("a numeric scale past decimal128")
        lo = np.ascontiguousarray(v.values, dtype=np.int64)
        words = np.empty((n, 2), dtype=np.int64)
        words[:, 0] = lo
        words[:, 1] = lo >> 63
        data = pa.py_buffer(words)
        return pa.Array.from_buffers(pa.decimal128(38, v.scale), n, [mask, data], nulls)
    if v.kind is Kind.BOOL:
        data = pa.py_buffer(np.packbits(np.asarray(v.values, dtype=bool), bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), n, [mask, data], nulls)
    if v.kind is Kind.DATE:
        data = pa.py_buffer(np.ascontiguousarray(v.values, dtype=np.int32))  # in range
        return pa.Array.from_buffers(pa.date32(), n, [mask, data], nulls)
    arrow = {Kind.INT: pa.int64(), Kind.FLOAT: pa.float64(), Kind.TIMESTAMP: pa.timestamp("us")}
    data = pa.py_buffer(np.ascontiguousarray(v.values, dtype=_DTYPES[v.kind]))
    return pa.Array.from_buffers(arrow[v.kind], n, [mask, data], nulls)
