"""ColumnarSemiJoinCollection: EXISTS / IN without a residual, computed on Arrow columns.

The same answer as ``SemiJoinCollection`` without a residual: every left row, with its own
multiplicity, while its key has right rows of a positive weight total (SQL equality; a NULL key
never matches). It is the columnar inner join (``ColumnarInnerJoinCollection``: one state entry
per join key holding both sides' rows as records) with another output: instead of the pairs, the
change of the left rows' membership, from the right side's weight total at each key before and
after the time. Its right input should hold the key columns only (the physical planner selects
them): the right rows of a key are then one record whose weight is the number of right rows, and
a key's entry costs the left rows plus that one record (TPC-H Q4: 3.8M late lines under 1.4M
order keys, each key's entry one record; before, the lines' DISTINCT keys were stored by a
distinct and again by an inner join).

Hot keys (``columnar.hot_join_keys``) go to the row arrangement with the left side tracked and no
pairs built; their left rows' membership changes come from it.
"""

from __future__ import annotations

import numpy as np

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.columnar_join import (
    ColumnarInnerJoinCollection,
    Side,
    key_totals,
)
from engine.dataflow.collections.join import describe_join
from engine.dataflow.collections.semi_join import membership_delta
from engine.dataflow.columnar.codec_columns import python_rows
from engine.dataflow.columnar.row_block import Rows


class ColumnarSemiJoinCollection(ColumnarInnerJoinCollection):
    """Key column indices per side, the Arrow type of every column of each side (no residual)."""

    hot_pairs = False

    @property
    def tracked_sides(self) -> tuple[bool, bool]:  # type: ignore[override]
        return True, False

    def describe(self) -> str:
        return describe_join(
            "SemiJoin (columnar)", self.left_key, self.right_key, None, self.description
        )

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        """The time's right rows are keys only: summed per key first (vectorized, for columnar
        batches), the join then encodes and groups one row per key (TPC-H Q4: ~2.5 lines an
        order key)."""
        left, right = deltas
        if right.columnar:
            right = right.consolidate()
        return super().process(time, [left, right])

    # -- the inner join's hooks ---------------------------------------------------------------------
    def _pairs(self, left: Side, right: Side, nk: int) -> DiffBatch:
        """The left rows whose output weight changed: a row counts while its key matches."""
        matched_old = key_totals(right.kid, right.old, nk)[left.kid] > 0
        matched_new = key_totals(right.kid, right.new, nk)[left.kid] > 0
        d = np.where(matched_new, left.new, 0) - np.where(matched_old, left.old, 0)
        at = np.flatnonzero(d)
        if not len(at):
            return DiffBatch()
        columns, nans = self.codecs[0].arrays(left.rows.take(at))
        if not nans:
            return DiffBatch.from_columns(columns, d[at])
        return DiffBatch(python_rows(columns, nans), d[at].tolist())

    def _right_side(
        self, stored: Rows, skid: np.ndarray, delta: Rows, dkid: np.ndarray, nk: int
    ) -> Side:
        """One right row per key, weighing the key's right rows: the stored one (this collection
        stores one per key) or else the key's first delta row; no rows compared."""
        ns = len(stored)
        rows = Rows.concat([stored, delta]) if ns else delta
        kid = np.concatenate([skid, dkid]) if ns else dkid
        w = np.ascontiguousarray(rows.rec["w"])  # aligned: ufunc.at is ~8x slower on the field
        old = np.zeros(nk, np.int64)
        np.add.at(old, kid[:ns], w[:ns])
        dw = np.zeros(nk, np.int64)
        np.add.at(dw, kid[ns:], w[ns:])
        n = len(kid)
        first = np.full(nk, n, np.int64)
        np.minimum.at(first, kid, np.arange(n))
        keys = np.flatnonzero(first < n)
        return Side(rows.take(first[keys]), keys, old[keys], dw[keys])

    def _hot_step(self, left: Rows, right: Rows) -> DiffBatch:
        step = self.hot.step(left, right)
        self.report_errors(step.errs)
        return membership_delta(step.left_rows, True)
