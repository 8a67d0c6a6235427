"""load_new_keys writes exactly what the delta join writes into an empty arrangement, and then
serves the delta join as its own state did."""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.columnar.key_reprs import encoded_keys
from engine.dataflow.nan import loads
from engine.dataflow.state.arrangement import DeltaJoin
from engine.dataflow.state.arrangement_load import load_new_keys
from engine.dataflow.state.store import StateStore


def _rows(rng: random.Random, n: int) -> DiffBatch:
    """(key, amount, label) rows: few keys (some far past HOT_ROWS rows, some NULL), amounts
    spelled two ways (1.5 and 1.50 are one row under SQL equality), weights that cancel."""
    batch = DiffBatch()
    for _ in range(n):
        key = None if rng.random() < 0.03 else rng.choice([1, 2, 3, 4, Decimal("5.0"), 5])
        cents = rng.randrange(40)
        amount = Decimal(cents) / 10 if rng.random() < 0.5 else Decimal(f"{cents / 10:.2f}")
        batch.rows.append((key, amount, rng.choice("ab")))
        batch.weights.append(rng.choice([1, 1, 2, -1]))
    return batch


def _entries(store: StateStore, name: str) -> dict[bytes, object]:
    return {k: loads(v) for k, v in store.table(name).scan_all()}


@pytest.mark.parametrize("given_keys", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_loading_new_keys_equals_the_delta_join_over_empty_state(tmp_path, seed, given_keys):
    """``given_keys``: the rows' encode_key bytes come with them (as HotKeys.promote gives them,
    made column-wise)."""
    rng = random.Random(seed)
    left, right = _rows(rng, rng.choice([20, 400])), _rows(rng, rng.choice([3, 300]))
    keys = (_keys(left), _keys(right)) if given_keys else None
    with StateStore(tmp_path / "state") as store:
        DeltaJoin(store.table("by_join"), [0], [0], pairs=False).step(left, right)
        assert load_new_keys(store.table("by_load"), [0], [0], left, right, keys)
        store.commit(1)
        expected, got = _entries(store, "by_join"), _entries(store, "by_load")
        assert got == expected
        if max(len(left), len(right)) >= 300:  # ~45 distinct rows a key: entries of their own
            assert any(
                isinstance(v, tuple) and len(v) == 2 and int in (type(v[0]), type(v[1]))
                for v in got.values()
            )

        # the loaded state serves the next time's delta join as the joined state does
        delta_l, delta_r = _rows(rng, 50), _rows(rng, 50)
        out = [
            _net(DeltaJoin(store.table(n), [0], [0]).step(delta_l, delta_r).pairs)
            for n in ("by_join", "by_load")
        ]
        assert out[0] == out[1] and out[0]


def _keys(batch: DiffBatch) -> list[bytes]:
    """Each row's encode_key bytes, from its Arrow columns as HotKeys.promote makes them."""
    columns = [
        pa.array([None if v is None else Decimal(v) for v in col], pa.decimal128(12, 2))
        if i < 2
        else pa.array(col, pa.string())
        for i, col in enumerate(zip(*batch.rows, strict=True))
    ]
    return encoded_keys(columns, {})


def _net(pairs: DiffBatch) -> Counter:
    net: Counter = Counter()
    for row, w in zip(pairs.rows, pairs.weights, strict=True):
        net[repr(row)] += w
    return Counter({row: w for row, w in net.items() if w})


def test_a_key_the_arrangement_holds_is_left_to_the_delta_join(tmp_path):
    rows = DiffBatch([(1, Decimal(1), "a")], [1])
    with StateStore(tmp_path / "state") as store:
        table = store.table("t")
        assert load_new_keys(table, [0], [0], rows, DiffBatch())
        store.commit(1)
        before = dict(table.scan_all())
        assert not load_new_keys(table, [0], [0], rows, DiffBatch())
        store.commit(2)
        assert dict(table.scan_all()) == before  # nothing staged
