"""Key columns (GROUP BY, DISTINCT) as Arrow arrays that hold every value exactly, numeric NaN too.

A numeric column of a known scale is a decimal128 column, but decimal128 has no NaN and Postgres'
numeric(p,s) does. A key column keeps a numeric NaN as a sentinel 128-bit value past every
decimal128 value (``value_counts.NAN_INT``, stored in the array's buffer as any other value), so
``kernels.group_index`` and ``kernels.key_bytes`` group it apart from the numbers and equal to
itself, and the bytes of every other value stay what they were. Such a column must not leave the
collection as Arrow: ``has_specials`` tells, and ``key_values`` gives its Python values with the
shared numeric NaN.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar import value_counts
from engine.dataflow.columnar.arrow_types import ColumnConversionError, to_arrow_column, to_python
from engine.dataflow.nan import NUMERIC_NAN


def key_column(values: list, typ: pa.DataType) -> pa.Array:
    """The Python values of a key column as an Arrow array of ``typ`` (numerics: decimal128(38, s)
    with NaN as the sentinel); raises ``ColumnConversionError`` for other values it cannot hold."""
    try:
        return to_arrow_column(values, typ)
    except ColumnConversionError:
        if not pa.types.is_decimal(typ):
            raise
    hi, lo, valid = value_counts.wide_exact(values, typ)
    words = np.empty((len(values), 2), dtype="<i8")
    words[:, 0], words[:, 1] = lo.view(np.int64), hi
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.decimal128(38, typ.scale), len(values), [validity, pa.py_buffer(words)]
    )


def _special_positions(column: pa.Array) -> np.ndarray:
    if not pa.types.is_decimal(column.type) or not len(column):
        return np.empty(0, dtype=np.int64)
    words = np.frombuffer(column.buffers()[1], dtype="<i8", count=2 * (column.offset + len(column)))
    words = words[2 * column.offset :].reshape(-1, 2)
    special = value_counts.is_special(words[:, 1], words[:, 0].view(np.uint64))
    return np.flatnonzero(special & np.asarray(pc.is_valid(column), dtype=bool))


def has_specials(column: pa.Array) -> bool:
    """Whether a key column holds a numeric NaN sentinel (then it must go out as Python values)."""
    return len(_special_positions(column)) > 0


def key_values(column: pa.Array) -> list:
    """A key column's Python values, its sentinels as the shared numeric NaN."""
    special = _special_positions(column)
    if not len(special):
        return to_python(column)
    mask = np.zeros(len(column), dtype=bool)
    mask[special] = True
    values = to_python(pc.if_else(pa.array(mask), pa.scalar(None, column.type), column))
    for j in special.tolist():
        values[j] = NUMERIC_NAN
    return values
