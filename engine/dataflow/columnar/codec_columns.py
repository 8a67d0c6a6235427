"""A batch as the Arrow columns a ``row_block.RowCodec`` encodes, and those columns back as rows.

``codec_columns(batch, types)`` gives the batch's own Arrow columns where their types hold the
values as the codec reads them, else converts the tuple rows once; a numeric NaN (which no
decimal128 holds) is NULL in its Arrow column plus a mask per column. ``python_rows`` turns such
columns back into the engine's tuples (the shared numeric NaN where a mask says so). Used by the
columnar collections whose state holds whole rows as records (join, top-k). This module must not
know about state or keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import numpy as np
import pyarrow as pa

from engine.dataflow.batch import DiffBatch
from engine.dataflow.columnar.arrow_types import ColumnConversionError, to_arrow_column, to_python
from engine.dataflow.nan import NUMERIC_NAN


def codec_columns(
    batch: DiffBatch, types: Sequence[pa.DataType]
) -> tuple[list[pa.Array], list[np.ndarray | None]]:
    """The batch as Arrow columns of ``types`` (numeric NaNs as NULL plus a mask per column)."""
    cols = batch.columns
    if cols is not None and all(fits(c.type, t) for c, t in zip(cols, types, strict=True)):
        return list(cols), [None] * len(types)
    rows = batch.rows
    if rows and types:
        try:  # one pass over the rows (each tuple visited once): the common case
            as_struct = pa.array(
                rows, pa.struct([(f"c{i}", _held(t)) for i, t in enumerate(types)])
            )
            return as_struct.flatten(), [None] * len(types)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            pass  # a value its column cannot hold (a numeric NaN...): column by column
    values = [list(map(itemgetter(i), rows)) for i in range(len(types))]  # faster than zip(*rows)
    out: list[pa.Array] = []
    nans: list[np.ndarray | None] = []
    for vals, t in zip(values, types, strict=True):
        try:
            out.append(to_arrow_column(vals, t))
            nans.append(None)
            continue
        except ColumnConversionError:
            if not pa.types.is_decimal(t):
                raise
        nan = np.fromiter((v is not None and v != v for v in vals), bool, len(vals))
        out.append(to_arrow_column([None if v is not None and v != v else v for v in vals], t))
        nans.append(nan)
    return out, nans


def _held(t: pa.DataType) -> pa.DataType:
    """The type ``to_arrow_column`` converts a column of type ``t`` with."""
    return pa.decimal128(38, t.scale) if pa.types.is_decimal(t) else t


def fits(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column of type ``have`` holds ``want``'s values as the codec reads them."""
    if pa.types.is_decimal(want):
        return pa.types.is_decimal(have) and have.scale == want.scale
    if pa.types.is_string(want):
        return pa.types.is_string(have) or pa.types.is_large_string(have)
    if pa.types.is_integer(want):
        return pa.types.is_integer(have)
    return have == want


def python_rows(columns: list[pa.Array], nans: dict[int, np.ndarray]) -> list[tuple]:
    """The rows of ``columns`` as tuples; ``nans[i]`` marks column i's numeric NaNs."""
    values = [to_python(c) for c in columns]
    for i, mask in nans.items():
        col = values[i]
        for j in np.flatnonzero(mask).tolist():
            col[j] = NUMERIC_NAN
    return list(zip(*values, strict=True))
