"""SemiJoinCollection: the left rows that have at least one matching right row (EXISTS, IN).

A left row is output with its own multiplicity, not multiplied by its number of matches, while
at least one right row has an equal key (SQL equality; a NULL key never matches) and passes the
residual. Without a residual only per-key weight totals of the right side are kept (the right
rows are not stored, and a left key's rows are read only when its total crosses zero); with one,
both sides are arranged and each left row keeps its match count. Residual errors are errs diffs
weighted like the (left, right) pair. It must not output a left row more than once per copy.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.join import KeyedJoinCollection, describe_join
from engine.dataflow.errs import BatchFn
from engine.dataflow.state.arrangement import DeltaJoin, KeyMatch, RowState
from engine.dataflow.state.store import StateStore


def membership_delta(states: list[RowState], want_matched: bool) -> DiffBatch:
    """The change of each row's contribution when a row is output iff matched == ``want_matched``."""
    out = DiffBatch()
    for s in states:
        d = (s.new if s.matched_new == want_matched else 0) - (
            s.old if s.matched_old == want_matched else 0
        )
        if d:
            out.rows.append(s.row)
            out.weights.append(d)
    return out


class SemiJoinCollection(KeyedJoinCollection):
    def __init__(
        self,
        left_key: Sequence[int],
        right_key: Sequence[int],
        residual: BatchFn | None = None,
        description: str = "",
    ) -> None:
        super().__init__(left_key, right_key, residual, description)
        self._arr: DeltaJoin | KeyMatch | None = None

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        if self.residual is None:
            self._arr = KeyMatch(self.table, self.left_key, self.right_key)
        else:
            self._arr = DeltaJoin(
                self.table,
                self.left_key,
                self.right_key,
                self.residual,
                track_left=True,
                pairs=False,
            )

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        step = self._arr.step(deltas[0], deltas[1])
        self.report_errors(step.errs)
        return membership_delta(step.left_rows, True)

    def describe(self) -> str:
        return describe_join(
            "SemiJoin", self.left_key, self.right_key, self.residual, self.description
        )
