"""NegateCollection: flips every weight (Z-set negation), e.g. the right side of a difference."""

from __future__ import annotations

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection


class NegateCollection(Collection):
    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        return DiffBatch(batch.rows, [-w for w in batch.weights])

    def describe(self) -> str:
        return "Negate"
