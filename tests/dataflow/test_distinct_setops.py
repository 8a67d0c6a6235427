"""Randomized oracle tests of DistinctCollection and SetOperationCollection (INTERSECT/EXCEPT [ALL]).

Rows carry NULLs (equal to each other here, as SQL's DISTINCT and set operations want), duplicate
rows and numeric-equal values (1 vs Decimal('1.0')); the state is reopened from disk every few
times.
"""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.distinct import DistinctCollection
from engine.dataflow.collections.set_operation import SetOperationCollection
from engine.dataflow.state.keycodec import normalize_key
from engine.dataflow.testing import OracleRun, RandomTable, pick, run_once

NUMS = [1, Decimal("1.0"), 2, Decimal("2.00"), 3, 11]
TEXTS = ["a", "b", "ab"]
FLOATS = [0.5, -1.25]


def make_row(rng):
    return (pick(rng, NUMS), pick(rng, TEXTS), pick(rng, FLOATS, null_ratio=0.5))


def canonical(row):
    """Rows compare by SQL value (1 = Decimal('1.0')); the representative may be either."""
    return normalize_key(row)


def oracle(state_dir, seed, build, reference, ntables, steps):
    rng = random.Random(seed)
    tables = [RandomTable(make_row, rng, max_changes=10) for _ in range(ntables)]
    run = OracleRun(build, reference, tables, state_dir, reopen_every=7, compare=canonical)
    return run.run(steps)


def counts(rows):
    return Counter(map(canonical, rows))


# -- distinct -------------------------------------------------------------------------------------
def ref_distinct(inputs):
    return list(counts(inputs[0]))


@pytest.mark.parametrize("seed", range(3))
def test_distinct_matches_recompute(state_dir, seed):
    def build(df, ins):
        return df.add(DistinctCollection(), ins[0])

    assert oracle(state_dir, seed, build, ref_distinct, 1, 400) > 1600


def test_distinct_keeps_its_representative_and_treats_nulls_as_equal(state_dir):
    def build(df, ins):
        return df.add(DistinctCollection(), ins[0])

    outs = run_once(
        build,
        [
            [DiffBatch.inserts([(Decimal("1.0"), None), (1, None), (None, None)])],
            [DiffBatch.deletes([(Decimal("1.0"), None)])],
            [DiffBatch.deletes([(1, None), (None, None)])],
        ],
        state_dir,
    )
    assert list(outs[0].diffs) == [((Decimal("1.0"), None), 1), ((None, None), 1)]
    assert list(outs[1].diffs) == []
    assert list(outs[2].diffs) == [((Decimal("1.0"), None), -1), ((None, None), -1)]
    assert type(outs[2].diffs.rows[0][0]) is Decimal


# -- set operations -------------------------------------------------------------------------------
def ref_setop(kind):
    def reference(inputs):
        a, b = counts(inputs[0]), counts(inputs[1])
        out = []
        for row in a.keys() | b.keys():
            x, y = a[row], b[row]
            n = {
                "intersect": 1 if x and y else 0,
                "intersect_all": min(x, y),
                "except": 1 if x and not y else 0,
                "except_all": max(x - y, 0),
            }[kind]
            out.extend([row] * n)
        return out

    return reference


@pytest.mark.parametrize("kind", ["intersect", "intersect_all", "except", "except_all"])
@pytest.mark.parametrize("seed", range(2))
def test_set_operation_matches_recompute(state_dir, kind, seed):
    def build(df, ins):
        return df.add(SetOperationCollection(kind), ins[0], ins[1])

    assert oracle(state_dir, seed, build, ref_setop(kind), 2, 200) > 1600


def test_except_all_counts_and_nulls(state_dir):
    def build(df, ins):
        return df.add(SetOperationCollection("except_all"), ins[0], ins[1])

    a = DiffBatch.inserts([(None,), (None,), (None,), (1,)])
    b = DiffBatch.inserts([(None,), (Decimal("1.00"),)])
    outs = run_once(
        build,
        [[a, DiffBatch()], [DiffBatch(), b], [DiffBatch(), DiffBatch.deletes(b.rows)]],
        state_dir,
    )
    assert outs[0].diffs.counts() == {(None,): 3, (1,): 1}
    assert outs[1].diffs.counts() == {(None,): -1, (1,): -1}
    assert outs[2].diffs.counts() == {(None,): 1, (1,): 1}


def test_set_operation_rejects_unknown_kind_and_describes_itself():
    with pytest.raises(ValueError, match="unknown set operation"):
        SetOperationCollection("union")
    assert SetOperationCollection("intersect_all").describe() == "SetOperation: INTERSECT ALL"
    assert DistinctCollection().describe() == "Distinct"
