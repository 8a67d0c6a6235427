"""InnerJoinCollection: the equi-join of two inputs on multi-column keys, with an optional residual.

Output rows are ``left_row + right_row`` with weight ``wl * wr`` for every pair whose key columns
are equal under SQL equality (a NULL in any key column never matches) and whose residual predicate
(a batch function over the concatenated rows) is exactly True. Both inputs are arranged by key in
the collection's column family (``state.arrangement``): one entry per key holding both sides'
rows, read with one ``get_many`` per time (hence the "point" tuning: bloom filters), and a side
that grows hot moves to one entry per row, so a single-row change to a key holding 100k rows stays
a bounded read and one write. Residual errors become errs diffs weighted like the pair, so they
retract with it. It must not keep rows in memory across times, and it must not use pickle or repr
of arbitrary objects in state keys (``keycodec`` builds them).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.errs import BatchFn
from engine.dataflow.state.arrangement import DeltaJoin
from engine.dataflow.state.store import StateStore


def check_keys(left_key: Sequence[int], right_key: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """The key column lists as tuples; raises ValueError when their lengths differ."""
    lk, rk = tuple(left_key), tuple(right_key)
    if len(lk) != len(rk):
        raise ValueError(f"join keys differ in length: left{list(lk)} vs right{list(rk)}")
    return lk, rk


def describe_join(
    title: str, left_key: Sequence[int], right_key: Sequence[int], residual: object, note: str
) -> str:
    """``"<title>: left[0,2] = right[1,0]"`` plus the residual, for EXPLAIN."""
    conds = []
    if left_key:
        lk, rk = ",".join(map(str, left_key)), ",".join(map(str, right_key))
        conds.append(f"left[{lk}] = right[{rk}]")
    if residual is not None:
        conds.append(note or "<residual>")
    return f"{title}: {' AND '.join(conds)}" if conds else title


class KeyedJoinCollection(StatefulCollection):
    """What every equi-join collection shares: checked key columns, an optional residual
    predicate over the concatenated row, and a description for EXPLAIN."""

    arity = 2
    tuning = "point"

    def __init__(
        self,
        left_key: Sequence[int],
        right_key: Sequence[int],
        residual: BatchFn | None = None,
        description: str = "",
    ) -> None:
        super().__init__()
        self.left_key, self.right_key = check_keys(left_key, right_key)
        self.residual = residual
        self.description = description


class InnerJoinCollection(KeyedJoinCollection):
    def __init__(
        self,
        left_key: Sequence[int],
        right_key: Sequence[int],
        residual: BatchFn | None = None,
        description: str = "",
    ) -> None:
        super().__init__(left_key, right_key, residual, description)
        self._join: DeltaJoin | None = None

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        self._join = DeltaJoin(self.table, self.left_key, self.right_key, self.residual)

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        step = self._join.step(deltas[0], deltas[1])
        self.report_errors(step.errs)
        return step.pairs

    def describe(self) -> str:
        return describe_join(
            "InnerJoin", self.left_key, self.right_key, self.residual, self.description
        )
