"""AntiJoinCollection: the left rows with no matching right row (NOT EXISTS, and NOT IN).

A left row is output with its multiplicity while no right row has an equal key (SQL equality)
and passes the residual; rows with a NULL in a key column never match, so they always pass
(NOT EXISTS semantics). ``null_aware=True`` is SQL ``x NOT IN (SELECT y ...)`` on one key
column: if the right side is empty every left row passes (even a NULL x); else if the right side
holds a NULL y no row passes; else the rows with a non-NULL x and no match pass. The null-aware
form keeps global counts of the right rows and of its NULLs, and when the right side changes
between those three modes it re-reads every left row (the whole answer changes then). Without a
residual only per-key weight totals of the right side are stored. It must not be used null-aware
with several key columns or with a residual (plan correlated NOT IN otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.join import KeyedJoinCollection, describe_join
from engine.dataflow.collections.semi_join import membership_delta
from engine.dataflow.errs import BatchFn
from engine.dataflow.state.arrangement import COUNTERS, DeltaJoin, KeyMatch, WeightCounters
from engine.dataflow.state.store import StateStore

# the right side's state, as far as NOT IN cares
_EMPTY, _HAS_NULL, _NORMAL = "empty", "has-null", "normal"
_ROWS, _NULLS = b"rows", b"nulls"


def _mode(rows: int, nulls: int) -> str:
    if rows == 0:
        return _EMPTY
    return _HAS_NULL if nulls else _NORMAL


class AntiJoinCollection(KeyedJoinCollection):
    def __init__(
        self,
        left_key: Sequence[int],
        right_key: Sequence[int],
        residual: BatchFn | None = None,
        null_aware: bool = False,
        description: str = "",
    ) -> None:
        super().__init__(left_key, right_key, residual, description)
        if null_aware and len(self.left_key) != 1:
            raise ValueError(
                f"a null-aware anti join (NOT IN) compares one column, got left{list(self.left_key)}"
                f" = right{list(self.right_key)}: use NOT EXISTS semantics (null_aware=False)"
            )
        if null_aware and residual is not None:
            raise ValueError(
                "a null-aware anti join (NOT IN) takes no residual: plan a correlated NOT IN as a "
                "NOT EXISTS with the NULL checks made explicit"
            )
        self.null_aware = null_aware
        self._arr: DeltaJoin | KeyMatch | None = None
        #: a population reads the right input first (``population._read_order``): left rows
        #: then come out only when unmatched, instead of coming out and being retracted
        self.read_first_input = 1
        self._counters: WeightCounters | None = None

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        if self.residual is not None:
            self._arr = DeltaJoin(
                self.table,
                self.left_key,
                self.right_key,
                self.residual,
                track_left=True,
                pairs=False,
            )
        else:
            self._arr = KeyMatch(self.table, self.left_key, self.right_key, self.null_aware)
        if self.null_aware:
            self._counters = WeightCounters(self.table, COUNTERS)

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        if self.null_aware:
            return self._process_not_in(deltas[0], deltas[1])
        step = self._arr.step(deltas[0], deltas[1])
        self.report_errors(step.errs)
        out = membership_delta(step.left_rows, False)
        out.rows.extend(step.left_nulls.rows)  # a NULL key matches nothing: always passes
        out.weights.extend(step.left_nulls.weights)
        return out

    def _process_not_in(self, d_left: DiffBatch, d_right: DiffBatch) -> DiffBatch:
        (x,) = self.left_key
        rows_old, nulls_old = self._counters.read([_ROWS, _NULLS])
        rows_new = rows_old + sum(d_right.weights)
        nulls_new = nulls_old + sum(
            w
            for r, w in zip(d_right.rows, d_right.weights, strict=True)
            if r[self.right_key[0]] is None
        )
        mode_old, mode_new = _mode(rows_old, nulls_old), _mode(rows_new, nulls_new)
        self._counters.stage(_ROWS, rows_old, rows_new)
        self._counters.stage(_NULLS, nulls_old, nulls_new)
        step = self._arr.step(d_left, d_right, rescan_all=mode_old != mode_new)
        out = DiffBatch()
        for s in step.left_rows:
            d = 0
            if s.new and (
                mode_new == _EMPTY
                or (mode_new == _NORMAL and not s.matched_new and s.row[x] is not None)
            ):
                d += s.new
            if s.old and (
                mode_old == _EMPTY
                or (mode_old == _NORMAL and not s.matched_old and s.row[x] is not None)
            ):
                d -= s.old
            if d:
                out.rows.append(s.row)
                out.weights.append(d)
        return out

    def describe(self) -> str:
        if self.null_aware:
            return f"NullAwareAntiJoin: left[{self.left_key[0]}] NOT IN right[{self.right_key[0]}]"
        return describe_join(
            "AntiJoin", self.left_key, self.right_key, self.residual, self.description
        )
