"""MapCollection: computes each output row from an input row (projection, expressions).

The function is a *batch* function ``rows -> rows`` of the same length; weights pass through
unchanged. Stateless; evaluation errors go to the errs stream.
"""

from __future__ import annotations

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection
from engine.dataflow.errs import BatchFn, evaluate


class MapCollection(Collection):
    def __init__(self, fn: BatchFn, description: str = "") -> None:
        super().__init__()
        self.fn = fn
        self.description = description

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        if not batch:
            return batch
        rows, ok, errs = evaluate(self.fn, batch)
        self.report_errors(errs)
        return DiffBatch(rows, list(ok.weights))

    def describe(self) -> str:
        return f"Map: {self.description}" if self.description else "Map"


def project(indices: list[int]) -> BatchFn:
    """A batch function keeping the columns at ``indices``, in that order."""
    if len(indices) == 1:
        (i,) = indices
        return lambda rows: [(r[i],) for r in rows]
    from operator import itemgetter

    get = itemgetter(*indices)
    return lambda rows: list(map(get, rows))
