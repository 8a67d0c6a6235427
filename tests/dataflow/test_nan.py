"""Float NaN through the dataflow: a NaN row inserted and deleted again leaves nothing behind.

Python's ``float('nan') != float('nan')`` while Postgres' NaN equals itself and sorts above every
number. Values enter the dataflow as the one shared NaN object (``engine.dataflow.nan``; the CDC
parser ``values.parse_float`` gives it), so consolidation cancels ``+row(NaN)`` against
``-row(NaN)``; rows read back from state (new objects after unpickling) must carry it too. Every
collection here runs with the state store closed and reopened between times, and its output
stream is accumulated by ``ZSetSink``, which compares rows by Python equality: a NaN row that is
not the shared object would never cancel and fail the test.
"""

from __future__ import annotations

import math
import pickle
from collections import Counter
from decimal import Decimal

from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.distinct import DistinctCollection
from engine.dataflow.collections.join import InnerJoinCollection
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.collections.top_k import TopKCollection
from engine.dataflow.collections.window import WindowCollection, WindowFunction
from engine.dataflow.graph import Dataflow
from engine.dataflow.nan import NAN, NUMERIC_NAN, canonical_row, loads, may_hold_nan
from engine.dataflow.state.keycodec import encode_key, encode_sortable, encode_sortable_value
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import ZSetSink
from engine.dataflow.window_functions import window_columns
from engine.postgres.values import parse_float, parse_numeric

INF = math.inf


def nan() -> float:
    """A NaN as the CDC decoder produces it: each call parses anew."""
    return parse_float(b"NaN")


def run_reopening(build, batches: list[list[DiffBatch]], state_dir) -> list[DiffBatch]:
    """Feed ``batches[t][i]`` to input i at time t+1, reopening the state store before each time
    (rows then come back from RocksDB as new objects); returns each time's output diffs."""
    outs = []
    for t, per_input in enumerate(batches, start=1):
        store = StateStore(state_dir)
        try:
            df = Dataflow(store)
            inputs = [df.input(f"in{i}") for i in range(len(per_input))]
            df.build(build(df, inputs))
            for i, b in enumerate(per_input):
                df.push(f"in{i}", b)
            outs.append(df.time_end(t).diffs)
            df.commit(t)
        finally:
            store.close()
    return outs


def accumulate(outs: list[DiffBatch]) -> list[Counter]:
    """The output multiset after each time (Python equality: NaN rows must be the shared NaN)."""
    sink = ZSetSink()
    states = []
    for out in outs:
        sink.apply(out.consolidate())
        states.append(sink.counter())
    return states


# rows (g, x): x a double precision with NaN, infinity, a number and NULL
T1 = [(1, nan()), (1, nan()), (1, INF), (2, 1.5), (2, nan()), (3, None), (3, -INF)]
T2 = [(1, nan())]  # deleted: one of the two equal NaN rows
T3_DEL, T3_INS = [(2, nan())], [(3, nan())]  # an update moving a NaN row to another group
T4 = [(1, nan()), (1, INF), (2, 1.5), (3, None), (3, -INF), (3, nan())]  # the rest, deleted
CHANGES = [
    [DiffBatch.inserts(T1)],
    [DiffBatch.deletes(T2)],
    [DiffBatch(T3_DEL + T3_INS, [-1, 1])],
    [DiffBatch.deletes(T4)],
]


def test_values_enter_as_the_shared_nan():
    assert parse_float(b"NaN") is NAN and parse_float(b"NaN") is parse_float(b"NaN")
    assert parse_float(b"Infinity") == INF and parse_float(b"-Infinity") == -INF
    assert parse_numeric(b"NaN") is NUMERIC_NAN
    assert parse_numeric(b"Infinity") == Decimal("Infinity")
    assert (1, nan()) == (1, nan()) and hash((1, nan())) == hash((1, nan()))
    assert DiffBatch([(1, nan()), (1, nan())], [1, -1]).consolidate().rows == []


def test_the_whole_set_of_changes_cancels():
    assert not DiffBatch.concat(
        [CHANGES[0][0], CHANGES[1][0], CHANGES[2][0], CHANGES[3][0]]
    ).consolidate()


def test_distinct_retracts_nan_rows(state_dir):
    outs = run_reopening(lambda df, ins: df.add(DistinctCollection(), ins[0]), CHANGES, state_dir)
    states = accumulate(outs)
    assert states[0] == Counter(
        {(1, NAN): 1, (1, INF): 1, (2, 1.5): 1, (2, NAN): 1, (3, None): 1, (3, -INF): 1}
    )
    assert not outs[1]  # (1, NaN) is still there once
    assert states[2] == states[0] - Counter({(2, NAN): 1}) + Counter({(3, NAN): 1})
    assert states[3] == Counter()


def test_distinct_of_the_float_column(state_dir):
    def build(df, ins):
        return df.add(DistinctCollection(), ins[0])

    cols = [[DiffBatch([(r[1],) for r in b.rows], b.weights)] for (b,) in CHANGES]
    states = accumulate(run_reopening(build, cols, state_dir))
    assert states[0] == Counter({(NAN,): 1, (INF,): 1, (1.5,): 1, (None,): 1, (-INF,): 1})
    assert states[2] == states[0]
    assert states[3] == Counter()


def test_group_by_nan_key(state_dir):
    def build(df, ins):
        return df.add(ReduceCollection([1], [Aggregate("count_star")]), ins[0])

    # GROUP BY x: the output row starts with x
    states = accumulate(run_reopening(build, CHANGES, state_dir))
    assert states[0] == Counter({(NAN, 3): 1, (INF, 1): 1, (1.5, 1): 1, (None, 1): 1, (-INF, 1): 1})
    assert states[1] == states[0] - Counter({(NAN, 3): 1}) + Counter({(NAN, 2): 1})
    assert states[2] == states[1]
    assert states[3] == Counter()


def test_min_max_sum_count_per_group(state_dir):
    aggs = [
        Aggregate("max", 1),
        Aggregate("min", 1),
        Aggregate("sum", 1),
        Aggregate("count", 1),
        Aggregate("avg", 1),
    ]

    def build(df, ins):
        return df.add(ReduceCollection([0], aggs), ins[0])

    outs = run_reopening(build, CHANGES, state_dir)
    states = accumulate(outs)
    # NaN is the greatest value; a sum or avg with a NaN (or +inf and -inf) is NaN
    assert states[0] == Counter(
        {
            (1, NAN, INF, NAN, 3, NAN): 1,
            (2, NAN, 1.5, NAN, 2, NAN): 1,
            (3, -INF, -INF, -INF, 1, -INF): 1,
        }
    )
    assert states[1] == states[0] - Counter({(1, NAN, INF, NAN, 3, NAN): 1}) + Counter(
        {(1, NAN, INF, NAN, 2, NAN): 1}
    )
    assert states[2] == Counter(
        {
            (1, NAN, INF, NAN, 2, NAN): 1,
            (2, 1.5, 1.5, 1.5, 1, 1.5): 1,
            (3, NAN, -INF, NAN, 2, NAN): 1,
        }
    )
    assert states[3] == Counter()


def test_an_unchanged_nan_aggregate_emits_nothing(state_dir):
    """sum/max stay NaN when another NaN row leaves: no -old +new for the group."""

    def build(df, ins):
        return df.add(ReduceCollection([0], [Aggregate("sum", 1), Aggregate("max", 1)]), ins[0])

    outs = run_reopening(
        build,
        [
            [DiffBatch.inserts([(1, nan()), (1, nan()), (1, 2.0)])],
            [DiffBatch.deletes([(1, nan())])],
        ],
        state_dir,
    )
    assert list(outs[0]) == [((1, NAN, NAN), 1)]
    assert not outs[1]


def test_global_min_max(state_dir):
    def build(df, ins):
        return df.add(ReduceCollection([], [Aggregate("max", 1), Aggregate("min", 1)]), ins[0])

    states = accumulate(run_reopening(build, CHANGES, state_dir))
    assert states[0] == Counter({(NAN, -INF): 1})
    assert states[2] == states[0]
    assert states[3] == Counter({(None, None): 1})  # a global aggregate keeps its row


def test_top_k_over_nan(state_dir):
    """ORDER BY x DESC: NaN rows first; an update of a NaN row in the top retracts it exactly."""

    def build(df, ins):
        return df.add(TopKCollection([], [1], [True], limit=3), ins[0])

    states = accumulate(run_reopening(build, CHANGES, state_dir))
    # DESC puts NULLs first (Postgres' default), then NaN above +inf
    assert states[0] == Counter({(3, None): 1, (1, NAN): 2})
    assert states[1] == Counter({(3, None): 1, (1, NAN): 1, (2, NAN): 1})
    assert states[2] == Counter({(3, None): 1, (1, NAN): 1, (3, NAN): 1})
    assert states[3] == Counter()


def test_window_min_max_sum_over_nan(state_dir):
    funcs = [WindowFunction("max", 1), WindowFunction("min", 1), WindowFunction("sum", 1)]

    def build(df, ins):
        return df.add(WindowCollection([0], [], [], functions=funcs), ins[0])

    states = accumulate(run_reopening(build, CHANGES, state_dir))
    g1 = (NAN, INF, NAN)
    assert states[0] == Counter(
        {
            (1, NAN, *g1): 2,
            (1, INF, *g1): 1,
            (2, 1.5, NAN, 1.5, NAN): 1,
            (2, NAN, NAN, 1.5, NAN): 1,
            (3, None, -INF, -INF, -INF): 1,
            (3, -INF, -INF, -INF, -INF): 1,
        }
    )
    assert states[3] == Counter()


def test_window_min_max_order_nan_above_numbers():
    rows = [(NAN,), (1.0,), (NAN,), (-INF,)]
    groups = [(0, 4)]
    mx, mn = window_columns(rows, groups, [WindowFunction("max", 0), WindowFunction("min", 0)])
    assert mx == [NAN] * 4 and mn == [-INF] * 4
    only_nan = window_columns([(float("nan"),)], [(0, 1)], [WindowFunction("min", 0)])
    assert only_nan[0][0] is NAN
    dec = [(Decimal("NaN"),), (Decimal("2"),)]
    assert window_columns(dec, [(0, 2)], [WindowFunction("max", 0)])[0] == [NUMERIC_NAN] * 2
    assert window_columns(dec, [(0, 2)], [WindowFunction("min", 0)])[0] == [Decimal("2")] * 2


def join_changes() -> list[list[DiffBatch]]:
    return [
        [DiffBatch.inserts([(nan(), "l1"), (1.5, "l2")]), DiffBatch.inserts([(nan(), "r1")])],
        [DiffBatch(), DiffBatch.inserts([(nan(), "r2"), (1.5, "r3")])],
        [DiffBatch.deletes([(nan(), "l1")]), DiffBatch()],
        [DiffBatch.deletes([(1.5, "l2")]), DiffBatch.deletes([(nan(), "r1"), (nan(), "r2")])],
    ]


def join(df, ins):
    return df.add(InnerJoinCollection([0], [0]), ins[0], ins[1])


def test_join_on_a_float_key_under_sql_equality(state_dir):
    """NaN = NaN joins; the output multiset (rows compared as Postgres does) empties again."""
    outs = run_reopening(join, join_changes(), state_dir)
    total: Counter = Counter()
    sizes = []
    for out in outs:
        for r, w in out:
            total[canonical_row(r)] += w
        total = +total
        sizes.append(sum(total.values()))
    assert sizes == [1, 3, 1, 0]
    assert not total


def test_join_output_carries_the_shared_nan(state_dir):
    accumulate(run_reopening(join, join_changes(), state_dir))


# -- encodings and pickles -------------------------------------------------------------------------
def test_keys_encode_nan_deterministically_and_in_postgres_order():
    other_nan = float("inf") - float("inf")  # the sign bit set on x86
    assert encode_key((NAN,)) == encode_key((float("nan"),)) == encode_key((other_nan,))
    assert encode_key((NAN,)) != encode_key((INF,))
    values = [-INF, -1.5, -0.0, 0.0, 2.0, 1e308, INF, NAN]
    enc = [encode_sortable_value(v) for v in values]
    assert enc == sorted(enc) and len(set(enc)) == len(enc) - 1  # -0.0 = 0.0
    assert encode_sortable_value(other_nan) == encode_sortable_value(NAN)
    assert encode_sortable((NAN,), [True]) < encode_sortable((INF,), [True])  # DESC: NaN first
    assert encode_sortable((NAN,)) < encode_sortable((None,))  # NULLS LAST ascending
    decimals = [Decimal("-Infinity"), Decimal("-1"), Decimal("0"), Decimal("Infinity")]
    enc_d = [encode_sortable_value(v) for v in [*decimals, Decimal("NaN")]]
    assert enc_d == sorted(enc_d)


def test_loads_gives_back_the_shared_nan():
    row = (1, float("nan"), "NaN text", Decimal("NaN"), [float("nan")], None)
    raw = pickle.dumps((row, 3), 5)
    assert may_hold_nan(raw)
    loaded, n = loads(raw)
    assert n == 3 and loaded[1] is NAN and loaded[3] is NUMERIC_NAN and loaded[4][0] is NAN
    assert loaded == (1, NAN, "NaN text", NUMERIC_NAN, [NAN], None)
    plain = pickle.dumps(((1, 2.5, "x"), 1), 5)
    assert not may_hold_nan(plain) and loads(plain) == ((1, 2.5, "x"), 1)
    negative = pickle.dumps(float("inf") - float("inf"), 5)
    assert loads(negative) is NAN
    assert canonical_row((1, 2.0)) == (1, 2.0) and canonical_row((float("nan"),))[0] is NAN


def test_sorted_state_merges_nan_rows_that_python_keeps_apart(state_dir):
    """A NaN that is not the shared object (e.g. from a collection that has not canonicalized
    it) must still count as one row of the sorted state: two Python-unequal NaN rows in one delta
    are one entry with count 2, not two entries overwriting each other's count."""

    def build(df, ins):
        return df.add(TopKCollection([], [1], [True], limit=5), ins[0])

    fresh = [(1, float("nan")), (1, float("nan")), (2, 1.0)]
    outs = run_reopening(
        build,
        [[DiffBatch.inserts(fresh)], [DiffBatch.deletes([(1, float("nan"))] * 2)]],
        state_dir,
    )
    total: Counter = Counter()
    for out in outs[:1]:
        for r, w in out:
            total[canonical_row(r)] += w
    assert +total == Counter({(1, NAN): 2, (2, 1.0): 1})
    for r, w in outs[1]:
        total[canonical_row(r)] += w
    assert +total == Counter({(2, 1.0): 1})
