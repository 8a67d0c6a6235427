"""pg_numeric_div_many against pg_numeric_div (itself checked against Postgres' numeric_div)."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from engine.numeric import pg_numeric_div, pg_numeric_div_many


@pytest.mark.parametrize("seed", range(20))
def test_many_equals_one_by_one(seed):
    rng = random.Random(seed)
    scale = rng.choice([0, 1, 2, 4, 7])
    nums = [
        rng.choice([0, 1, -1, 9999, 10000, 10**17 - 1, -(10**17), 10**20])
        if rng.random() < 0.2
        else rng.randint(-(10 ** rng.randint(1, 18)), 10 ** rng.randint(1, 18))
        for _ in range(200)
    ]
    dens = [rng.choice([1, 2, 3, 7, 9999, 10000, 10001, 123456789]) for _ in nums]
    got = pg_numeric_div_many(nums, scale, dens)
    want = [pg_numeric_div(Decimal(n).scaleb(-scale), d) for n, d in zip(nums, dens, strict=True)]
    assert [str(g) for g in got] == [str(w) for w in want]


@pytest.mark.parametrize("seed", range(20))
def test_text_array_equals_one_by_one(seed):
    import numpy as np

    from engine.numeric import pg_numeric_div_text_array

    rng = random.Random(seed)
    scale = rng.choice([0, 2, 4])
    nums = [rng.randint(-(10 ** rng.randint(1, 18)), 10 ** rng.randint(1, 18)) for _ in range(300)]
    nums += [0, 1, -1, 2**63 - 1, -(2**63) + 1]
    pool = [1, 2, 3, 7, 9999, 10000, 10001, 123456789] + ([10**12] if seed % 2 else [])
    dens = [rng.choice(pool) for _ in nums]  # 10**12: the per-value fallback
    got = pg_numeric_div_text_array(np.array(nums), scale, np.array(dens)).to_pylist()
    want = [pg_numeric_div(Decimal(n).scaleb(-scale), d) for n, d in zip(nums, dens, strict=True)]
    assert [Decimal(g) for g in got] == want
    assert [str(Decimal(g)) for g in got] == [str(w) for w in want]


def test_text_array_of_no_values_is_empty():
    """A batch whose groups all vanished asks for no quotients (CI failed on this once)."""
    import numpy as np

    from engine.numeric import pg_numeric_div_text_array

    empty = np.array([], dtype=np.int64)
    assert pg_numeric_div_text_array(empty, 2, empty).to_pylist() == []
