"""GroupTable reads back what was stored, through its cache's evictions, frees and regrowth."""

from __future__ import annotations

import contextlib
import random

import numpy as np
import pytest

from engine.dataflow.columnar.group_table import GroupTable
from engine.dataflow.state import hit_rate_gate
from engine.dataflow.state.store import StateStore

DTYPE = np.dtype([("count", "<i8"), ("sum", "<i8")])


@pytest.mark.parametrize("judged", [False, True], ids=["", "judged often"])
@pytest.mark.parametrize("filling", [False, True], ids=["cached", "filled from empty"])
def test_records_round_trip_through_eviction_deletes_and_rollback(
    tmp_path, filling, judged, monkeypatch
):
    """Every read is the model's, through evictions, deletes, rollbacks, population, and (judged
    often) the cache stepping aside, empty, when it finds too few groups, and coming back."""
    if judged:
        monkeypatch.setattr(hit_rate_gate, "WINDOW_KEYS", 500)
        monkeypatch.setattr(hit_rate_gate, "BYPASS_KEYS", 1500)
    asides = []
    rng = random.Random(5)
    with StateStore(tmp_path / "s") as store:
        groups = GroupTable(store.table("g", "point"), DTYPE, cache_bytes=0)  # 1,024 groups
        fill = store.fresh_reads() if filling else contextlib.nullcontext()
        fill.__enter__()
        assert groups.table.filling == filling
        model: dict[bytes, tuple[int, int]] = {}
        for t in range(1, 40):
            if t == 25:  # population over: the same table and cache go on as usual
                fill.__exit__(None, None, None)
            # batches of new groups (population over a source clustered by the key) and of
            # groups seen before
            fresh = t % 3 == 0
            n = rng.choice([5, 400, 900])
            keys = list(
                {b"n%03d%04d" % (t, i) for i in range(n)}
                if fresh
                else {b"k%05d" % rng.randrange(3000) for _ in range(n)}
            )
            records, present = groups.fetch(keys)
            asides.append(groups.gate.aside)
            assert not (groups.gate.aside and groups.cached_groups)  # aside: it holds nothing
            assert present.tolist() == [k in model for k in keys]
            assert [tuple(r) for r in records.tolist()] == [model.get(k, (0, 0)) for k in keys]
            records["count"] += 1
            records["sum"] += np.arange(len(keys))
            alive = np.array([rng.random() > 0.2 for _ in keys])
            groups.store(keys, records, alive)
            if t % 7 == 0:  # a failed time: discarded, the cache forgets it
                store.rollback()
                continue
            store.commit(t)
            for k, r, a in zip(keys, records.tolist(), alive.tolist(), strict=True):
                if a:
                    model[k] = tuple(r)
                else:
                    model.pop(k, None)
            assert groups.cached_groups <= 1024 + len(keys)
        everything = sorted(model)
        records, present = groups.fetch(everything)
        assert present.all()
        assert [tuple(r) for r in records.tolist()] == [model[k] for k in everything]
        assert (any(asides) and not all(asides)) == judged  # aside and back, when judged often


def test_a_batch_past_the_slots_grows_them_at_once(tmp_path):
    """2,500 new groups at once in a cache of 1,024 slots, then groups freed and reused: every
    record read back from the cache is the one stored."""
    with StateStore(tmp_path / "s") as store:
        groups = GroupTable(store.table("g", "point"), DTYPE, cache_bytes=0)
        keys = [b"g%05d" % i for i in range(2500)]
        records, _ = groups.fetch(keys)
        records["count"], records["sum"] = 1, np.arange(2500)
        groups.store(keys, records, np.ones(2500, bool))
        store.commit(1)
        assert groups.cached_groups == 2500
        dead = np.arange(2500) % 3 == 0  # their slots are freed, then taken by new groups
        records["count"] += 1
        groups.fetch(keys)
        groups.store(keys, records, ~dead)
        store.commit(2)
        fresh = [b"h%05d" % i for i in range(900)]
        new, present = groups.fetch(fresh)
        assert not present.any()
        new["count"], new["sum"] = 7, -np.arange(900)
        groups.store(fresh, new, np.ones(900, bool))
        store.commit(3)
        live = [k for k, d in zip(keys, dead.tolist(), strict=True) if not d]
        got, present = groups.fetch(live + fresh)
        assert present.all()
        want = [(2, int(k[1:])) for k in live] + [(7, -i) for i in range(900)]
        assert [tuple(r) for r in got.tolist()] == want
