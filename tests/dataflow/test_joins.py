"""Randomized oracle tests of the join family: inner, cross, outer, semi, anti, null-aware anti.

Every run feeds random inserts/deletes/duplicates (with NULLs) to both inputs, closes and reopens
the state from disk every few times, and after every time compares the accumulated output with a
plain nested-loop recomputation below, and the accumulated errs with the errors the residual
raises on the matching pairs.
"""

from __future__ import annotations

import pickle
import random
from collections import Counter
from decimal import Decimal

import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.anti_join import AntiJoinCollection
from engine.dataflow.collections.cross_join import CrossJoinCollection
from engine.dataflow.collections.join import InnerJoinCollection
from engine.dataflow.collections.outer_join import OuterJoinCollection
from engine.dataflow.collections.semi_join import SemiJoinCollection
from engine.dataflow.errs import error_message
from engine.dataflow.state import arrangement
from engine.dataflow.state.arrangement import (
    KEYS,
    LEFT,
    RIGHT,
    RIGHT_TOTALS,
    ROWS,
    key_entry,
    key_prefix,
    side_prefix,
)
from engine.dataflow.state.keycodec import encode_key
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import OracleRun, RandomTable, pick, run_once

# left rows (a, b, v), right rows (b, a, w): joined on left[0,1] = right[1,0]
LK, RK = (0, 1), (1, 0)
LEFT_ARITY, RIGHT_ARITY = 3, 3


def left_row(rng):
    return (pick(rng, range(3)), pick(rng, ["x", "y"]), pick(rng, range(-2, 4)))


def right_row(rng):
    return (pick(rng, ["x", "y"]), pick(rng, range(3)), pick(rng, range(-2, 4)))


def wide_left_row(rng):  # single-column key over more values, float spelling of some of them
    return (pick(rng, range(12), 0.1), pick(rng, range(-2, 4)))


def wide_right_row(rng):
    # 2.0 and 5.0 must meet the left's 2 and 5 (SQL equality); no input holds both spellings
    return (pick(rng, [0, 1, 3, 4, *range(6, 12), 2.0, 5.0], 0.1), pick(rng, range(-2, 4)))


def v_less_than_w(rows):
    """Residual over left+right: v < w (NULL if either is NULL)."""
    return [None if r[2] is None or r[5] is None else r[2] < r[5] for r in rows]


def div_residual(rows):
    """Residual that raises (division by zero) when w == 0: 6 // w > v."""
    out = []
    for r in rows:
        v, w = r[2], r[5]
        out.append(None if v is None or w is None else 6 // w > v)
    return out


def wide_div_residual(rows):
    return [None if r[1] is None or r[3] is None else 6 // r[3] > r[1] for r in rows]


# -- the from-scratch semantics ---------------------------------------------------------------
def key(row, idx):
    return tuple(row[i] for i in idx)


def evaluate_pair(residual, pair):
    """(passes, error message or None) of the residual on one concatenated row."""
    if residual is None:
        return True, None
    try:
        (value,) = residual([pair])
    except (ZeroDivisionError, ArithmeticError, ValueError) as e:
        return False, error_message(e)
    return value is True, None


def passes(lrow, rrow, lk, rk, residual):
    kl = key(lrow, lk)
    if any(v is None for v in kl) or kl != key(rrow, rk):
        return False
    return evaluate_pair(residual, lrow + rrow)[0]


def residual_errors(lefts, rights, lk, rk, residual):
    """The errs collection: one error per erroring pair of rows with equal, NULL-free keys."""
    errs = Counter()
    for lrow in lefts:
        kl = key(lrow, lk)
        if any(v is None for v in kl):
            continue
        for rrow in rights:
            if kl == key(rrow, rk):
                err = evaluate_pair(residual, lrow + rrow)[1]
                if err is not None:
                    errs[(err,)] += 1
    return errs


def ref_inner(lefts, rights, lk, rk, residual):
    out = [lrow + rrow for lrow in lefts for rrow in rights if passes(lrow, rrow, lk, rk, residual)]
    return out, residual_errors(lefts, rights, lk, rk, residual)


def ref_outer(kind, lefts, rights, lk, rk, residual):
    out, errs = ref_inner(lefts, rights, lk, rk, residual)
    if kind in ("left", "full"):
        for lrow in lefts:
            if not any(passes(lrow, rrow, lk, rk, residual) for rrow in rights):
                out.append(lrow + (None,) * RIGHT_ARITY)
    if kind in ("right", "full"):
        for rrow in rights:
            if not any(passes(lrow, rrow, lk, rk, residual) for lrow in lefts):
                out.append((None,) * LEFT_ARITY + rrow)
    return out, errs


def ref_semi(lefts, rights, lk, rk, residual, anti=False):
    out = [
        lrow
        for lrow in lefts
        if any(passes(lrow, rrow, lk, rk, residual) for rrow in rights) != anti
    ]
    return out, residual_errors(lefts, rights, lk, rk, residual)


def ref_not_in(lefts, rights, x, y):
    if not rights:
        return list(lefts)
    ys = [r[y] for r in rights]
    if any(v is None for v in ys):
        return []
    return [lrow for lrow in lefts if lrow[x] is not None and lrow[x] not in ys]


def checked_reference(run_ref, holder):
    """A reference for OracleRun that also checks the accumulated errs after every time."""

    def reference(inputs):
        rows, expected_errs = run_ref(inputs)
        got = Counter()
        for out in holder[0].outputs:
            for r, w in out.errs:
                got[r] += w
        got = +got
        assert got == expected_errs, f"errs: got {dict(got)}, expected {dict(expected_errs)}"
        return rows

    return reference


def oracle(state_dir, build, run_ref, tables, reopen=7):
    """An OracleRun that reopens the state from disk every ``reopen`` times (each reopen costs
    ~30 ms, so the longer runs reopen less often to keep the file fast)."""
    holder = []
    run = OracleRun(
        build, checked_reference(run_ref, holder), tables, state_dir, reopen_every=reopen
    )
    holder.append(run)
    return run


def two_tables(rng, lmake=left_row, rmake=right_row, max_changes=6, delete_ratio=0.5):
    return [
        RandomTable(lmake, rng, max_changes=max_changes, delete_ratio=delete_ratio),
        RandomTable(rmake, rng, max_changes=max_changes, delete_ratio=delete_ratio),
    ]


# -- inner and cross joins --------------------------------------------------------------------
def hot_rows(monkeypatch, hot: int, cold: int) -> None:
    """Move a key's side to row entries past ``hot`` rows, back at ``cold``: small limits make
    keys cross between the two layouts all the time."""
    monkeypatch.setattr(arrangement, "HOT_ROWS", hot)
    monkeypatch.setattr(arrangement, "COLD_ROWS", cold)


@pytest.mark.parametrize(
    ("residual", "reopen", "hot", "cold"),
    [(None, 7, 2, 1), (v_less_than_w, 29, 1, 0), (div_residual, 29, 3, 1), (None, 29, 32, 8)],
)
def test_inner_join_multi_column_hot_keys(state_dir, monkeypatch, residual, reopen, hot, cold):
    hot_rows(monkeypatch, hot, cold)
    rng = random.Random(reopen)

    def build(df, ins):
        return df.add(InnerJoinCollection(LK, RK, residual), ins[0], ins[1])

    def ref(inputs):
        return ref_inner(inputs[0], inputs[1], LK, RK, residual)

    tables = two_tables(rng, max_changes=8)
    assert oracle(state_dir, build, ref, tables, reopen).run(250) > 1500


def test_inner_join_single_column_wider_keys_numeric_equality(state_dir):
    rng = random.Random(100)

    def build(df, ins):
        return df.add(InnerJoinCollection([0], [0], wide_div_residual), ins[0], ins[1])

    def ref(inputs):
        return ref_inner(inputs[0], inputs[1], (0,), (0,), wide_div_residual)

    tables = two_tables(rng, wide_left_row, wide_right_row, max_changes=10)
    assert oracle(state_dir, build, ref, tables, reopen=29).run(200) > 1500


@pytest.mark.parametrize("residual", [None, div_residual])
def test_cross_join(state_dir, residual):
    rng = random.Random(7)

    def build(df, ins):
        return df.add(CrossJoinCollection(residual), ins[0], ins[1])

    def ref(inputs):
        return ref_inner(inputs[0], inputs[1], (), (), residual)

    tables = two_tables(rng, max_changes=3)
    assert oracle(state_dir, build, ref, tables, 7 if residual else 29).run(150) > 300


def composite_left(rng):  # a tuple-valued column: rows not "plain", matched by their encodings
    return (pick(rng, range(3)), pick(rng, ["x", "y"]), pick(rng, [(1, "a"), (2, "b"), (1, 2.5)]))


@pytest.mark.parametrize(("hot", "cold"), [(32, 8), (2, 1)])
def test_inner_join_rows_matched_by_encoding(state_dir, monkeypatch, hot, cold):
    hot_rows(monkeypatch, hot, cold)
    rng = random.Random(hot)

    def build(df, ins):
        return df.add(InnerJoinCollection(LK, RK), ins[0], ins[1])

    def ref(inputs):
        return ref_inner(inputs[0], inputs[1], LK, RK, None)

    tables = two_tables(rng, composite_left, right_row, max_changes=8)
    assert oracle(state_dir, build, ref, tables, reopen=29).run(150) > 800


def test_group_deltas_plain_rows():
    """Rows are matched with stored rows by Python equality only when that is encode_key's."""
    group = arrangement.group_deltas
    _, _, plain = group(DiffBatch.inserts([(1, "a", None), (2, Decimal("1.50"), 2.5)]), [0])
    assert plain
    for odd in [float("nan"), Decimal("NaN"), (1, 2)]:
        groups, _, plain = group(DiffBatch.inserts([(1, odd), (1.0, 3), (Decimal("1.00"), 4)]), [0])
        assert not plain
        assert list(groups) == [encode_key((1,))]
    groups, nulls, plain = group(DiffBatch([(None, 1), (2.0, 1), (2, 2)], [1, 1, -1]), [0])
    assert plain and nulls.rows == [(None, 1)]
    assert groups == {encode_key((2,)): [((2.0, 1), 1), ((2, 2), -1)]}


@pytest.mark.parametrize(("hot", "cold"), [(32, 8), (1, 0)])
def test_nan_rows_are_one_row_whatever_the_object(state_dir, monkeypatch, hot, cold):
    """float('nan') != float('nan'), yet a NaN row retracted through another NaN object is gone."""
    hot_rows(monkeypatch, hot, cold)

    def build(df, ins):
        return df.add(InnerJoinCollection([0], [0]), ins[0], ins[1])

    nan = float
    outs = run_once(
        build,
        [
            [DiffBatch.inserts([(1, nan("nan")), (1, 2.0)]), DiffBatch.inserts([(1, "r")])],
            [DiffBatch.deletes([(1, nan("nan"))]), DiffBatch()],
            [DiffBatch(), DiffBatch.inserts([(1, "s")])],
        ],
        state_dir,
    )
    assert len(outs[0].diffs) == 2
    assert [w for _, w in outs[1].diffs] == [-1]
    assert outs[2].diffs.counts() == {(1, 2.0, 1, "s"): 1}


# -- outer joins ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["left", "right", "full"])
@pytest.mark.parametrize("residual", [None, div_residual])
def test_outer_join(state_dir, monkeypatch, kind, residual):
    hot_rows(monkeypatch, *((32, 8) if kind == "left" else (2, 1)))
    rng = random.Random(len(kind) + (residual is None))

    def build(df, ins):
        return df.add(
            OuterJoinCollection(kind, LK, RK, LEFT_ARITY, RIGHT_ARITY, residual), ins[0], ins[1]
        )

    def ref(inputs):
        return ref_outer(kind, inputs[0], inputs[1], LK, RK, residual)

    reopen = 7 if kind == "full" and residual else 29
    assert oracle(state_dir, build, ref, two_tables(rng, max_changes=8), reopen).run(200) > 1000


# -- semi and anti joins ----------------------------------------------------------------------
@pytest.mark.parametrize("anti", [False, True])
@pytest.mark.parametrize("residual", [None, v_less_than_w, div_residual])
def test_semi_and_anti_join(state_dir, monkeypatch, anti, residual):
    if anti:
        hot_rows(monkeypatch, 2, 1)
    rng = random.Random(anti + 2 * (residual is None))
    cls = AntiJoinCollection if anti else SemiJoinCollection

    def build(df, ins):
        return df.add(cls(LK, RK, residual), ins[0], ins[1])

    def ref(inputs):
        return ref_semi(inputs[0], inputs[1], LK, RK, residual, anti=anti)

    # a right side that often runs empty, so keys gain and lose their last match
    tables = [
        RandomTable(left_row, rng, max_changes=8, delete_ratio=0.5),
        RandomTable(right_row, rng, max_changes=3, delete_ratio=0.6),
    ]
    reopen = 7 if (residual is None) != anti else 29
    assert oracle(state_dir, build, ref, tables, reopen).run(200) > 700


# Python-equal values in several spellings: DiffBatch consolidates them as one row, so a row may
# be retracted in another spelling than it was inserted in (1.5 vs 1.50, 2 vs 2.0).
SPELLINGS = [Decimal("1.5"), Decimal("1.50"), 2, 2.0, Decimal("2.00"), 0, Decimal("0.0"), -1]


def spelled_left(rng):
    return (pick(rng, [1, 1.0, Decimal("1.0"), 2]), pick(rng, ["x", "y"]), pick(rng, SPELLINGS))


def spelled_right(rng):
    return (pick(rng, ["x", "y"]), pick(rng, [1, Decimal("1"), 2, 2.0]), pick(rng, SPELLINGS))


@pytest.mark.parametrize(
    "make",
    [
        lambda r: InnerJoinCollection(LK, RK, div_residual),
        lambda r: OuterJoinCollection("full", LK, RK, LEFT_ARITY, RIGHT_ARITY, div_residual),
        lambda r: OuterJoinCollection("full", LK, RK, LEFT_ARITY, RIGHT_ARITY),
        lambda r: SemiJoinCollection(LK, RK, v_less_than_w),
        lambda r: AntiJoinCollection(LK, RK),
    ],
    ids=["inner", "full-residual", "full", "semi-residual", "anti"],
)
def test_rows_retracted_in_another_spelling(state_dir, make):
    rng = random.Random(11)
    coll = make(None)
    residual = coll.residual

    def build(df, ins):
        return df.add(coll, ins[0], ins[1])

    def ref(inputs):
        lefts, rights = inputs
        if isinstance(coll, OuterJoinCollection):
            return ref_outer("full", lefts, rights, LK, RK, residual)
        if isinstance(coll, SemiJoinCollection):
            return ref_semi(lefts, rights, LK, RK, residual)
        if isinstance(coll, AntiJoinCollection):
            return ref_semi(lefts, rights, LK, RK, residual, anti=True)
        return ref_inner(lefts, rights, LK, RK, residual)

    tables = two_tables(rng, spelled_left, spelled_right, max_changes=8)
    assert oracle(state_dir, build, ref, tables, reopen=29).run(100) > 400
    # one entry per equality class: no entry is left with a zero or negative weight
    with StateStore(state_dir) as store:
        weights = stored_weights(store.table(coll.name))
    assert weights and min(weights) > 0


def stored_weights(table) -> list[int]:
    """The weight of every stored row: in key entries and in hot sides' row entries."""
    weights = [pickle.loads(v)[1] for _, v in table.scan_prefix(ROWS)]
    for _, v in table.scan_prefix(KEYS):
        for part in pickle.loads(v):
            if isinstance(part, list):
                weights.extend(t[1] for t in part)
    return weights


def null_heavy_right(rng):
    return (pick(rng, range(6), 0.08), pick(rng, range(3)))


def null_left(rng):
    return (pick(rng, range(6), 0.2), pick(rng, ["p", "q"]))


@pytest.mark.parametrize("seed", range(2))
def test_null_aware_anti_join(state_dir, monkeypatch, seed):
    if seed:
        hot_rows(monkeypatch, 2, 1)
    rng = random.Random(seed)

    def build(df, ins):
        return df.add(AntiJoinCollection([0], [0], null_aware=True), ins[0], ins[1])

    def ref(inputs):
        return ref_not_in(inputs[0], inputs[1], 0, 0), Counter()

    # the right side keeps emptying out and gaining/losing NULLs
    tables = [
        RandomTable(null_left, rng, max_changes=8, delete_ratio=0.5),
        RandomTable(null_heavy_right, rng, max_changes=2, delete_ratio=0.6),
    ]
    run = oracle(state_dir, build, ref, tables, reopen=7 if seed == 0 else 29)
    modes = set()

    def watch(inputs, ref=run.reference):
        rights = inputs[1]
        modes.add("empty" if not rights else "null" if any(r[0] is None for r in rights) else "ok")
        return ref(inputs)

    run.reference = watch
    assert run.run(250) > 1000
    assert modes == {"empty", "null", "ok"}


def test_null_aware_anti_join_cases(state_dir):
    def build(df, ins):
        return df.add(AntiJoinCollection([0], [0], null_aware=True), ins[0], ins[1])

    ins = DiffBatch.inserts
    dels = DiffBatch.deletes
    outs = run_once(
        build,
        [
            [ins([(1,), (2,), (None,), (2,)]), DiffBatch()],  # right empty: all pass
            [DiffBatch(), ins([(2,)])],  # 1 passes
            [DiffBatch(), ins([(None,)])],  # a NULL on the right: none pass
            [ins([(3,)]), dels([(None,)])],  # back to normal: 1 and 3
            [DiffBatch(), dels([(2,)])],  # empty again: everything
        ],
        state_dir,
    )
    acc = Counter()
    seen = []
    for out in outs:
        for r, w in out.diffs:
            acc[r] += w
        seen.append(+acc)
    assert seen[0] == Counter({(1,): 1, (2,): 2, (None,): 1})
    assert seen[1] == Counter({(1,): 1})
    assert seen[2] == Counter()
    assert seen[3] == Counter({(1,): 1, (3,): 1})
    assert seen[4] == Counter({(1,): 1, (2,): 2, (None,): 1, (3,): 1})


# -- errors, hot keys, layout -----------------------------------------------------------------
def test_residual_errors_retract_when_the_row_goes(state_dir):
    def build(df, ins):
        return df.add(
            InnerJoinCollection([0], [0], lambda rows: [10 // r[3] > 0 for r in rows]),
            ins[0],
            ins[1],
        )

    outs = run_once(
        build,
        [
            [DiffBatch.inserts([(1, "a"), (1, "a")]), DiffBatch.inserts([(1, 0), (1, 5)])],
            [DiffBatch(), DiffBatch.deletes([(1, 0)])],
        ],
        state_dir,
    )
    assert outs[0].diffs.counts() == {(1, "a", 1, 5): 2}
    assert outs[0].errs.counts() == {("division by zero",): 2}
    assert outs[1].diffs.counts() == {}
    assert outs[1].errs.counts() == {("division by zero",): -2}


@pytest.mark.parametrize("kind", ["left", "full"])
def test_outer_join_errors_do_not_match_and_retract(state_dir, kind):
    def build(df, ins):
        return df.add(
            OuterJoinCollection(kind, [0], [0], 2, 2, lambda rows: [10 // r[3] > 0 for r in rows]),
            ins[0],
            ins[1],
        )

    outs = run_once(
        build,
        [
            [DiffBatch.inserts([(1, "a")]), DiffBatch.inserts([(1, 0)])],
            [DiffBatch(), DiffBatch.deletes([(1, 0)])],
        ],
        state_dir,
    )
    expected = {(1, "a", None, None): 1}
    if kind == "full":
        expected[(None, None, 1, 0)] = 1
    assert outs[0].diffs.counts() == expected
    assert outs[0].errs.counts() == {("division by zero",): 1}
    assert outs[1].errs.counts() == {("division by zero",): -1}


def test_hot_key_single_row_update_is_small(state_dir):
    """One key with 20k left rows: updating one of them writes two entries and emits two diffs
    (the key's entry, holding the right side and the left side's row count, is not rewritten)."""
    from engine.dataflow.graph import Dataflow

    with StateStore(state_dir) as store:
        df = Dataflow(store)
        a, b = df.input("a"), df.input("b")
        df.build(df.add(InnerJoinCollection([0], [0]), a, b))
        df.push("a", DiffBatch.inserts([(7, i) for i in range(20_000)]))
        df.push("b", DiffBatch.inserts([(7, "r")]))
        assert len(df.time_end(1).diffs) == 20_000
        df.commit(1)
        df.push("a", DiffBatch([(7, 5), (7, -5)], [-1, 1]))
        out = df.time_end(2)
        assert out.diffs.counts() == {(7, 5, 7, "r"): -1, (7, -5, 7, "r"): 1}
        assert store._staged == 2  # delete one entry, put one entry
        df.commit(2)


def test_key_layout_is_prefix_free():
    """No key's (or side's) prefix starts another key's entry, whatever the key values."""
    keys = [("a",), ("a", "b"), ("a,",), ("a'",), (1,), (11,), (1, 1), ("1",), (None,), ()]
    entries = [
        (k, side, side_prefix(encode_key(k), side) + encode_key(("any", "row")))
        for k in keys
        for side in (LEFT, RIGHT)
    ]
    for k1 in keys:
        for side1 in (LEFT, RIGHT):
            p1 = side_prefix(encode_key(k1), side1)
            for k2, side2, entry in entries:
                assert entry.startswith(p1) == (k1 == k2 and side1 == side2), (k1, k2)
            assert not key_prefix(RIGHT_TOTALS, encode_key(k1)).startswith(p1[:-1])
            for k2 in keys:
                assert key_entry(encode_key(k2)).startswith(key_entry(encode_key(k1))) == (k1 == k2)
                assert not key_entry(encode_key(k2)).startswith(p1[:-1])


def test_keys_that_are_textual_prefixes_do_not_collide(state_dir):
    lefts = [(1, "l1"), (11, "l11"), ("a", "la"), ("a'", "lq"), ("a,", "lc")]
    rights = [(1, "r1"), (11, "r11"), ("a", "ra"), ("a'", "rq"), ("a,", "rc")]

    def build(df, ins):
        return df.add(InnerJoinCollection([0], [0]), ins[0], ins[1])

    outs = run_once(
        build,
        [
            [DiffBatch.inserts(lefts), DiffBatch()],
            [DiffBatch(), DiffBatch.inserts(rights)],
            [DiffBatch.deletes(lefts[:1]), DiffBatch.deletes(rights[1:2])],
        ],
        state_dir,
    )
    assert outs[1].diffs.counts() == {
        lrow + rrow: 1 for lrow, rrow in zip(lefts, rights, strict=True)
    }
    assert outs[2].diffs.counts() == {lefts[0] + rights[0]: -1, lefts[1] + rights[1]: -1}


def test_describe_and_validation():
    assert InnerJoinCollection([0, 2], [1, 0]).describe() == "InnerJoin: left[0,2] = right[1,0]"
    assert (
        InnerJoinCollection([0], [1], v_less_than_w, "l.v < r.w").describe()
        == "InnerJoin: left[0] = right[1] AND l.v < r.w"
    )
    assert CrossJoinCollection().describe() == "CrossJoin"
    assert CrossJoinCollection(v_less_than_w, "a < b").describe() == "CrossJoin: a < b"
    assert (
        OuterJoinCollection("full", [0], [0], 2, 2).describe()
        == "FullOuterJoin: left[0] = right[0]"
    )
    assert SemiJoinCollection([1], [0]).describe() == "SemiJoin: left[1] = right[0]"
    assert AntiJoinCollection([1], [0]).describe() == "AntiJoin: left[1] = right[0]"
    assert (
        AntiJoinCollection([1], [0], null_aware=True).describe()
        == "NullAwareAntiJoin: left[1] NOT IN right[0]"
    )
    with pytest.raises(ValueError, match="one column"):
        AntiJoinCollection([0, 1], [0, 1], null_aware=True)
    with pytest.raises(ValueError, match="differ in length"):
        InnerJoinCollection([0, 1], [0])
    with pytest.raises(ValueError, match="kind"):
        OuterJoinCollection("inner", [0], [0], 1, 1)
