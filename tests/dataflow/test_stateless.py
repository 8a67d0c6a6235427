"""Randomized oracle tests of the stateless collections: filter, map, union, negate, fusion."""

from __future__ import annotations

import random

import pytest

from engine.dataflow.collections.filter import FilterCollection
from engine.dataflow.collections.fused_chain import FusedChainCollection
from engine.dataflow.collections.map import MapCollection
from engine.dataflow.collections.negate import NegateCollection
from engine.dataflow.collections.union import UnionCollection
from engine.dataflow.testing import OracleRun, RandomTable, pick


def row(rng):
    return (pick(rng, range(-3, 6)), pick(rng, ["a", "b", "c"]))


def gt1(rows):
    return [None if r[0] is None else r[0] > 1 for r in rows]


def double(rows):
    return [(None if r[0] is None else r[0] * 2, r[1]) for r in rows]


@pytest.mark.parametrize("seed", range(5))
def test_filter_map_chain_matches_recompute(state_dir, seed):
    rng = random.Random(seed)

    def build(df, ins):
        return df.add(MapCollection(double), df.add(FilterCollection(gt1), ins[0]))

    def reference(inputs):
        return [(r[0] * 2, r[1]) for r in inputs[0] if r[0] is not None and r[0] > 1]

    run = OracleRun(build, reference, [RandomTable(row, rng)], state_dir)
    assert run.run(400) > 1000


@pytest.mark.parametrize("seed", range(5))
def test_union_with_negated_input_is_zset_difference(state_dir, seed):
    rng = random.Random(seed)

    def build(df, ins):
        return df.add(UnionCollection(3), ins[0], df.add(NegateCollection(), ins[1]), ins[1])

    def reference(inputs):
        return inputs[0]  # a - b + b

    run = OracleRun(build, reference, [RandomTable(row, rng), RandomTable(row, rng)], state_dir)
    assert run.run(300) > 1000


def test_stateless_chain_is_fused_into_one_step(state_dir):
    from engine.dataflow.graph import Dataflow

    df = Dataflow()
    a = df.input("a")
    out = df.add(MapCollection(double), df.add(FilterCollection(gt1), a))
    df.build(out)
    fused = [n.collection for n in df._nodes if isinstance(n.collection, FusedChainCollection)]
    assert len(fused) == 1 and len(fused[0].steps) == 2
    assert "Fused[Filter -> Map]" in df.explain()


def test_evaluation_error_goes_to_errs_and_retracts(state_dir):
    from engine.dataflow.batch import DiffBatch
    from engine.dataflow.testing import run_once

    def build(df, ins):
        return df.add(MapCollection(lambda rows: [(10 // r[0],) for r in rows]), ins[0])

    outs = run_once(
        build,
        [[DiffBatch.inserts([(0,), (5,)])], [DiffBatch.deletes([(0,)])]],
        state_dir,
    )
    assert outs[0].diffs.counts() == {(2,): 1}
    assert outs[0].errs.counts() == {("division by zero",): 1}
    assert outs[1].diffs.counts() == {}
    assert outs[1].errs.counts() == {("division by zero",): -1}
