"""Randomized oracle tests of ReduceCollection: every aggregate against a from-scratch GROUP BY.

Inputs carry NULLs, duplicate rows, ints, Decimals, floats, strings and booleans; group keys mix
NULLs and numeric-equal values (1 vs Decimal('1.0')); the state is closed and reopened from disk
every few times. Expected numeric results follow Postgres (checked against PostgreSQL 15).
"""

from __future__ import annotations

import math
import random
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.state.keycodec import encode_key, normalize_key
from engine.dataflow.testing import OracleRun, RandomTable, pick, run_once

# columns of the random rows
G_TEXT, G_NUM, INT, DEC, FLT, TXT, BOOL, FLAG, ORD = range(9)
GROUP_TEXT = ["a", "b", "ab", "a,", ""]
GROUP_NUM = [1, Decimal("1.0"), 2, Decimal("2.00"), 11]
DECIMALS = [
    Decimal("1.5"),
    Decimal("1.50"),
    Decimal("-2.25"),
    Decimal("10"),
    Decimal("0.001"),
    Decimal("3.10"),
    Decimal("-7"),
]
FLOATS = [0.1, 1e10, -2.5, 3.3333, 1e-5, -0.0]
TEXTS = ["x", "yy", "z", "ab", "é"]


def make_row(rng):
    return (
        pick(rng, GROUP_TEXT),
        pick(rng, GROUP_NUM),
        pick(rng, range(-5, 20)),
        pick(rng, DECIMALS),
        pick(rng, FLOATS),
        pick(rng, TEXTS),
        pick(rng, [True, False]),
        pick(rng, [True, False]),
        pick(rng, [3, 1, 2]),
    )


# -- the reference: GROUP BY recomputed from scratch ------------------------------------------------
def ref_value(agg: Aggregate, rows: list[tuple]):
    if agg.filter is not None:
        rows = [r for r in rows if r[agg.filter] is True]
    if agg.kind == "count_star":
        return len(rows)
    vals = [r[agg.arg] for r in rows if r[agg.arg] is not None]
    kind = agg.kind
    if kind == "count":
        return len(vals)
    if kind == "count_distinct":
        return len(set(vals))
    if not vals:
        return None
    if kind == "sum":
        if isinstance(vals[0], float):
            return math.fsum(vals)
        return sum(vals)
    if kind == "avg":
        if isinstance(vals[0], float):
            return math.fsum(vals) / len(vals)
        exact = Fraction(sum(vals)) / len(vals)
        with localcontext() as ctx:
            ctx.prec = 60
            return Decimal(exact.numerator) / Decimal(exact.denominator)
    if kind == "min":
        return min(vals)
    if kind == "max":
        return max(vals)
    if kind == "bool_and":
        return all(vals)
    if kind == "bool_or":
        return any(vals)
    if kind == "string_agg":
        kept = sorted((r for r in rows if r[agg.arg] is not None), key=lambda r: r[agg.arg])
        desc = agg.descending or (False,) * len(agg.order_by)
        for col, d in reversed(list(zip(agg.order_by, desc, strict=True))):
            kept.sort(key=lambda r, c=col: (r[c] is None, 0 if r[c] is None else r[c]), reverse=d)
        return agg.separator.join(r[agg.arg] for r in kept)
    raise AssertionError(kind)


def ref_reduce(group_key, aggs):
    def reference(inputs):
        groups: dict[tuple, list] = {}
        for r in inputs[0]:
            groups.setdefault(tuple(r[i] for i in group_key), []).append(r)
        if not group_key and not groups:
            groups[()] = []
        return [k + tuple(ref_value(a, rows) for a in aggs) for k, rows in groups.items()]

    return reference


def approx(v):
    """Floats to 9 significant digits, Decimals to 12 places (avg), with their type kept."""
    if type(v) is float:
        return ("float", float(f"{v:.9g}") if v == v else "nan")
    if type(v) is Decimal:
        return ("numeric", v.quantize(Decimal("1e-12")))
    return (type(v).__name__, v)


def comparer(nkey: int):
    return lambda r: normalize_key(r[:nkey]) + tuple(map(approx, r[nkey:]))


def oracle(state_dir, seed, group_key, aggs, steps, make=make_row, max_changes=8, delete_ratio=0.4):
    rng = random.Random(seed)
    group_key = tuple(group_key)
    aggs = list(aggs)

    def build(df, ins):
        return df.add(ReduceCollection(group_key, aggs), ins[0])

    run = OracleRun(
        build,
        ref_reduce(group_key, aggs),
        [RandomTable(make, rng, max_changes=max_changes, delete_ratio=delete_ratio)],
        state_dir,
        reopen_every=7,
        compare=comparer(len(group_key)),
    )
    return run.run(steps)


# -- every aggregate ------------------------------------------------------------------------------
EVERY = [
    Aggregate("count_star"),
    Aggregate("count", TXT),
    Aggregate("sum", INT),
    Aggregate("sum", DEC),
    Aggregate("sum", FLT),
    Aggregate("avg", INT),
    Aggregate("avg", DEC),
    Aggregate("avg", FLT),
    Aggregate("min", INT),
    Aggregate("max", DEC),
    Aggregate("min", TXT),
    Aggregate("max", FLT),
    Aggregate("count_distinct", DEC),
    Aggregate("bool_and", BOOL),
    Aggregate("bool_or", BOOL),
    Aggregate("string_agg", TXT),
    Aggregate("string_agg", TXT, separator=" | ", order_by=(ORD, INT), descending=(True, False)),
]


@pytest.mark.parametrize("agg", EVERY, ids=lambda a: a.describe())
def test_each_aggregate_alone_matches_recompute(state_dir, agg):
    assert oracle(state_dir, len(agg.describe()), (G_TEXT,), [agg], 90, max_changes=10) > 250


@pytest.mark.parametrize("seed", range(2))
def test_all_aggregates_in_one_reduce_with_filters(state_dir, seed):
    filtered = [
        Aggregate("count_star", filter=FLAG),
        Aggregate("sum", INT, filter=FLAG),
        Aggregate("min", INT, filter=FLAG),
        Aggregate("max", INT, filter=BOOL),
        Aggregate("count_distinct", INT, filter=FLAG),
        Aggregate("string_agg", TXT, filter=FLAG, order_by=(INT,)),
        Aggregate("avg", DEC, filter=BOOL),
        Aggregate("bool_or", BOOL, filter=FLAG),
        Aggregate("string_agg", TXT, separator="/"),
    ]
    assert oracle(state_dir, seed, (G_NUM, G_TEXT), EVERY + filtered, 250) > 500


# -- min/max when the current extreme is deleted ----------------------------------------------------
def few_groups_row(rng):
    return (
        rng.choice(["p", "q"]),
        rng.choice([1, Decimal("1.00")]),
        pick(rng, range(10)),
        pick(rng, DECIMALS),
        pick(rng, FLOATS),
        pick(rng, TEXTS),
        pick(rng, [True, False]),
        pick(rng, [True, False]),
        rng.choice([1, 2]),
    )


MINMAX = [
    Aggregate("min", INT),
    Aggregate("max", INT),
    Aggregate("min", DEC),
    Aggregate("max", DEC),
    Aggregate("min", FLT),
    Aggregate("max", FLT),
    Aggregate("min", TXT),
    Aggregate("max", TXT),
    Aggregate("min", INT, filter=FLAG),
    Aggregate("max", INT, filter=FLAG),
]


@pytest.mark.parametrize("seed", range(2))
def test_min_max_survive_deletes_of_the_current_extreme(state_dir, seed):
    fed = oracle(
        state_dir,
        seed,
        (G_TEXT,),
        MINMAX,
        300,
        make=few_groups_row,
        max_changes=14,
        delete_ratio=0.5,
    )
    assert fed > 1200


@pytest.mark.slow
def test_min_of_one_group_does_not_read_a_neighbour_group(state_dir):
    """Groups whose encoded keys are byte prefixes of each other ('a' / 'ab', 1 / 11)."""

    def row(rng):
        return (
            rng.choice(["a", "ab", "a'", "", "b"]),
            rng.choice([1, 11, 111, None]),
            rng.randrange(50),
        )

    aggs = [
        Aggregate("min", 2),
        Aggregate("max", 2),
        Aggregate("string_agg", 0),
        Aggregate("count_distinct", 2),
    ]
    for group_key in ((0,), (1,), (0, 1)):
        state = state_dir / "-".join(map(str, group_key))
        assert (
            oracle(state, 7, group_key, aggs, 120, make=row, max_changes=12, delete_ratio=0.5) > 400
        )


def test_slot_prefixes_are_prefix_free():
    rc = ReduceCollection((0,), [Aggregate("min", 1), Aggregate("count_distinct", 1)])
    groups = [(), ("a",), ("a", "b"), ("ab",), (1,), (11,), (1, 1), (None,), ("a", None)]
    prefixes = [rc._slot_prefix(s, encode_key(g)) for s in (0, 1) for g in groups]
    for p in prefixes:
        for q in prefixes:
            assert p == q or not q.startswith(p), (p, q)


# -- global aggregates ----------------------------------------------------------------------------
GLOBAL = [
    Aggregate("count_star"),
    Aggregate("count", INT),
    Aggregate("sum", INT),
    Aggregate("sum", DEC),
    Aggregate("avg", FLT),
    Aggregate("min", DEC),
    Aggregate("max", TXT),
    Aggregate("count_distinct", TXT),
    Aggregate("bool_and", BOOL),
    Aggregate("string_agg", TXT, separator="-"),
    Aggregate("count_star", filter=FLAG),
]


@pytest.mark.parametrize("seed", range(2))
def test_global_aggregate_matches_recompute_through_empty_inputs(state_dir, seed):
    # many deletes: the input is often empty again, and the first time has no input at all
    assert oracle(state_dir, seed, (), GLOBAL, 250, max_changes=3, delete_ratio=0.55) > 200


def test_global_aggregate_emits_one_row_on_empty_input(state_dir):
    def build(df, ins):
        return df.add(ReduceCollection((), GLOBAL), ins[0])

    empty = [[DiffBatch()]] * 3
    outs = run_once(
        build, [*empty, [DiffBatch.inserts([make_row(random.Random(1))])], *empty], state_dir
    )
    first = outs[0].diffs.counts()
    assert first == {(0, 0, None, None, None, None, None, 0, None, None, 0): 1}
    assert [len(o.diffs) for o in outs] == [1, 0, 0, 2, 0, 0, 0]


def test_grouped_reduce_emits_nothing_on_empty_input(state_dir):
    def build(df, ins):
        return df.add(ReduceCollection((0,), [Aggregate("count_star")]), ins[0])

    outs = run_once(
        build,
        [[DiffBatch()], [DiffBatch.inserts([("a",)])], [DiffBatch.deletes([("a",)])]],
        state_dir,
    )
    assert [o.diffs.counts() for o in outs] == [{}, {("a", 1): 1}, {("a", 1): -1}]


# -- exact values (Postgres' types and scales) -----------------------------------------------------
def run_values(state_dir, aggs, batches):
    def build(df, ins):
        return df.add(ReduceCollection((), aggs), ins[0])

    from engine.dataflow.testing import ZSetSink

    sink = ZSetSink()
    results = []
    for out in run_once(build, [[b] for b in batches], state_dir):
        sink.apply(out.diffs)
        (row,) = sink.rows
        results.append(row)
    return results


def test_numeric_avg_and_sum_scales_match_postgres(state_dir):
    d = Decimal
    aggs = [Aggregate("avg", 0), Aggregate("sum", 0)]
    batches = [
        DiffBatch.inserts([(d("1.000000000000000000001"),), (d(2),)]),
        DiffBatch.deletes([(d("1.000000000000000000001"),)]),
        DiffBatch.inserts([(d("1.5"),), (d("2.25"),), (d("3.125"),)]),
        DiffBatch.deletes([(d(2),), (d("2.25"),), (d("3.125"),)]),
    ]
    got = [(str(a), str(s)) for a, s in run_values(state_dir, aggs, batches)]
    # as PostgreSQL 15 prints avg(x), sum(x) over the same numerics
    assert got == [
        ("1.500000000000000000001", "3.000000000000000000001"),
        ("2.0000000000000000", "2"),
        ("2.2187500000000000", "8.875"),
        ("1.50000000000000000000", "1.5"),
    ]


def test_integer_avg_is_numeric_like_postgres(state_dir):
    batches = [
        DiffBatch.inserts([(1,), (2,)]),
        DiffBatch.inserts([(2,)]),
        DiffBatch.inserts([(10000,), (20000,)]),
        DiffBatch.deletes([(1,), (2,), (2,)]),
        DiffBatch.inserts([(-1,), (-2,)]),
    ]
    got = [
        (str(a), s)
        for a, s in run_values(state_dir, [Aggregate("avg", 0), Aggregate("sum", 0)], batches)
    ]
    assert got == [
        ("1.5000000000000000", 3),
        ("1.6666666666666667", 5),
        ("6001.0000000000000000", 30005),
        ("15000.000000000000", 30000),
        ("7499.2500000000000000", 29997),
    ]


def test_float_sum_is_exact_after_deleting_a_huge_value(state_dir):
    def build(df, ins):
        return df.add(ReduceCollection((), [Aggregate("sum", 0)]), ins[0])

    batches = [
        DiffBatch.inserts([(1e20,), (1.0,), (0.1,)]),
        DiffBatch.deletes([(1e20,)]),
        DiffBatch.inserts([(math.inf,)]),
        DiffBatch.inserts([(-math.inf,)]),
        DiffBatch.deletes([(math.inf,), (-math.inf,)]),
    ]
    outs = run_once(build, [[b] for b in batches], state_dir)
    got = [next(r for r, w in o.diffs if w > 0)[0] for o in outs]
    assert got[0] == math.fsum([1e20, 1.0, 0.1]) and got[1] == 1.1
    assert got[2] == math.inf and math.isnan(got[3]) and got[4] == 1.1


def test_sum_and_min_of_no_values_are_null_and_counts_zero(state_dir):
    aggs = [
        Aggregate("sum", 1),
        Aggregate("min", 1),
        Aggregate("count", 1),
        Aggregate("count_star"),
    ]

    def build(df, ins):
        return df.add(ReduceCollection((0,), aggs), ins[0])

    outs = run_once(build, [[DiffBatch.inserts([("g", None), ("g", None)])]], state_dir)
    assert outs[0].diffs.counts() == {("g", None, None, 0, 2): 1}


def test_group_representative_is_kept_while_the_group_lives(state_dir):
    def build(df, ins):
        return df.add(ReduceCollection((0,), [Aggregate("count_star")]), ins[0])

    outs = run_once(
        build,
        [
            [DiffBatch.inserts([(Decimal("1.0"),)])],
            [DiffBatch.inserts([(1,)])],
            [DiffBatch.deletes([(Decimal("1.0"),)])],
        ],
        state_dir,
    )
    assert [list(o.diffs) for o in outs] == [
        [((Decimal("1.0"), 1), 1)],
        [((Decimal("1.0"), 1), -1), ((Decimal("1.0"), 2), 1)],
        [((Decimal("1.0"), 2), -1), ((Decimal("1.0"), 1), 1)],
    ]
    assert all(type(r[0]) is Decimal for o in outs for r in o.diffs.rows)


def test_interval_sum_and_avg(state_dir):
    from datetime import timedelta

    day = timedelta(days=1)
    batches = [
        DiffBatch.inserts([(day,), (-day,)]),
        DiffBatch.inserts([(timedelta(hours=3),)]),
        DiffBatch.deletes([(day,), (-day,), (timedelta(hours=3),)]),
    ]
    got = run_values(state_dir, [Aggregate("sum", 0), Aggregate("avg", 0)], batches)
    assert got == [
        (timedelta(0), timedelta(0)),
        (timedelta(hours=3), timedelta(hours=1)),
        (None, None),
    ]
    assert type(got[0][0]) is timedelta


def test_nan_group_keys_are_one_group(state_dir):
    def build(df, ins):
        return df.add(ReduceCollection((0,), [Aggregate("count_star")]), ins[0])

    a, b = float("nan"), float("nan")
    outs = run_once(
        build, [[DiffBatch.inserts([(a,), (b,)])], [DiffBatch.deletes([(a,), (b,)])]], state_dir
    )
    (row,) = outs[0].diffs.rows
    assert math.isnan(row[0]) and row[1] == 2 and outs[0].diffs.weights == [1]
    (gone,) = outs[1].diffs.rows
    assert math.isnan(gone[0]) and gone[1] == 2 and outs[1].diffs.weights == [-1]


def test_describe():
    rc = ReduceCollection(
        (0, 2), [Aggregate("sum", 3), Aggregate("min", 1), Aggregate("count_star", filter=4)]
    )
    assert (
        rc.describe() == "Reduce: group=[0,2] aggs=[sum(#3), min(#1), count(*) FILTER (WHERE #4)]"
    )


def test_aggregate_definition_is_validated():
    with pytest.raises(ValueError, match="unknown aggregate"):
        Aggregate("median", 1)
    with pytest.raises(ValueError, match="needs an argument"):
        Aggregate("sum")
    with pytest.raises(ValueError, match="only supported for string_agg"):
        Aggregate("min", 1, order_by=(2,))
