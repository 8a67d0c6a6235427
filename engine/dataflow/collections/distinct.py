"""DistinctCollection: SELECT DISTINCT, each row once while its net multiplicity is positive.

State per distinct row (under SQL equality: NULLs equal each other, 1 = 1.0 = Decimal('1.00')):
``encode_key(row) -> (representative row, count)``. A time reads the touched rows with one
``get_many`` and emits ``+row`` when a count rises from zero and ``-row`` when it falls to zero,
always the stored representative, so retractions are exact. It must not emit anything for a row
whose count stays positive, and must not keep rows in memory between times.
"""

from __future__ import annotations

import pickle

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.nan import loads
from engine.dataflow.state.keycodec import merge_by_key


class DistinctCollection(StatefulCollection):
    tuning = "point"

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        table = self.table
        assert table is not None
        merged = merge_by_key(deltas[0].rows, deltas[0].weights)
        keys = list(merged)
        out = DiffBatch()
        for k, old, (row, dw) in zip(keys, table.get_many(keys), merged.values(), strict=True):
            if not dw:
                continue
            if old is None:
                rep, before = row, 0
            else:
                rep, before = loads(old)  # a NaN in rep is the shared NaN object
            after = before + dw
            if after > 0:
                table.put(k, pickle.dumps((rep, after), 5))
            elif old is not None:
                table.delete(k)
            if before <= 0 < after:
                out.rows.append(rep)
                out.weights.append(1)
            elif after <= 0 < before:
                out.rows.append(rep)
                out.weights.append(-1)
        return out

    def describe(self) -> str:
        return "Distinct"
