"""FilterCollection: keeps the diffs whose row satisfies a predicate (SQL WHERE semantics).

The predicate is a *batch* function ``rows -> [True | False | None, ...]``; only ``True`` keeps
a row (NULL and false drop it). Stateless; evaluation errors go to the errs stream.
"""

from __future__ import annotations

from itertools import compress

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection
from engine.dataflow.errs import BatchFn, evaluate


class FilterCollection(Collection):
    def __init__(self, predicate: BatchFn, description: str = "") -> None:
        super().__init__()
        self.predicate = predicate
        self.description = description

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        if not batch:
            return batch
        mask, ok, errs = evaluate(self.predicate, batch)
        self.report_errors(errs)
        keep = [m is True for m in mask]
        return DiffBatch(list(compress(ok.rows, keep)), list(compress(ok.weights, keep)))

    def describe(self) -> str:
        return f"Filter: {self.description}" if self.description else "Filter"
