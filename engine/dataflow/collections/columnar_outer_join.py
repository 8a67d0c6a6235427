"""ColumnarOuterJoinCollection: LEFT, RIGHT and FULL outer equi-joins on Arrow columns.

The same answer as ``OuterJoinCollection`` without a residual: the inner join's pairs
(``ColumnarInnerJoinCollection``, whose one state entry per join key holds both sides' rows),
plus every row of a padded side whose key has no row on the other side, padded with NULLs for
the other side's columns, with the row's own multiplicity. Because a key's entry holds both sides,
the rows of a key touched in a time are all at hand: a row's "no match" contribution before and
after the time follows from the other side's weight total at its key (old and new), one
vectorized pass, no per-row state. Delta rows with a NULL in a key column never match: on a
padded side they pass through padded, on the other they vanish; neither is stored. Hot keys (the
inner join's row arrangement) track the other side's total per key there (``HotKeys``).

A residual (an ON condition over both sides) makes a match depend on the pair, not the key: the
physical planner gives such a join to the row ``OuterJoinCollection``, which counts matches per
row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.columnar_join import (
    ColumnarInnerJoinCollection,
    Side,
    Unkeyed,
    key_totals,
)
from engine.dataflow.collections.join import describe_join
from engine.dataflow.collections.outer_join import never_padded_input, unmatched_delta
from engine.dataflow.columnar.codec_columns import python_rows
from engine.dataflow.columnar.row_block import Rows

JoinKind = Literal["left", "right", "full"]


class ColumnarOuterJoinCollection(ColumnarInnerJoinCollection):
    """The join ``kind``, key column indices per side, the Arrow type of every column per side."""

    def __init__(
        self,
        kind: JoinKind,
        left_key: Sequence[int],
        right_key: Sequence[int],
        left_types: Sequence[pa.DataType],
        right_types: Sequence[pa.DataType],
        description: str = "",
        cache_bytes: int = 64 << 20,
    ) -> None:
        if kind not in ("left", "right", "full"):
            raise ValueError(f"outer join kind must be 'left', 'right' or 'full', got {kind!r}")
        self.kind = kind
        super().__init__(
            left_key, right_key, left_types, right_types, None, description, cache_bytes
        )
        self._pads = ((None,) * len(left_types), (None,) * len(right_types))

    @property
    def padded_sides(self) -> tuple[bool, bool]:  # type: ignore[override]
        return self.kind != "right", self.kind != "left"

    @property
    def read_first_input(self) -> int | None:
        return never_padded_input(self.kind)

    def describe(self) -> str:
        title = f"{self.kind.capitalize()}OuterJoin (columnar)"
        return describe_join(title, self.left_key, self.right_key, None, self.description)

    # -- the inner join's hooks ---------------------------------------------------------------------
    def _null_keys(self, left: Unkeyed | None, right: Unkeyed | None) -> list[DiffBatch]:
        out = []
        for side, rows in enumerate((left, right)):
            if rows is not None and self.padded_sides[side]:
                out.append(self._padded(side, rows.columns, rows.nans, rows.weights))
        return out

    def _unmatched(self, left: Side, right: Side, nk: int) -> list[DiffBatch]:
        out = []
        for side, (rows, other) in enumerate(((left, right), (right, left))):
            if self.padded_sides[side]:
                matched_old = key_totals(other.kid, other.old, nk)[rows.kid] > 0
                matched_new = key_totals(other.kid, other.new, nk)[rows.kid] > 0
                d = np.where(matched_new, 0, rows.new) - np.where(matched_old, 0, rows.old)
                at = np.flatnonzero(d)
                if len(at):
                    cols, nans = self.codecs[side].arrays(rows.rows.take(at))
                    out.append(self._padded(side, cols, nans, d[at]))
        return out

    def _hot_step(self, left: Rows, right: Rows) -> DiffBatch:
        step = self.hot.step(left, right)
        self.report_errors(step.errs)
        out = step.pairs
        pad_left, pad_right = self._pads
        if self.padded_sides[0]:
            unmatched_delta(step.left_rows, out, (), pad_right)
        if self.padded_sides[1]:
            unmatched_delta(step.right_rows, out, pad_left, ())
        return out

    def _padded(
        self, side: int, columns: list[pa.Array], nans: dict[int, np.ndarray], w: np.ndarray
    ) -> DiffBatch:
        """Rows of ``side`` (as columns, numeric NaN masks) with NULLs for the other side."""
        n = len(w)
        pad = [pa.nulls(n, t) for t in self.codecs[1 - side].types]
        if side == 0:
            columns = columns + pad
        else:
            columns = pad + columns
            nans = {len(pad) + i: m for i, m in nans.items()}
        if not nans:
            return DiffBatch.from_columns(columns, w)
        return DiffBatch(python_rows(columns, nans), w.tolist())
