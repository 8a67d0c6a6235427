"""StateStore.fresh_reads: tables filled from empty skip the reads of keys never written to them,
and every read still returns the committed state (against a dict model)."""

from __future__ import annotations

import random

import numpy as np

from engine.dataflow.state import written_keys
from engine.dataflow.state.store import StateStore
from engine.dataflow.state.written_keys import WrittenKeys


def test_written_keys_never_says_absent_for_a_written_key():
    w = WrittenKeys()
    keys = [i.to_bytes(8, "big") + b"k" for i in range(50_000)]
    assert not w.maybe(keys[:5]).any() and not w.may_hold(keys[0])
    w.add(keys[:20_000])  # a batch (numpy)
    for k in keys[20_000:20_005]:  # one by one (Python)
        w.add([k])
    for k in keys[20_005:20_010]:
        w.add_one(k)
    assert w.maybe(keys[:20_010]).all()
    assert all(w.may_hold(k) for k in keys[:20_010:97])
    # the rest were never written: almost all of them are known absent
    assert w.maybe(keys[20_010:]).mean() < 0.01


def test_only_tables_empty_at_the_start_are_filtered(state_dir):
    with StateStore(state_dir) as store:
        full, empty = store.table("full"), store.table("empty")
        full.put(b"a", b"1")
        store.commit(1)
        with store.fresh_reads():
            assert full._written is None and empty._written is not None
            late = store.table("late")  # created inside: empty, filtered
            assert late._written is not None
            assert full.get_many([b"a", b"b"]) == [b"1", None] and full.get(b"a") == b"1"
            empty.put_many([b"x", b"y"], [b"2", b"3"])
            late.put(b"z", b"4")
            assert empty.get_many([b"x", b"q"]) == [None, None]  # staged: not committed yet
            store.commit(2)
            assert empty.get_many([b"q", b"y", b"x"]) == [None, b"3", b"2"]
            assert late.get(b"z") == b"4" and late.get(b"w") is None
        assert empty._written is None and late._written is None
        assert empty.get(b"x") == b"2"


def test_staged_writes_at_the_start_turn_the_filters_off(state_dir):
    with StateStore(state_dir) as store:
        t = store.table("t")
        t.put(b"k", b"v")  # staged before: a filter would not know it
        with store.fresh_reads():
            assert t._written is None
            store.commit(1)
            assert t.get(b"k") == b"v"


def test_random_writes_read_as_the_model_says(state_dir, monkeypatch):
    # a small bitmap: many false "maybe"s and some batches entirely absent, both paths taken
    monkeypatch.setattr(written_keys, "_BITS", 1 << 12)
    monkeypatch.setattr(written_keys, "_MASK", (1 << 12) - 1)
    rng = random.Random(5)
    committed: dict[bytes, bytes] = {}
    with StateStore(state_dir) as store:
        t = store.table("t")
        with store.fresh_reads():
            for time in range(1, 60):
                staged = dict(committed)
                keys = [rng.randrange(3000).to_bytes(4, "big") for _ in range(rng.randrange(80))]
                puts = {k: rng.randbytes(3) for k in keys}
                if rng.random() < 0.5:
                    t.put_many(list(puts), list(puts.values()))
                else:
                    for k, v in puts.items():
                        t.put(k, v)
                staged.update(puts)
                dead = [k for k in list(committed)[:: rng.randrange(3, 9)] if k not in puts]
                t.delete_many(dead)
                for k in dead:
                    staged.pop(k)
                if rng.random() < 0.2:
                    store.rollback()
                else:
                    store.commit(time)
                    committed = staged
                probe = [rng.randrange(3000).to_bytes(4, "big") for _ in range(300)]
                assert t.get_many(probe) == [committed.get(k) for k in probe]
                assert [t.get(k) for k in probe[:20]] == [committed.get(k) for k in probe[:20]]
            assert t._written is not None and np.any(t._written.maybe(list(committed)))
