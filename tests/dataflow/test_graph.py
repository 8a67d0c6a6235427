"""Dataflow wiring: TimeEnd from every input, time order, commit/abort, sink spill, explain."""

from __future__ import annotations

import gc
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.collections.consolidate import ConsolidateCollection
from engine.dataflow.collections.union import UnionCollection
from engine.dataflow.graph import Dataflow
from engine.dataflow.spilled_columns import SpilledColumns
from engine.dataflow.spilled_output import SpilledOutput
from engine.dataflow.state.store import StateStore


class CountPerTime(StatefulCollection):
    """Test collection: at each time, emits (time, net rows seen per port) and remembers totals."""

    arity = 2

    def process(self, time, deltas):
        old = int(self.table.get(b"n") or b"0")
        new = old + sum(sum(d.weights) for d in deltas)
        self.table.put(b"n", str(new).encode())
        out = DiffBatch([(old,)], [-1]) if old else DiffBatch()
        return DiffBatch.concat([out, DiffBatch([(new,)], [1])])


def test_multi_input_collection_waits_for_every_input_and_sees_both(state_dir):
    with StateStore(state_dir) as store:
        df = Dataflow(store)
        a, b = df.input("a"), df.input("b")
        df.build(df.add(CountPerTime(), a, b))
        df.push("a", DiffBatch.inserts([(1,), (2,)]))
        df.push("b", DiffBatch.inserts([(3,)]))
        assert df.time_end(10).diffs.counts() == {(3,): 1}
        df.commit(10)
        df.push("b", DiffBatch.deletes([(3,)]))
        assert df.time_end(11).diffs.counts() == {(3,): -1, (2,): 1}


def test_time_must_grow_and_be_committed(state_dir):
    with StateStore(state_dir) as store:
        df = Dataflow(store)
        df.build(df.input("a"))
        df.time_end(1)
        with pytest.raises(RuntimeError, match="not committed"):
            df.time_end(2)
        df.commit(1)
        with pytest.raises(ValueError, match="not after"):
            df.time_end(1)


def test_abort_replays_the_time_from_committed_state(state_dir):
    with StateStore(state_dir) as store:
        df = Dataflow(store)
        a, b = df.input("a"), df.input("b")
        df.build(df.add(CountPerTime(), a, b))
        df.push("a", DiffBatch.inserts([(1,)]))
        df.time_end(1)
        df.abort()  # the sink failed: nothing of time 1 may stay
        df.push("a", DiffBatch.inserts([(1,)]))
        assert df.time_end(1).diffs.counts() == {(1,): 1}


def test_reopened_dataflow_resumes_after_committed_time(state_dir):
    def build(store):
        df = Dataflow(store)
        df.build(df.add(CountPerTime(), df.input("a"), df.input("b")))
        return df

    with StateStore(state_dir) as store:
        df = build(store)
        df.push("a", DiffBatch.inserts([(1,), (2,)]))
        df.time_end(1)
        df.commit(1)
    with StateStore(state_dir) as store:
        df = build(store)
        assert df.committed_time == 1
        df.push("b", DiffBatch.inserts([(9,)]))
        assert df.time_end(2).diffs.counts() == {(2,): -1, (3,): 1}


def test_sink_consolidates_in_a_spill_store_past_its_memory_limit(state_dir):
    sink = ConsolidateCollection(spill_rows=100)
    sink.open(StateStore(state_dir))
    for i in range(1000):
        sink.on_diffs(0, DiffBatch.inserts([(i % 300,), (i,)]))
    for i in range(1000):
        sink.on_diffs(0, DiffBatch.deletes([(i,)]))
    out = sink.on_time_end(1)
    assert sink.spilled
    expected = {}
    for i in range(1000):
        expected[(i % 300,)] = expected.get((i % 300,), 0) + 1
    assert out.counts() == expected


def test_a_sink_without_a_state_store_removes_its_scratch_directory():
    """Without a state store the spill goes to a temporary directory, removed once the sink and
    its spilled outputs are gone (an output is read after the sink that made it is gone)."""
    sink = ConsolidateCollection(spill_rows=100)
    sink.open(None)
    sink.on_diffs(0, DiffBatch.inserts([(i,) for i in range(500)]))
    out = sink.on_time_end(1)
    assert isinstance(out, SpilledOutput)
    scratch = sink._spill_dir
    assert scratch is not None and scratch.is_dir()
    del sink
    gc.collect()
    assert sorted(r for c in out.chunks() for r, _ in c) == [(i,) for i in range(500)]
    out.close()
    del out
    gc.collect()
    assert not scratch.exists()


def test_a_spilled_output_is_read_in_chunks_of_the_limit(state_dir):
    """Past ``spill_rows`` the time's output stays on disk (``SpilledOutput``): the sink reads it
    ``spill_rows`` rows at a time, each row once, with its net weight."""
    sink = ConsolidateCollection(spill_rows=100)
    sink.open(StateStore(state_dir))
    sink.on_diffs(0, DiffBatch.inserts([(i,) for i in range(1050)]))  # one batch past the limit
    sink.on_diffs(0, DiffBatch([(i,) for i in range(0, 1050, 2)], [1] * 525))
    sink.on_diffs(0, DiffBatch.deletes([(i,) for i in range(0, 1050, 3)]))
    out = sink.on_time_end(1)
    assert isinstance(out, SpilledOutput)
    expected = {(i,): 1 + (i % 2 == 0) - (i % 3 == 0) for i in range(1050)}
    expected = {r: w for r, w in expected.items() if w}
    assert len(out) == len(expected)
    chunks = list(out.chunks())
    assert max(len(c) for c in chunks) == 100
    assert sum(len(c) for c in chunks) == len(expected)
    assert dict(pair for c in chunks for pair in c) == expected
    out.close()


def _columnar(rows: list[tuple], weights: list[int]) -> DiffBatch:
    columns = list(zip(*rows, strict=True))
    types = [pa.int64(), pa.string(), pa.decimal128(12, 2), pa.float64()]
    arrays = [pa.array(list(c), t) for c, t in zip(columns, types, strict=True)]
    return DiffBatch.from_columns(arrays, np.asarray(weights, np.int64))


@pytest.mark.parametrize("spill_rows", [50, 7])
def test_columnar_times_past_the_limit_spill_as_arrow_partitions(state_dir, spill_rows):
    """Columnar batches past ``spill_rows`` go to Arrow files by hash partition
    (``SpilledColumns``): read back partition by partition, every row once with its net weight
    (equal rows of different batches meet: NULL, NaN, -0.0, text), chunks of at most the limit;
    with a tiny limit partitions are split again before they are read."""
    rnd = random.Random(spill_rows)
    nan = float("nan")
    pool = [
        (rnd.randrange(40), rnd.choice([None, "a", "b", "é"]),
         rnd.choice([None, Decimal("1.50"), Decimal("-2.00")]), rnd.choice([None, nan, -0.0, 0.0, 1.5]))
        for _ in range(400)
    ]  # fmt: skip
    sink = ConsolidateCollection(spill_rows=spill_rows)
    sink.open(StateStore(state_dir))
    expected = DiffBatch()
    for _ in range(30):
        rows = [rnd.choice(pool) for _ in range(60)]
        weights = [rnd.choice([-1, 1, 1, 2]) for _ in rows]
        sink.on_diffs(0, _columnar(rows, weights))
        expected = DiffBatch.concat([expected, DiffBatch(rows, weights)])
    out = sink.on_time_end(1)
    assert isinstance(out, SpilledColumns) and sink.spilled
    chunks = list(out.chunks())
    assert all(c.columns is not None and len(c) <= spill_rows for c in chunks)
    got = [pair for c in chunks for pair in c]
    key = lambda r: tuple(map(repr, r))  # noqa: E731 - NaN equals NaN by repr
    assert len({key(r) for r, _ in got}) == len(got)  # no row twice
    want = {key(r): w for r, w in expected.consolidate()}
    assert {key(r): w for r, w in got} == want
    out.close()


def test_a_row_batch_after_a_column_spill_joins_the_row_sums(state_dir):
    sink = ConsolidateCollection(spill_rows=20)
    sink.open(StateStore(state_dir))
    rows = [(i, "x", Decimal("1.00"), 0.5) for i in range(100)]
    sink.on_diffs(0, _columnar(rows, [1] * 100))
    sink.on_diffs(0, DiffBatch.deletes(rows[:30]))  # rows: the spilled columns become rows too
    out = sink.on_time_end(1)
    assert out.counts() == {r: 1 for r in rows[30:]}


def test_explain_marks_state_and_shared_nodes(state_dir):
    with StateStore(state_dir) as store:
        df = Dataflow(store)
        a = df.input("a")
        counted = df.add(CountPerTime(), a, a)
        df.build(df.add(UnionCollection(2), counted, counted))
        text = df.explain()
    assert text.splitlines()[0] == "#1 Consolidate (sink)"
    assert "CountPerTime  [state: 001_CountPerTime]" in text
    assert "-> (shared #3)" in text


def test_a_replayed_time_writes_its_state(state_dir):
    """abort() then the same time again: the stateful collection processes it anew (before the
    fix it skipped the replay, so the time's state writes were lost and later counts wrong)."""
    from engine.dataflow.aggregates import Aggregate
    from engine.dataflow.collections.reduce import ReduceCollection

    with StateStore(state_dir) as store:
        df = Dataflow(store)
        df.build(df.add(ReduceCollection([0], [Aggregate("count_star")]), df.input("a")))
        df.push("a", DiffBatch.inserts([("k",)]))
        df.time_end(1)
        df.abort()
        df.push("a", DiffBatch.inserts([("k",)]))
        assert df.time_end(1).diffs.counts() == {("k", 1): 1}
        df.commit(1)
        df.push("a", DiffBatch.inserts([("k",)]))
        assert df.time_end(2).diffs.counts() == {("k", 1): -1, ("k", 2): 1}
