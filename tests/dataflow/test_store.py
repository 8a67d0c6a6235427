"""The state store's commit protocol: staged writes, atomic commit, rollback, reopen, lock."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine.dataflow.state.store import StateStore, prefix_successor
from engine.errors import StateError


def test_writes_are_invisible_until_commit_and_rollback_discards(state_dir):
    with StateStore(state_dir) as store:
        t = store.table("t")
        t.put(b"k", b"v")
        assert t.get(b"k") is None
        store.commit(1)
        assert t.get(b"k") == b"v" and store.committed_time == 1
        t.delete(b"k")
        store.rollback()
        store.commit(2)
        assert t.get(b"k") == b"v"


def test_state_and_time_survive_reopen(state_dir):
    with StateStore(state_dir) as store:
        store.table("a").put(b"x", b"1")
        store.table("b").put(b"y", b"2")
        store.commit(7)
    with StateStore(state_dir) as store:
        assert store.committed_time == 7
        assert store.table("a").get(b"x") == b"1"
        assert store.table("b").get_many([b"y", b"z"]) == [b"2", None]


def test_uncommitted_writes_are_lost_on_reopen(state_dir):
    store = StateStore(state_dir)
    store.table("a").put(b"x", b"1")
    store.close()
    with StateStore(state_dir) as store:
        assert store.table("a").get(b"x") is None and store.committed_time is None


def test_prefix_scans_forward_backward_and_delete_prefix(state_dir):
    with StateStore(state_dir) as store:
        t = store.table("t")
        for k in [b"a\x01", b"a\x02", b"a\xff", b"b\x00", b"a"]:
            t.put(k, k)
        store.commit(1)
        assert [k for k, _ in t.scan_prefix(b"a")] == [b"a", b"a\x01", b"a\x02", b"a\xff"]
        assert [k for k, _ in t.scan_prefix(b"a", reverse=True)] == [
            b"a\xff",
            b"a\x02",
            b"a\x01",
            b"a",
        ]
        t.delete_prefix(b"a")
        store.commit(2)
        assert [k for k, _ in t.scan_all()] == [b"b\x00"]


def test_prefix_successor():
    assert prefix_successor(b"ab") == b"ac"
    assert prefix_successor(b"a\xff") == b"b"
    assert prefix_successor(b"\xff\xff") is None


def test_time_cannot_go_back(state_dir):
    with StateStore(state_dir) as store:
        store.commit(5)
        with pytest.raises(StateError, match="after time 5"):
            store.commit(4)


def test_second_opener_gets_a_clear_error(state_dir):
    with StateStore(state_dir), pytest.raises(StateError, match="another incview process"):
        StateStore(state_dir)


def test_column_family_tuning_survives_reopen(state_dir):
    from engine.dataflow.state.store import _TUNING_KEY

    with StateStore(state_dir) as store:
        store.table("points", "point").put(b"k", b"v")
        store.table("ranges", "prefix")
        store.commit(1)
    probe = StateStore.__new__(StateStore)
    probe.path = state_dir
    assert probe._read_tunings() == {"points": "point", "ranges": "prefix"}
    with StateStore(state_dir) as store:
        assert store.table("points", "point").get(b"k") == b"v"
        assert store._db.get(_TUNING_KEY + b"points") == b"point"


def test_items_after_stops_at_the_prefix_end(tmp_path):
    """RocksDB's upper bound ends each scan at its prefix (rocksdict does not keep the bound alive
    with the iterator by itself: ``items_after`` does), however scans interleave and however the
    garbage collector runs."""
    import gc
    import itertools
    import random

    rng = random.Random(2)
    store = StateStore(tmp_path / "s")
    try:
        t = store.table("t")
        keys = sorted(
            {
                bytes([0, rng.randrange(40)]) + rng.randbytes(rng.randrange(0, 4))
                for _ in range(3000)
            }
        )
        t.put_many(keys, [b"v"] * len(keys))
        store.commit(1)
        for trial in range(400):
            p = bytes([0, rng.randrange(40)])
            a = t.items_after(p, p)
            other = t.items_after(bytes([0, rng.randrange(40)]), b"\x00")
            head = list(itertools.islice(a, 3))
            next(other, None)
            if trial % 50 == 0:
                gc.collect()
            got = [k for k, _ in head + list(a)]
            assert got == [k for k in keys if k.startswith(p)]
    finally:
        store.close()


def test_a_large_put_many_stages_in_key_order_and_the_last_put_of_a_key_wins(state_dir):
    """put_many of many keys stages them sorted (a RocksDB speed hint): keys that differ only in
    trailing zero bytes, and several puts of one key, keep the meaning of the order given."""
    keys = [bytes([i % 7, i % 5]) + b"\x00" * (i % 3) for i in range(600)]
    values = [i.to_bytes(2, "big") for i in range(600)]
    last = {k: v for k, v in zip(keys, values, strict=True)}
    with StateStore(state_dir) as store:
        t = store.table("t")
        t.put(b"\x01\x01", b"old")
        t.put_many(keys, values)
        t.delete_many([k for k in last if k[0] == 6] * 2)
        store.commit(1)
        assert {k: v for k, v in t.scan_all()} == {k: v for k, v in last.items() if k[0] != 6}


_CRASH = """
import os, sys
from engine.dataflow.state.store import StateStore
store = StateStore(sys.argv[1])
t = store.table("t")
if sys.argv[2] == "failed":  # a population that failed: later commits are logged again
    try:
        with store.populating():
            raise RuntimeError("population failed")
    except RuntimeError:
        pass
    t.put(b"k", b"v")
    store.commit(1)
    os._exit(0)
with store.populating():
    t.put(b"k", b"v")
    store.commit(1)
    if sys.argv[2] == "inside":
        os._exit(0)  # killed mid-population: nothing flushed, nothing logged
os._exit(0)  # killed right after the block, without closing the store
"""


@pytest.mark.parametrize("crash", ["inside", "after", "failed"])
def test_populating_writes_are_on_disk_once_the_block_ends(state_dir, crash):
    subprocess.run([sys.executable, "-c", _CRASH, str(state_dir), crash], check=True, timeout=60)
    with StateStore(state_dir) as store:
        got = store.table("t").get(b"k")
        if crash == "inside":  # the writes really skipped the log (a population cut short
            assert got is None and store.committed_time is None  # starts again from empty)
        else:  # flushed at the block's end / logged after a failed block
            assert got == b"v" and store.committed_time == 1


def test_a_table_being_populated_compacts_its_level_0_later(state_dir):
    """Inside ``populating`` six flushed files stay in level 0 (the trigger is 16); after it the
    usual trigger (4) applies and a background compaction merges them."""
    import time

    def level0(t) -> int:
        return int(t._cf.property_value("rocksdb.num-files-at-level0"))

    with StateStore(state_dir) as store:
        t = store.table("t")
        with store.populating():
            for i in range(6):
                t.put_many([b"k%06d" % (j * 6 + i) for j in range(100)], [b"v" * 50] * 100)
                store.commit(i + 1)
                store.flush()
            time.sleep(0.5)
            assert level0(t) == 6
        deadline = time.monotonic() + 20
        while level0(t) >= 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert level0(t) < 4
        assert t.get(b"k%06d" % 599) == b"v" * 50


@pytest.mark.parametrize("n", [10, 3000])
def test_a_read_ahead_gives_what_get_many_gives_of_committed_state(state_dir, n):
    """``get_many_ahead``: committed values (None where absent) in the keys' order, read in the
    background for many keys; writes staged after it started are not in it."""
    with StateStore(state_dir) as store:
        t = store.table("t", "point")
        t.put_many([b"k%05d" % i for i in range(0, n, 2)], [b"v%d" % i for i in range(0, n, 2)])
        store.commit(1)
        keys = [b"k%05d" % i for i in reversed(range(n))]
        pending = t.get_many_ahead(keys)
        t.put_many([b"k%05d" % i for i in range(1, n, 2)], [b"new"] * len(range(1, n, 2)))
        assert (
            pending()
            == t.get_many(keys)
            == [b"v%d" % i if i % 2 == 0 else None for i in reversed(range(n))]
        )
