"""``diff_copy``'s pure parts: rows repeated by weight in bounded chunks, and row selection."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

from engine.postgres.diff_copy import repeated_chunks, take


def test_repeated_chunks_are_the_repeat_in_bounded_pieces():
    rnd = random.Random(4)
    for _ in range(300):
        n = rnd.randrange(0, 12)
        positions = np.array(sorted(rnd.sample(range(100), n)), dtype=np.int64)
        counts = np.array([rnd.choice([1, 1, 2, 3, 17, 40]) for _ in range(n)], dtype=np.int64)
        size = rnd.randrange(1, 20)
        chunks = list(repeated_chunks(positions, counts, size))
        assert all(0 < len(c) <= size for c in chunks)
        joined = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
        assert joined.tolist() == np.repeat(positions, counts).tolist()


def test_take_slices_consecutive_rows_and_gathers_others():
    column = pa.array([10, 11, None, 13, 14])
    assert take(column, np.array([1, 2, 3])).to_pylist() == [11, None, 13]
    assert take(column, np.array([1, 2, 3])).offset == 1  # a slice, not a copy
    assert take(column, np.array([4, 0, 0])).to_pylist() == [14, 10, 10]
    assert take(column, np.array([], dtype=np.int64)).to_pylist() == []
    assert take(["a", "b", "c"], np.array([2, 0])) == ["c", "a"]
