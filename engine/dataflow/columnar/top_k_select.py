"""Which positions of each partition a ``row_number`` top-k selects, for many partitions at once.

Rows come ordered by partition, then ORDER BY position; a row with count c covers c positions
(a count <= 0 covers none). ``live_starts`` gives the number of positions before each row within
its partition, ``selected`` how many of a row's positions fall in [lo, hi), ``ranked`` each
selected position as (row, row_number). Pure numpy; checked against a loop in
``tests/dataflow/columnar/test_columnar_top_k.py``. This module must not know about state.
"""

from __future__ import annotations

import numpy as np


def live_starts(part: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Positions before each row in its partition (``part`` sorted, rows in position order).

    >>> live_starts(np.array([0, 0, 0, 1, 1]), np.array([2, -1, 1, 1, 3])).tolist()
    [0, 2, 2, 0, 1]
    """
    live = np.maximum(counts, 0).astype(np.int64)
    before = np.cumsum(live) - live
    n = len(part)
    if not n:
        return before
    first = np.ones(n, dtype=bool)
    first[1:] = part[1:] != part[:-1]
    segment = np.cumsum(first) - 1
    return before - before[np.flatnonzero(first)][segment]


def selected(starts: np.ndarray, counts: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """How many of each row's positions lie in [lo, hi).

    >>> selected(np.array([0, 2, 3]), np.array([2, 1, 4]), 1, 4).tolist()
    [1, 1, 1]
    """
    end = starts + np.maximum(counts, 0)
    return np.maximum(np.minimum(end, hi) - np.maximum(starts, lo), 0)


def ranked(starts: np.ndarray, chosen: np.ndarray, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """Each selected position as (row index, its row_number = position + 1).

    >>> rows, ranks = ranked(np.array([0, 2]), np.array([1, 1]), 1)
    >>> rows.tolist(), ranks.tolist()
    ([0, 1], [2, 3])
    """
    total = int(chosen.sum())
    rows = np.repeat(np.arange(len(chosen), dtype=np.int64), chosen)
    before = np.cumsum(chosen) - chosen
    within = np.arange(total, dtype=np.int64) - np.repeat(before, chosen)
    return rows, np.repeat(np.maximum(starts, lo), chosen) + within + 1


def live_totals(part: np.ndarray, counts: np.ndarray, nparts: int) -> np.ndarray:
    """Live positions per partition."""
    live = np.maximum(counts, 0).astype(np.float64)  # exact below 2**53 positions
    return np.bincount(part, weights=live, minlength=nparts).astype(np.int64)
