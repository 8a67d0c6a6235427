"""ConstantCollection: emits a fixed set of rows once, at the first time ever (SELECT without FROM).

It has no inputs; whether the rows were already emitted is kept in state, so a restarted view does
not emit them twice. Must not be used for anything that changes.
"""

from __future__ import annotations

from typing import ClassVar

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.collection import StatefulCollection

_EMITTED = b"emitted"


class ConstantCollection(StatefulCollection):
    arity = 0
    always_process: ClassVar[bool] = True

    def __init__(self, rows: list[Row]) -> None:
        super().__init__()
        self.rows = list(rows)

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        if self.table.get(_EMITTED) is not None:
            return DiffBatch()
        self.table.put(_EMITTED, b"1")
        return DiffBatch.inserts(self.rows)

    def describe(self) -> str:
        return f"Constant: {len(self.rows)} row(s)"
