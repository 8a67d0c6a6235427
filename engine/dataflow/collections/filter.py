"""FilterCollection: keeps the diffs whose row satisfies a predicate (SQL WHERE semantics).

The predicate is a *batch* function ``rows -> [True | False | None, ...]``; only ``True`` keeps
a row (NULL and false drop it). With a vectorized form of it (``vector``: a program whose
``mask(columns, n)`` gives the rows to keep, ``engine.sql.vector_expressions``), a columnar batch
is filtered column by column (``pc.filter`` of every column and the weights) and stays columnar;
a batch the program refuses (``NeedsRows``: a row would raise, a value without an exact kernel)
and every row batch take the row path. Stateless; evaluation errors go to the errs stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from typing import Any

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection
from engine.dataflow.columnar.vectors import NeedsRows
from engine.dataflow.errs import BatchFn, evaluate


class FilterCollection(Collection):
    def __init__(
        self,
        predicate: BatchFn,
        description: str = "",
        vector: Any = None,
        per_row: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.predicate = predicate
        self.description = description
        self.vector = vector
        self.per_row = tuple(per_row)
        self.vector_batches = 0  # columnar batches filtered by the vectorized program
        self.row_batches = 0  # columnar batches the program sent to the row path

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        if not batch:
            return batch
        if self.vector is not None and batch.columnar:
            try:
                keep = self.vector.mask(batch.columns, len(batch))
            except NeedsRows:
                self.row_batches += 1
            else:
                self.vector_batches += 1
                columns = [c.filter(keep) for c in batch.columns]
                return DiffBatch.from_columns(columns, batch.column_weights[keep])
        mask, ok, errs = evaluate(self.predicate, batch)
        self.report_errors(errs)
        keep = [m is True for m in mask]
        return DiffBatch(list(compress(ok.rows, keep)), list(compress(ok.weights, keep)))

    def describe(self) -> str:
        how = "Filter"
        if self.vector is not None:
            how = "Filter (vectorized)"
        elif self.per_row:
            how = f"Filter (per row: {', '.join(self.per_row)})"
        return f"{how}: {self.description}" if self.description else how
