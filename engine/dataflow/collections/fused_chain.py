"""FusedChainCollection: a chain of stateless single-input collections run as one callback.

Epsio's "synchronous transfer": a filter -> map -> filter chain costs one call per batch, with no
buffer between the steps. The dataflow builds these when it fuses; each step keeps its own errs.
"""

from __future__ import annotations

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection


class FusedChainCollection(Collection):
    def __init__(self, steps: list[Collection]) -> None:
        super().__init__()
        if any(s.stateful or s.arity != 1 for s in steps):
            raise ValueError("only stateless single-input collections can be fused")
        self.steps = steps

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        for step in self.steps:
            if not batch:
                break
            batch = step.on_diffs(0, batch)
            self.report_errors(step.take_errors())
        return batch

    def describe(self) -> str:
        return "Fused[" + " -> ".join(s.describe() for s in self.steps) + "]"
