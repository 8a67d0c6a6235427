"""MapCollection: computes each output row from an input row (projection, expressions).

The function is a *batch* function ``rows -> rows`` of the same length; weights pass through
unchanged. With a vectorized form of it (``vector(columns, n) -> columns``: a program of
``engine.sql.vector_expressions``, or a column selection), a columnar batch is mapped column by
column and stays columnar; a batch the program refuses (``NeedsRows``: a row would raise, a
value without an exact kernel) and every row batch take the row path. Stateless; evaluation
errors go to the errs stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection
from engine.dataflow.columnar.vectors import NeedsRows
from engine.dataflow.errs import BatchFn, evaluate


class MapCollection(Collection):
    def __init__(
        self,
        fn: BatchFn,
        description: str = "",
        vector: Any = None,
        per_row: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.fn = fn
        self.description = description
        self.vector = vector
        self.per_row = tuple(per_row)
        self.vector_batches = 0  # columnar batches mapped by the vectorized program
        self.row_batches = 0  # columnar batches the program sent to the row path

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        if not batch:
            return batch
        if self.vector is not None and batch.columnar:
            try:
                columns = self.vector(batch.columns, len(batch))
            except NeedsRows:
                self.row_batches += 1
            else:
                self.vector_batches += 1
                return DiffBatch.from_columns(columns, batch.column_weights)
        rows, ok, errs = evaluate(self.fn, batch)
        self.report_errors(errs)
        return DiffBatch(rows, list(ok.weights))

    def describe(self) -> str:
        how = "Map"
        if self.vector is not None:
            how = "Map (vectorized)"
        elif self.per_row:
            how = f"Map (per row: {', '.join(self.per_row)})"
        return f"{how}: {self.description}" if self.description else how


def project(indices: list[int]) -> BatchFn:
    """A batch function keeping the columns at ``indices``, in that order."""
    if len(indices) == 1:
        (i,) = indices
        return lambda rows: [(r[i],) for r in rows]
    from operator import itemgetter

    get = itemgetter(*indices)
    return lambda rows: list(map(get, rows))
