"""Hot keys of the columnar outer and semi joins: keys with many rows move to the row join's
arrangement.

The columnar join keeps all rows of a join key (both sides) in one state entry, read and
rewritten whole whenever the key changes: cheap for the keys of a key/foreign-key join (a few rows
each), ruinous for a low-cardinality key (60,000 customers under one nation key would be rewritten
for every change to one of them). The inner join keeps such keys' rows column-wise, one entry per
row (``columnar.hot_rows``); the outer and semi joins, which count each row's matches, hand them
to ``DeltaJoin``, the row join's arrangement, in their own column family (``<name>.hot``), which
keeps a big side of a key in one entry per row and tracks the padded sides: it also keeps each hot
key's weight total of the other side (``step`` says which rows gained or lost their last match); a
semi join needs those rows only, not the pairs (``pairs=False``). The columnar entry of such a key
becomes the marker ``HOT``; from then on the key's changes go the row way (as tuples). A key stays
hot once it was: moving back would rewrite its rows again for little gain. An inner join's state
written before ``columnar.hot_rows`` existed has its hot keys here too, and they are joined here.

``HotKeys`` converts the hot keys' rows between the two forms and runs the two row-join steps of a
time: ``pairs``/``step`` for the changes to keys that were already hot, ``promote`` for keys that
become hot in this time (their rows after the time are loaded into the arrangement without output:
the columnar step already emitted the time's pairs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.dataflow.batch import DiffBatch
from engine.dataflow.columnar.codec_columns import python_rows
from engine.dataflow.columnar.row_block import RowCodec, Rows
from engine.dataflow.errs import BatchFn
from engine.dataflow.state.arrangement import DeltaJoin, JoinStep
from engine.dataflow.state.store import StateTable

#: the columnar entry of a hot key (a packed entry always holds a 12-byte header)
HOT = b"hot"


def tuples(codec: RowCodec, rows: Rows, weights: np.ndarray) -> DiffBatch:
    """``rows`` as tuple diffs with ``weights`` (engine value conventions: shared NaNs...)."""
    if not len(rows):
        return DiffBatch()
    cols, nans = codec.arrays(rows)
    return DiffBatch(python_rows(cols, nans), weights.tolist())


class HotKeys:
    """The row-join arrangement of a columnar join's hot keys (``table``: its column family)."""

    def __init__(
        self,
        table: StateTable,
        codecs: tuple[RowCodec, RowCodec],
        left_key: Sequence[int],
        right_key: Sequence[int],
        residual: BatchFn | None,
        track_left: bool = False,
        track_right: bool = False,
        pairs: bool = True,
    ) -> None:
        self.codecs = codecs
        tracks = {"track_left": track_left, "track_right": track_right}
        self._join = DeltaJoin(table, left_key, right_key, residual, pairs=pairs, **tracks)
        self._load = DeltaJoin(table, left_key, right_key, None, pairs=False, **tracks)

    def pairs(self, left: Rows, right: Rows) -> tuple[DiffBatch, DiffBatch]:
        """The time's pairs and errs for delta rows of hot keys (weights in the records)."""
        step = self.step(left, right)
        return step.pairs, step.errs

    def step(self, left: Rows, right: Rows) -> JoinStep:
        """The row join's whole step for delta rows of hot keys: pairs, errs and, on the tracked
        sides, the rows whose match state may have changed."""
        lc, rc = self.codecs
        return self._join.step(tuples(lc, left, left.rec["w"]), tuples(rc, right, right.rec["w"]))

    def promote(self, left: Rows, lw: np.ndarray, right: Rows, rw: np.ndarray) -> None:
        """Load the rows (after the time, weights ``lw``/``rw``) of keys that become hot."""
        lc, rc = self.codecs
        self._load.step(tuples(lc, left, lw), tuples(rc, right, rw))
