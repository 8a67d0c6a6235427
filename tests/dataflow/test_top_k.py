"""Randomized oracle tests of TopKCollection against a from-scratch sort in plain Python.

Ties among equal sort keys are broken the collection's way by the reference (see ``sql_order``),
so inputs here freely repeat sort keys and whole rows.
"""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.top_k import TopKCollection
from engine.dataflow.graph import Dataflow
from engine.dataflow.state.sorted_partitions import SortedPartitions
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import OracleRun, RandomTable, pick, run_once
from tests.dataflow.sql_order import sorted_partitions

PARTS = ["a", "b", "ab", "a'"]
NUMS = [Decimal("1"), Decimal("1.0"), Decimal("2.50"), Decimal("2.5"), Decimal("-0.5")]


def row(rng):
    """(text part, numeric part, int order, text order, numeric payload): NULLs, ties, duplicates."""
    return (
        pick(rng, PARTS),
        pick(rng, NUMS),
        pick(rng, range(-3, 4)),
        pick(rng, ["x", "y", "xy", ""]),
        pick(rng, [Decimal("0.5"), Decimal("0.50"), Decimal("7")]),
    )


# -- reference ------------------------------------------------------------------------------------
def reference_top_k(
    rows, partition_key, order_by, descending, nulls_first, limit, offset, kind, emit_rank
):
    parts, cmp = sorted_partitions(rows, partition_key, order_by, descending, nulls_first)
    hi = float("inf") if limit is None else offset + limit
    out = []
    for rs in parts:
        rank = dense = 0
        for p, r in enumerate(rs):
            if p == 0 or cmp(rs[p - 1], r) != 0:
                rank, dense = p + 1, dense + 1
            value = {"row_number": p + 1, "rank": rank, "dense_rank": dense}[kind]
            if offset < value <= hi:
                out.append(r + (value,) if emit_rank else r)
    return out


def oracle(state_dir, seed, times=220, make_row=row, **kw):
    kw.setdefault("nulls_first", None)
    kw.setdefault("limit", None)
    kw.setdefault("offset", 0)
    kw.setdefault("rank_kind", "row_number")
    kw.setdefault("emit_rank", False)

    def build(df, ins):
        return df.add(TopKCollection(**kw), ins[0])

    def reference(inputs):
        return reference_top_k(
            inputs[0],
            kw["partition_key"],
            kw["order_by"],
            kw["descending"],
            kw["nulls_first"],
            kw["limit"],
            kw["offset"],
            kw["rank_kind"],
            kw["emit_rank"],
        )

    rng = random.Random(seed)
    run = OracleRun(build, reference, [RandomTable(make_row, rng)], state_dir, reopen_every=7)
    return run.run(times)


# -- randomized oracles ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seed", "nulls_first"),
    [(0, None), (1, [True, False]), (2, [False, True]), (3, [True, True])],
)
def test_global_order_by_limit_offset(state_dir, seed, nulls_first):
    fed = oracle(
        state_dir,
        seed,
        partition_key=[],
        order_by=[2, 3],
        descending=[False, True],
        nulls_first=nulls_first,
        limit=5,
        offset=2,
    )
    assert fed > 600


@pytest.mark.parametrize(
    ("seed", "descending", "nulls_first", "limit", "offset"),
    [
        (10, [True], None, 3, 0),
        (11, [True], [False], 3, 1),
        (12, [False], [True], 2, 2),
        (13, [False], None, 1, 0),
    ],
)
def test_per_partition_top_k(state_dir, seed, descending, nulls_first, limit, offset):
    fed = oracle(
        state_dir,
        seed,
        partition_key=[0, 1],
        order_by=[2],
        descending=descending,
        nulls_first=nulls_first,
        limit=limit,
        offset=offset,
    )
    assert fed > 600


@pytest.mark.parametrize(
    ("seed", "kind", "emit_rank", "offset"),
    [
        (20, "rank", False, 0),
        (21, "rank", True, 0),
        (22, "dense_rank", False, 0),
        (23, "dense_rank", True, 1),
        (24, "rank", True, 2),
    ],
)
def test_rank_and_dense_rank_keep_ties(state_dir, seed, kind, emit_rank, offset):
    fed = oracle(
        state_dir,
        seed,
        partition_key=[0],
        order_by=[2, 4],
        descending=[True, False],
        limit=2,
        offset=offset,
        rank_kind=kind,
        emit_rank=emit_rank,
    )
    assert fed > 600


@pytest.mark.parametrize("seed", [30, 31])
def test_row_number_emitted(state_dir, seed):
    fed = oracle(
        state_dir,
        seed,
        partition_key=[1],
        order_by=[3, 2],
        descending=[False, False],
        nulls_first=[True, None],
        limit=4,
        offset=1,
        emit_rank=True,
    )
    assert fed > 600


@pytest.mark.parametrize(
    ("seed", "limit", "offset"), [(40, None, 3), (41, 0, 0), (42, 0, 2), (43, None, 0)]
)
def test_unbounded_and_empty_limits(state_dir, seed, limit, offset):
    fed = oracle(
        state_dir,
        seed,
        times=120,
        partition_key=[0],
        order_by=[2],
        descending=[False],
        limit=limit,
        offset=offset,
    )
    assert fed > 300


def test_order_by_without_columns_keeps_any_k_rows_deterministically(state_dir):
    fed = oracle(state_dir, 50, times=150, partition_key=[0], order_by=[], descending=[], limit=2)
    assert fed > 350


# -- targeted cases -------------------------------------------------------------------------------
def test_retraction_in_another_numeric_representation(state_dir):
    """1.5 and 1.50 are one row to DiffBatch; deleting either retracts an insert of the other."""

    def build(df, ins):
        return df.add(TopKCollection([], [0], [False], limit=2), ins[0])

    outs = run_once(
        build,
        [
            [DiffBatch.inserts([(Decimal("1.5"),), (Decimal("3"),)])],
            [DiffBatch([(Decimal("1.5"),), (Decimal("1.50"),)], [-1, 1])],  # consolidates to {}
            [DiffBatch.deletes([(Decimal("1.50"),)])],
        ],
        state_dir,
    )
    assert outs[0].diffs.counts() == {(Decimal("1.5"),): 1, (Decimal("3"),): 1}
    assert outs[1].diffs.counts() == {}
    assert outs[2].diffs.counts() == {(Decimal("1.5"),): -1}


def test_partition_prefixes_are_prefix_free_and_sql_equal(state_dir):
    parts = [("a",), ("a", "b"), ("a,",), ("a'",), (None,), ("None",), (1,), (12,), ("1",)]
    with StateStore(state_dir) as store:
        table = store.table("p")
        layouts = {n: SortedPartitions(table, list(range(n)), [], []) for n in (1, 2)}
        prefixes = [layouts[len(p)].partition_prefix(p) for p in parts]
        for i, a in enumerate(prefixes):
            for j, b in enumerate(prefixes):
                assert i == j or not b.startswith(a), (parts[i], parts[j])
        one = layouts[1]
        assert one.partition_prefix((Decimal("1.0"),)) == one.partition_prefix((1,))
        assert one.partition_prefix((Decimal("2.50"),)) == one.partition_prefix((Decimal("2.5"),))


def test_partitions_that_could_collide_stay_apart(state_dir):
    """Two-column partitions whose repr could run into each other without the length prefix."""

    def make(rng):
        return (pick(rng, ["a", "a'", "", "'"]), pick(rng, ["b", ",", ")", ""]), rng.randrange(5))

    fed = oracle(
        state_dir,
        60,
        times=150,
        make_row=make,
        partition_key=[0, 1],
        order_by=[2],
        descending=[True],
        limit=1,
    )
    assert fed > 350


def test_row_number_reads_are_bounded_by_k_offset_and_delta(state_dir):
    """A change to a 2,000-row partition reads ~ offset+limit+|delta| entries, not the partition."""
    store = StateStore(state_dir)
    try:
        df = Dataflow(store)
        topk = TopKCollection([0], [1], [False], limit=3, offset=2)
        df.build(df.add(topk, df.input("in")))
        rows = [("p", i) for i in range(2000)] + [("q", i) for i in range(2000)]
        df.push("in", DiffBatch.inserts(rows))
        df.time_end(1)
        df.commit(1)
        assert topk.rows is not None
        before = topk.rows.entries_read
        # delete the current first 3 rows of "p" (shifting its window) and insert one late row
        df.push("in", DiffBatch([("p", 0), ("p", 1), ("p", 3), ("p", 5000)], [-1, -1, -1, 1]))
        out = df.time_end(2)
        df.commit(2)
        # positions 2..4: before 2, 3, 4; after 5, 6, 7 (0, 1, 3 deleted)
        assert out.diffs.counts() == {
            ("p", 2): -1,
            ("p", 3): -1,
            ("p", 4): -1,
            ("p", 5): 1,
            ("p", 6): 1,
            ("p", 7): 1,
        }
        assert topk.rows.entries_read - before <= 2 + 3 + 3  # offset + limit + deleted
    finally:
        store.close()


def test_changes_past_the_selection_skip_the_partition(state_dir):
    """A partition whose changes all lie after its offset+limit-th entry is not scanned and
    emits nothing; a change inside the selection (or at its last entry) is applied; the bounds
    survive a reopen and a rolled-back time."""
    rows = [("p", i) for i in range(50)] + [("q", i) for i in range(2)]
    store = StateStore(state_dir)
    try:
        df = Dataflow(store)
        topk = TopKCollection([0], [1], [False], limit=3, offset=1)
        df.build(df.add(topk, df.input("in")))
        df.push("in", DiffBatch.inserts(rows))
        df.time_end(1)
        df.commit(1)
        read = topk.rows.entries_read
        df.push("in", DiffBatch([("p", 10), ("p", 99), ("q", 5)], [-1, 1, 1]))
        out = df.time_end(2)
        df.commit(2)
        assert out.diffs.counts() == {("q", 5): 1}  # q has no bound (2 rows < 4): scanned
        assert topk.skipped == 1 and topk.rows.entries_read - read <= 2
    finally:
        store.close()
    store = StateStore(state_dir)  # selection of p: 1, 2, 3 (offset 1); its bound: 3
    try:
        df = Dataflow(store)
        topk = TopKCollection([0], [1], [False], limit=3, offset=1)
        df.build(df.add(topk, df.input("in")))
        df.push("in", DiffBatch([("p", 2)], [-1]))
        df.time_end(3)
        df.abort()  # the sink failed: the time runs again with other diffs
        df.push("in", DiffBatch([("p", 3)], [-1]))  # the last selected entry itself
        assert df.time_end(3).diffs.counts() == {("p", 3): -1, ("p", 4): 1}
        df.commit(3)
        df.push("in", DiffBatch([("p", 20), ("p", 30)], [-1, 1]))  # past the new bound (4)
        assert df.time_end(4).diffs.counts() == {}
        df.commit(4)
        assert topk.skipped == 1
        df.push("in", DiffBatch([("p", 7), ("p", 0)], [-1, -1]))  # past it, and before it
        assert df.time_end(5).diffs.counts() == {("p", 1): -1, ("p", 5): 1}
        df.commit(5)
        assert topk.skipped == 1
    finally:
        store.close()


def test_describe():
    c = TopKCollection([0], [2], [True], limit=3)
    assert c.describe() == "TopK: partition=[0] order=[2 DESC] limit=3"
    c = TopKCollection([], [1, 2], [False, True], [True, None], 5, 1, "dense_rank", True)
    assert c.describe() == (
        "TopK: partition=[] order=[1 ASC NULLS FIRST, 2 DESC] dense_rank limit=5 offset=1 emit_rank"
    )
    with pytest.raises(ValueError, match="rank_kind"):
        TopKCollection([0], [1], [False], limit=1, rank_kind="ntile")
