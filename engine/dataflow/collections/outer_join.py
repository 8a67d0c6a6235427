"""OuterJoinCollection: LEFT, RIGHT and FULL outer equi-joins, with an optional residual.

The output is the inner join plus, for every left (resp. right) row that has no match under key
equality AND the residual, that row padded with NULLs for the other side, with the row's own
multiplicity. As in Epsio it is a join plus an anti-join-like count: each tracked row knows
whether it has a match, from a match count stored in its entry when there is a residual (the
residual depends on both rows), or from a per-key weight total of the other side when there is
none (so a change to a hot key never rewrites that key's rows). Rows with a NULL in a key column
never match: they pass through padded, without being stored. It must not decide matches from the
key alone when a residual is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.join import KeyedJoinCollection, describe_join
from engine.dataflow.errs import BatchFn
from engine.dataflow.state.arrangement import DeltaJoin, RowState
from engine.dataflow.state.store import StateStore

JoinKind = Literal["left", "right", "full"]


def unmatched_delta(
    states: list[RowState], out: DiffBatch, pad_left: tuple, pad_right: tuple
) -> None:
    """Append to ``out`` the change of each row's "no match" contribution, padded."""
    rows, weights = out.rows, out.weights
    for s in states:
        d = (0 if s.matched_new else s.new) - (0 if s.matched_old else s.old)
        if d:
            rows.append(pad_left + s.row + pad_right)
            weights.append(d)


def never_padded_input(kind: str) -> int | None:
    """The input a population reads first (``population._read_order``) for an outer join of
    ``kind``: the side whose rows are never padded, so that the other side's rows find their
    matches when they arrive instead of coming out padded and being retracted (None: FULL)."""
    return {"left": 1, "right": 0}.get(kind)


class OuterJoinCollection(KeyedJoinCollection):
    def __init__(
        self,
        kind: JoinKind,
        left_key: Sequence[int],
        right_key: Sequence[int],
        left_arity: int,
        right_arity: int,
        residual: BatchFn | None = None,
        description: str = "",
    ) -> None:
        if kind not in ("left", "right", "full"):
            raise ValueError(f"outer join kind must be 'left', 'right' or 'full', got {kind!r}")
        super().__init__(left_key, right_key, residual, description)
        self.kind = kind
        self.left_arity = left_arity
        self.right_arity = right_arity
        self._left_pad = (None,) * left_arity
        self._right_pad = (None,) * right_arity
        self._join: DeltaJoin | None = None

    @property
    def read_first_input(self) -> int | None:
        return never_padded_input(self.kind)

    @property
    def pads_left(self) -> bool:
        """Whether unmatched left rows are output (LEFT and FULL)."""
        return self.kind != "right"

    @property
    def pads_right(self) -> bool:
        return self.kind != "left"

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        self._join = DeltaJoin(
            self.table,
            self.left_key,
            self.right_key,
            self.residual,
            track_left=self.pads_left,
            track_right=self.pads_right,
        )

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        step = self._join.step(deltas[0], deltas[1])
        self.report_errors(step.errs)
        out = step.pairs
        if self.pads_left:
            unmatched_delta(step.left_rows, out, (), self._right_pad)
            for r, w in step.left_nulls:
                out.rows.append(r + self._right_pad)
                out.weights.append(w)
        if self.pads_right:
            unmatched_delta(step.right_rows, out, self._left_pad, ())
            for r, w in step.right_nulls:
                out.rows.append(self._left_pad + r)
                out.weights.append(w)
        return out

    def describe(self) -> str:
        title = f"{self.kind.capitalize()}OuterJoin"
        return describe_join(title, self.left_key, self.right_key, self.residual, self.description)
