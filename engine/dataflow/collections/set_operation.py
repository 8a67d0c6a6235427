"""SetOperationCollection: INTERSECT [ALL] and EXCEPT [ALL] of two inputs (left, right).

State per row (under SQL equality: set operations treat NULLs as not distinct, and 1 = 1.0):
``encode_key(row) -> (representative row, a, b)`` with the row's multiplicities ``a`` in the left
and ``b`` in the right input. The output multiplicity is a function of (a, b) — intersect:
1 if a>0 and b>0; intersect_all: min(a, b); except: 1 if a>0 and b=0; except_all: max(a-b, 0) —
and a time emits, for each touched row, the stored representative with weight new - old. UNION
is not here (it is linear: union + distinct). This collection must not keep rows in memory
between times.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.state.keycodec import merge_by_key

_MULTIPLICITY: dict[str, Callable[[int, int], int]] = {
    "intersect": lambda a, b: 1 if a > 0 and b > 0 else 0,
    "intersect_all": lambda a, b: max(min(a, b), 0),
    "except": lambda a, b: 1 if a > 0 and b <= 0 else 0,
    "except_all": lambda a, b: max(a - b, 0),
}


class SetOperationCollection(StatefulCollection):
    arity = 2
    tuning = "point"

    def __init__(self, kind: str) -> None:
        if kind not in _MULTIPLICITY:
            raise ValueError(
                f"unknown set operation {kind!r}; expected one of {sorted(_MULTIPLICITY)}"
            )
        super().__init__()
        self.kind = kind
        self._multiplicity = _MULTIPLICITY[kind]

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        table = self.table
        assert table is not None
        left = merge_by_key(deltas[0].rows, deltas[0].weights)
        right = merge_by_key(deltas[1].rows, deltas[1].weights)
        touched: dict[bytes, list] = {k: [r, w, 0] for k, (r, w) in left.items()}
        for k, (r, w) in right.items():
            e = touched.get(k)
            if e is None:
                touched[k] = [r, 0, w]
            else:
                e[2] += w
        keys = list(touched)
        f = self._multiplicity
        out = DiffBatch()
        for k, old, (row, da, db) in zip(keys, table.get_many(keys), touched.values(), strict=True):
            if not da and not db:
                continue
            if old is None:
                rep, a, b = row, 0, 0
            else:
                rep, a, b = pickle.loads(old)
            before = f(a, b)
            a += da
            b += db
            if a or b:
                table.put(k, pickle.dumps((rep, a, b), 5))
            elif old is not None:
                table.delete(k)
            change = f(a, b) - before
            if change:
                out.rows.append(rep)
                out.weights.append(change)
        return out

    def describe(self) -> str:
        return f"SetOperation: {self.kind.upper().replace('_', ' ')}"
