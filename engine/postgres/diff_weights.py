"""``DiffWeights``: a batch's weights as the result sink splits them (retractions, insertions)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from engine.dataflow.batch import DiffBatch


class DiffWeights(NamedTuple):
    """A batch's weights: all, the positions of retractions and of insertions, and how many rows
    each side deletes and inserts."""

    w: np.ndarray
    gone: np.ndarray
    new: np.ndarray
    n_del: int
    n_ins: int

    @classmethod
    def of(cls, diffs: DiffBatch) -> DiffWeights:
        w = np.asarray(diffs.column_weights, dtype=np.int64)
        gone, new = np.flatnonzero(w < 0), np.flatnonzero(w > 0)
        return cls(w, gone, new, int(-w[gone].sum()), int(w[new].sum()))
