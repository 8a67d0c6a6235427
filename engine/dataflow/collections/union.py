"""UnionCollection: the Z-set sum of its inputs (UNION ALL). Stateless, any number of inputs.

Set UNION is ``Distinct(Union(...))``; EXCEPT/INTERSECT are ``SetOperationCollection``.
"""

from __future__ import annotations

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection


class UnionCollection(Collection):
    def __init__(self, arity: int = 2) -> None:
        if arity < 1:
            raise ValueError("a union needs at least one input")
        self.arity = arity
        super().__init__()

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        return batch

    def describe(self) -> str:
        return f"Union ({self.arity} inputs)"
