"""Randomized oracle tests of WindowCollection against window functions computed from scratch.

The reference applies each function's Postgres definition literally per row (O(n^2) frames).
Ties among peers (row_number, lag/lead) are broken the collection's way by the reference (see
``sql_order``), so inputs here freely repeat sort keys and whole rows.
"""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.window import WindowCollection, WindowFunction
from engine.dataflow.graph import Dataflow
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import OracleRun, RandomTable, pick, run_once
from engine.dataflow.window_functions import AGGREGATES, pg_numeric_div, window_columns
from tests.dataflow.sql_order import sorted_partitions

DECS = [Decimal("0.5"), Decimal("0.50"), Decimal("1.25"), Decimal("-3"), Decimal("2.5")]


def row(rng):
    """(part, int order, text order, int value, numeric value, float value)."""
    return (
        pick(rng, ["a", "b", "ab"]),
        pick(rng, range(-2, 3)),
        pick(rng, ["x", "y", "xy"]),
        pick(rng, range(-5, 10)),
        pick(rng, DECS),
        pick(rng, [0.5, 1.25, -2.0, 4.0]),  # dyadic: float sums are exact in any order
    )


ALL_KINDS = [
    WindowFunction("row_number"),
    WindowFunction("rank"),
    WindowFunction("dense_rank"),
    WindowFunction("lag", 3),
    WindowFunction("lead", 4, offset=2, default=Decimal("0")),
    WindowFunction("lag", 2, offset=0),
    WindowFunction("sum", 3),
    WindowFunction("sum", 4),
    WindowFunction("count", 4),
    WindowFunction("count_star"),
    WindowFunction("avg", 3),
    WindowFunction("avg", 4),
    WindowFunction("avg", 5),
    WindowFunction("min", 2),
    WindowFunction("max", 4),
    WindowFunction("min", 3),
]


# -- reference ------------------------------------------------------------------------------------
def reference_value(f, rs, p, peers, order_by):
    """Function ``f`` at position ``p`` of the sorted partition ``rs`` by its SQL definition;
    ``peers`` = [s, e) is the range of rows tied with ``rs[p]`` on every ORDER BY column."""
    k = f.kind
    s, e = peers
    if k == "row_number":
        return p + 1
    if k == "rank":
        return s + 1  # 1 + rows strictly before
    if k == "dense_rank":
        return 1 + len({tuple(r[i] for i in order_by) for r in rs[:s]})  # distinct keys before
    if k in ("lag", "lead"):
        q = p - f.offset if k == "lag" else p + f.offset
        return rs[q][f.arg] if 0 <= q < len(rs) else f.default
    # default frame: with ORDER BY, every row up to the current row's last peer; else all rows
    frame = rs[:e] if order_by else rs
    if k == "count_star":
        return len(frame)
    vals = [q[f.arg] for q in frame if q[f.arg] is not None]
    if k == "count":
        return len(vals)
    if not vals:
        return None
    if k == "sum":
        return sum(vals)
    if k == "min":
        return min(vals)
    if k == "max":
        return max(vals)
    assert k == "avg"
    if isinstance(vals[0], float):
        return sum(vals) / len(vals)
    return pg_numeric_div(sum(vals), len(vals))  # the rounding rule is pinned by a test below


def reference_window(rows, partition_key, order_by, descending, nulls_first, functions):
    parts, cmp = sorted_partitions(rows, partition_key, order_by, descending, nulls_first)
    out = []
    for rs in parts:
        frame_values = {}
        for p, r in enumerate(rs):
            s = p
            while s > 0 and cmp(rs[s - 1], r) == 0:
                s -= 1
            e = p + 1
            while e < len(rs) and cmp(rs[e], r) == 0:
                e += 1
            values = []
            for f in functions:
                if f.kind in AGGREGATES:  # a function of the frame alone: once per peer group
                    key = (id(f), e)
                    if key not in frame_values:
                        frame_values[key] = reference_value(f, rs, p, (s, e), order_by)
                    values.append(frame_values[key])
                else:
                    values.append(reference_value(f, rs, p, (s, e), order_by))
            out.append(r + tuple(values))
    return out


def oracle(state_dir, seed, times=220, functions=ALL_KINDS, **kw):
    kw.setdefault("nulls_first", None)

    def build(df, ins):
        return df.add(WindowCollection(functions=functions, **kw), ins[0])

    def reference(inputs):
        return reference_window(
            inputs[0],
            kw["partition_key"],
            kw["order_by"],
            kw["descending"],
            kw["nulls_first"],
            functions,
        )

    rng = random.Random(seed)
    run = OracleRun(build, reference, [RandomTable(row, rng)], state_dir, reopen_every=7)
    return run.run(times)


# -- randomized oracles ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_kind_with_order_by_and_peers(state_dir, seed):
    fed = oracle(state_dir, seed, partition_key=[0], order_by=[1], descending=[False])
    assert fed > 500


@pytest.mark.parametrize(
    ("seed", "descending", "nulls_first"),
    [
        (10, [True, False], None),
        (11, [True, False], [False, True]),
        (12, [False, True], [True, None]),
    ],
)
def test_every_kind_with_mixed_directions_and_nulls(state_dir, seed, descending, nulls_first):
    fed = oracle(
        state_dir,
        seed,
        partition_key=[0],
        order_by=[1, 2],
        descending=descending,
        nulls_first=nulls_first,
    )
    assert fed > 500


@pytest.mark.parametrize("seed", [20, 21])
def test_every_kind_without_order_by_uses_whole_partition(state_dir, seed):
    fed = oracle(state_dir, seed, partition_key=[0, 1], order_by=[], descending=[])
    assert fed > 500


@pytest.mark.parametrize("seed", [30, 31])
def test_global_window(state_dir, seed):
    functions = [
        WindowFunction("row_number"),
        WindowFunction("rank"),
        WindowFunction("lead", 3, offset=1, default=-1),
        WindowFunction("sum", 4),
        WindowFunction("avg", 3),
    ]
    fed = oracle(
        state_dir,
        seed,
        times=180,
        functions=functions,
        partition_key=[],
        order_by=[3],
        descending=[True],
    )
    assert fed > 350


# -- targeted cases -------------------------------------------------------------------------------
# (sum, count) -> avg as printed by PostgreSQL 15 (`SELECT avg(x) FROM (VALUES ...) t(x)`)
PG_AVG = [
    (3, 2, "1.5000000000000000"),  # 1, 2
    (5, 3, "1.6666666666666667"),  # 1, 2, 2
    (0, 2, "0.00000000000000000000"),  # 0, 0
    (Decimal("7.00"), 3, "2.3333333333333333"),  # 1.50, 2.5, 3
    (300004, 3, "100001.333333333333"),  # 100000, 200001, 3
    (Decimal("0.00007"), 3, "0.000023333333333333333333"),
    (-3, 3, "-1.00000000000000000000"),  # -7, 2, 2
    (Decimal("12345678901234567891.5"), 2, "6172839450617283945.8"),
    (Decimal("3.123456789012345678901"), 2, "1.561728394506172839451"),
    (10005, 2, "5002.5000000000000000"),
    (10000, 2, "5000.0000000000000000"),
    (20000, 20000, "1.00000000000000000000"),
    (Decimal("-0.5"), 3, "-0.16666666666666666667"),
]


@pytest.mark.parametrize(("total", "count", "expected"), PG_AVG)
def test_avg_of_numerics_has_postgres_scale_and_rounding(total, count, expected):
    got = pg_numeric_div(total, count)
    want = Decimal(expected)
    assert got == want and got.as_tuple().exponent == want.as_tuple().exponent, got


def test_only_changed_rows_are_emitted(state_dir):
    funcs = [WindowFunction("row_number"), WindowFunction("sum", 1)]

    def build(df, ins):
        return df.add(WindowCollection([0], [1], [False], functions=funcs), ins[0])

    outs = run_once(
        build,
        [
            [DiffBatch.inserts([("p", i) for i in range(1, 6)] + [("q", 1)])],
            [DiffBatch.inserts([("p", 6)])],  # appended at the end: only the new row changes
            [DiffBatch.inserts([("p", 0)])],  # at the front: every row of p renumbers
        ],
        state_dir,
    )
    assert outs[1].diffs.counts() == {("p", 6, 6, 21): 1}
    assert len(outs[2].diffs) == 6 * 2 + 1
    assert all(r[0] == "p" for r in outs[2].diffs.rows)


def test_duplicates_get_distinct_row_numbers_and_shared_ranks(state_dir):
    funcs = [WindowFunction("row_number"), WindowFunction("rank"), WindowFunction("count_star")]

    def build(df, ins):
        return df.add(WindowCollection([], [0], [False], functions=funcs), ins[0])

    outs = run_once(
        build,
        [[DiffBatch([(1,), (2,), (3,)], [1, 2, 1])], [DiffBatch.deletes([(2,)])]],
        state_dir,
    )
    assert outs[0].diffs.counts() == {
        (1, 1, 1, 1): 1,
        (2, 2, 2, 3): 1,
        (2, 3, 2, 3): 1,
        (3, 4, 4, 4): 1,
    }
    assert outs[1].diffs.counts() == {
        (2, 3, 2, 3): -1,
        (2, 2, 2, 3): -1,
        (2, 2, 2, 2): 1,
        (3, 4, 4, 4): -1,
        (3, 3, 3, 3): 1,
    }


def test_untouched_partitions_are_not_read(state_dir):
    store = StateStore(state_dir)
    try:
        df = Dataflow(store)
        win = WindowCollection([0], [1], [False], functions=[WindowFunction("rank")])
        df.build(df.add(win, df.input("in")))
        df.push("in", DiffBatch.inserts([(p, i) for p in range(50) for i in range(20)]))
        df.time_end(1)
        df.commit(1)
        assert win.rows is not None
        before = win.rows.entries_read
        df.push("in", DiffBatch.inserts([(7, 100)]))
        assert df.time_end(2).diffs.counts() == {(7, 100, 21): 1}
        df.commit(2)
        assert win.rows.entries_read - before == 20
    finally:
        store.close()


def test_describe_and_validation():
    c = WindowCollection(
        [0],
        [1],
        [True],
        [False],
        [WindowFunction("rank"), WindowFunction("lag", 2, 1, 0), WindowFunction("count_star")],
    )
    assert c.describe() == (
        "Window: partition=[0] order=[1 DESC NULLS LAST] functions=[rank(), lag(#2, 1, 0), count(*)]"
    )
    with pytest.raises(ValueError, match="needs an argument"):
        WindowFunction("sum")
    with pytest.raises(ValueError, match="unknown window function"):
        WindowFunction("median")
    assert WindowFunction("ntile", offset=4).describe() == "ntile(4)"
    assert WindowFunction("nth_value", 3, offset=2).describe() == "nth_value(#3, 2)"
    with pytest.raises(ValueError, match="takes no argument"):
        WindowFunction("rank", 1)


def test_distribution_and_value_functions_over_one_partition():
    """ntile spreads rows as Postgres does (the first rows % buckets buckets one larger, one
    row per bucket when there are more buckets than rows); percent_rank and cume_dist see peer
    groups; first/last/nth_value read the default frame (the partition's start .. the current
    row's last peer)."""
    rows = [(v,) for v in (1, 2, 2, 3, 5)]
    groups = [(0, 1), (1, 3), (3, 4), (4, 5)]  # 2 and 2 are peers
    cols = window_columns(
        rows,
        groups,
        [
            WindowFunction("ntile", offset=3),
            WindowFunction("ntile", offset=7),
            WindowFunction("percent_rank"),
            WindowFunction("cume_dist"),
            WindowFunction("first_value", 0),
            WindowFunction("last_value", 0),
            WindowFunction("nth_value", 0, offset=3),
        ],
    )
    assert cols[0] == [1, 1, 2, 2, 3]
    assert cols[1] == [1, 2, 3, 4, 5]
    assert cols[2] == [0.0, 0.25, 0.25, 0.75, 1.0]
    assert cols[3] == [0.2, 0.6, 0.6, 0.8, 1.0]
    assert cols[4] == [1] * 5
    assert cols[5] == [1, 2, 2, 3, 5]  # a peer sees its last peer
    assert cols[6] == [None, 2, 2, 2, 2]
    assert window_columns([(7,)], [(0, 1)], [WindowFunction("percent_rank")]) == [[0.0]]
