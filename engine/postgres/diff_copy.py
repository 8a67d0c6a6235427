"""COPY one time's diffs from columns, for the result sink: no Python per row on the common types.

``DiffCopy`` holds two ``BinaryCopyEncoder``s: one for the sink's diff table (its columns, then
the weight) and one for the result table itself. ``copy_weighted`` COPYs chosen rows with their
weights into the diff table; ``copy_repeated`` COPYs chosen rows straight into the result table,
each as many times as its count says (rows are repeated by index before encoding, a chunk of at
most ``chunk_rows`` at a time, so a huge weight never builds a huge array). A batch's columns come
from ``columns``: the batch's own Arrow arrays, or its tuple rows converted once
(``copy_binary.columns_from_rows``). This module must not open transactions nor run the sink's
statements; errors of the encoder (``CopyValueError``) go to the caller, which names the view.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql

from engine.dataflow.batch import DiffBatch
from engine.postgres.copy_binary import (
    SIGNATURE,
    TRAILER,
    BinaryCopyEncoder,
    columns_from_rows,
    normalized_column,
)
from engine.sql.types import SqlType

COPY_CHUNK_ROWS = 65_536


def repeated_chunks(positions: np.ndarray, counts: np.ndarray, size: int) -> Iterator[np.ndarray]:
    """``positions`` each repeated ``counts`` times, in order, at most ``size`` per chunk.

    >>> [c.tolist() for c in repeated_chunks(np.array([4, 7]), np.array([1, 3]), 2)]
    [[4], [7, 7], [7]]
    """
    if len(counts) and counts.max() == 1:
        for i in range(0, len(positions), size):
            yield positions[i : i + size]
        return
    ends = np.cumsum(counts)
    i, n = 0, len(positions)
    while i < n:
        before = int(ends[i - 1]) if i else 0  # copies of the rows before row i
        j = int(np.searchsorted(ends, before + size, side="right"))
        if j > i:
            yield np.repeat(positions[i:j], counts[i:j])
            i = j
            continue
        left = int(counts[i])  # row i alone has more copies than fit in a chunk
        while left > 0:
            yield np.full(min(left, size), positions[i])
            left -= size
        i += 1


def take(column: Any, positions: np.ndarray) -> Any:
    """Rows ``positions`` of an Arrow column (a zero-copy slice when they are consecutive) or of
    a list of Python values."""
    if isinstance(column, pa.Array):
        if len(positions) == 0:
            return column.slice(0, 0)
        first = int(positions[0])
        if int(positions[-1]) - first == len(positions) - 1 and (np.diff(positions) == 1).all():
            return column.slice(first, len(positions))
        return column.take(pa.array(positions))
    return [column[i] for i in positions.tolist()]


class DiffCopy:
    """Binary COPY of a time's diffs: weighted into the diff table, repeated into the result.

    ``types``/``type_names``: the result table's column types and psycopg's names of them;
    ``diff_types``/``diff_type_names``: the diff table's columns (before its weight column).
    """

    def __init__(
        self,
        conn: psycopg.Connection,
        types: Sequence[SqlType],
        type_names: Sequence[str],
        diff_types: Sequence[SqlType],
        diff_type_names: Sequence[str],
        chunk_rows: int = COPY_CHUNK_ROWS,
    ) -> None:
        self.types = list(types)
        self.result_encoder = BinaryCopyEncoder(conn, types, type_names)
        self.diff_encoder = BinaryCopyEncoder(conn, diff_types, diff_type_names)
        self.chunk_rows = chunk_rows

    def columns(self, batch: DiffBatch) -> list[Any]:
        """The batch's columns: its Arrow arrays, or its rows converted once (a batch the
        encoders take row by row keeps its Python values)."""
        if batch.columns is not None:
            return [normalized_column(c) for c in batch.columns]
        rows = batch.rows
        if len(rows) <= min(self.result_encoder.small_rows, self.diff_encoder.small_rows):
            return [list(map(itemgetter(i), rows)) for i in range(len(self.types))]
        return columns_from_rows(rows, self.types)

    def copy_weighted(
        self,
        cur: psycopg.Cursor,
        table: sql.Composable,
        columns: Sequence[Any],
        positions: np.ndarray,
        weights: np.ndarray,
    ) -> None:
        """COPY rows ``positions`` of ``columns`` and their ``weights`` (one per position) into
        ``table`` (the diff table: the columns, then the weight)."""
        statement = sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(table)
        with cur.copy(statement) as cp:
            cp.write(SIGNATURE)
            for i in range(0, len(positions), self.chunk_rows):
                chunk = positions[i : i + self.chunk_rows]
                data = self.diff_encoder.encode(
                    [take(c, chunk) for c in columns], weights[i : i + self.chunk_rows]
                )
                cp.write(data)
            cp.write(TRAILER)

    def copy_repeated(
        self,
        cur: psycopg.Cursor,
        table: sql.Composable,
        column_list: sql.Composable,
        columns: Sequence[Any],
        positions: np.ndarray,
        counts: np.ndarray,
    ) -> None:
        """COPY row ``positions[i]`` of ``columns`` ``counts[i]`` times into ``table``'s
        ``column_list`` (the result table)."""
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(table, column_list)
        with cur.copy(statement) as cp:
            cp.write(SIGNATURE)
            for chunk in repeated_chunks(positions, counts, self.chunk_rows):
                cp.write(self.result_encoder.encode([take(c, chunk) for c in columns]))
            cp.write(TRAILER)
