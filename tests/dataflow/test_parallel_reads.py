"""Point reads split over threads return every key's committed value in the keys' order."""

from __future__ import annotations

import random

from engine.dataflow.state import parallel_reads
from engine.dataflow.state.store import _PARALLEL_READ_KEYS, StateStore


def test_parallel_get_many_keeps_order_and_misses(tmp_path):
    rng = random.Random(3)
    with StateStore(tmp_path / "s") as store:
        table = store.table("t", "point")
        present = {f"k{i:06d}".encode(): str(i * 7).encode() for i in range(0, 20_000, 2)}
        table.put_many(list(present), list(present.values()))
        store.commit(1)
        keys = [f"k{rng.randrange(20_000):06d}".encode() for _ in range(3 * _PARALLEL_READ_KEYS)]
        keys.sort()
        keys.insert(len(keys) // 2, b"absent")  # one unsorted miss in the middle
        got = table.get_many(keys)
        assert got == [present.get(k) for k in keys]
        assert any(v is None for v in got) and any(v is not None for v in got)


def test_slices_cover_every_key():
    calls = []

    def read(keys):
        calls.append(len(keys))
        return [k * 2 for k in keys]

    keys = list(range(10_001))
    assert parallel_reads.get_many(read, keys) == [k * 2 for k in keys]
    assert sum(calls) == len(keys)
