"""One time's delta as a columnar collection reads it: each column made once, Arrow where it can.

A delta arrives as Arrow columns (from a columnar collection or source) or as tuple rows. The
collection asks for a column as Arrow (``arrow``: the batch's own array when its type holds the
values the way the collection's declared type does, else the row values converted once), as
Python values (``values``: for the exact slow paths), or as a FILTER mask (``mask``). Nothing
here converts a columnar batch to rows unless a slow path asks for Python values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.batch import DiffBatch
from engine.dataflow.columnar.arrow_types import ColumnConversionError, to_arrow_column, to_python


def _kind(t: pa.DataType) -> str | None:
    if isinstance(t, pa.ExtensionType):
        return None  # e.g. avg's NUMERIC_TEXT: values of their own scale each
    if pa.types.is_decimal(t):
        return f"decimal{t.scale}"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_timestamp(t):
        return f"timestamp{t.unit}{t.tz}"
    for name, test in (("bool", pa.types.is_boolean), ("float", pa.types.is_floating)):
        if test(t):
            return name
    return str(t) if pa.types.is_date32(t) else None


def compatible(have: pa.DataType, want: pa.DataType | None) -> bool:
    """Whether a column of type ``have`` holds values exactly as ``want`` would (int32 and int64,
    decimal128 of the same scale, string and large_string...)."""
    return want is not None and _kind(have) is not None and _kind(have) == _kind(want)


class TimeColumns:
    """The columns of ``batch``, whose columns have the Arrow ``types`` (None: no Arrow type)."""

    def __init__(self, batch: DiffBatch, types: Sequence[pa.DataType | None]) -> None:
        self.batch = batch
        self.types = types
        self.n = len(batch)
        self.weights = np.asarray(batch.column_weights, dtype=np.int64)
        self._arrow: dict[int, pa.Array | None] = {}
        self._values: dict[int, list] = {}
        self._masks: dict[int, np.ndarray] = {}

    def arrow(self, i: int) -> pa.Array | None:
        """Column ``i`` as Arrow of a type compatible with ``types[i]``, or None if its values do
        not fit one (a numeric NaN, a value past decimal128) or it has no Arrow type."""
        if i not in self._arrow:
            self._arrow[i] = self._make_arrow(i)
        return self._arrow[i]

    def _make_arrow(self, i: int) -> pa.Array | None:
        want = self.types[i]
        if want is None:
            return None
        cols = self.batch.columns
        if cols is not None and compatible(cols[i].type, want):
            return cols[i]
        try:
            return to_arrow_column(self.values(i), want)
        except ColumnConversionError:
            return None

    def values(self, i: int) -> list:
        """Column ``i`` as the engine's Python values."""
        v = self._values.get(i)
        if v is None:
            cols = self.batch.columns
            v = to_python(cols[i]) if cols is not None else [r[i] for r in self.batch.rows]
            self._values[i] = v
        return v

    def valid(self, i: int) -> np.ndarray:
        """Which values of column ``i`` are not NULL."""
        col = self.arrow(i)
        if col is not None:
            return np.asarray(pc.is_valid(col), dtype=bool)
        return np.fromiter((v is not None for v in self.values(i)), bool, self.n)

    def mask(self, filt: int | None) -> np.ndarray | None:
        """Rows whose FILTER column ``filt`` is true (None: no FILTER)."""
        if filt is None:
            return None
        m = self._masks.get(filt)
        if m is None:
            col = self.arrow(filt) if self.types[filt] is not None else None
            if col is not None and pa.types.is_boolean(col.type):
                m = np.asarray(pc.fill_null(col, False), dtype=bool)
            else:
                m = np.fromiter((v is True for v in self.values(filt)), bool, self.n)
            self._masks[filt] = m
        return m
