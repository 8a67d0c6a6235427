"""deferred_updates: population's collections fed by reduces process once, at the last time, and
the result is the one every time would have given."""

from __future__ import annotations

import contextlib
import random
from collections import Counter

from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.join import InnerJoinCollection
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.collections.top_k import TopKCollection
from engine.dataflow.collections.union import UnionCollection
from engine.dataflow.deferred_updates import deferred, held_nodes
from engine.dataflow.graph import Dataflow
from engine.dataflow.state.store import StateStore


class CountingTopK(TopKCollection):
    """A top-k that counts its ``process`` calls."""

    calls = 0

    def process(self, time, deltas):
        type(self).calls += 1
        return super().process(time, deltas)


def _build(store):
    """sales(region, amount) -> sum per region -> top 2 regions; and a join of the sums with a
    source (regions(region, name)), which must not be held."""
    df = Dataflow(store)
    sales, regions = df.input("sales"), df.input("regions")
    sums = df.add(ReduceCollection((0,), [Aggregate("sum", 1)]), sales)
    top = df.add(CountingTopK((), (1,), (True,), limit=2), sums)
    joined = df.add(InnerJoinCollection((0,), (0,)), sums, regions)
    df.build(df.add(UnionCollection(2), top, joined))
    return df, top, joined


def _chunks(seed: int, times: int) -> list[list[tuple]]:
    rng = random.Random(seed)
    return [[(rng.randrange(6), rng.randrange(1, 100)) for _ in range(40)] for _ in range(times)]


REGIONS = [(r, f"region {r}") for r in range(0, 8, 2)]


def _time(df, t: int, rows: list[tuple], out: Counter) -> None:
    """One time: ``rows`` of sales in, the output added to ``out``, committed."""
    df.push("sales", DiffBatch.inserts(rows))
    for r, w in df.time_end(t).diffs:
        out[r] += w
    df.commit(t)


def _populate(tmp_path, chunks, defer: bool) -> Counter:
    out: Counter = Counter()
    with StateStore(tmp_path / ("deferred" if defer else "plain")) as store:
        df, top, _ = _build(store)
        CountingTopK.calls = 0
        df.push("regions", DiffBatch.inserts(REGIONS))
        with deferred(df) if defer else contextlib.nullcontext([top]) as held:
            assert [n.collection for n in held] == [top.collection]
            for t, rows in enumerate(chunks, 1):
                _time(df, t, rows, out)
            if defer:
                assert CountingTopK.calls == 0, "a held top-k processed before the last time"
        _time(df, len(chunks) + 1, [], out)
        assert CountingTopK.calls == (1 if defer else len(chunks))
        # the state after the last time serves later changes alike
        _time(df, len(chunks) + 2, [(9, 10_000)], out)
    return Counter({r: w for r, w in out.items() if w})


def test_a_held_top_k_gives_the_result_of_every_time(tmp_path):
    for seed in range(5):
        chunks = _chunks(seed, 12)
        got = _populate(tmp_path / f"s{seed}", chunks, defer=True)
        want = _populate(tmp_path / f"s{seed}", chunks, defer=False)
        assert got == want and got, f"seed {seed}: {got - want} vs {want - got}"


def test_a_join_with_a_source_input_is_not_held(state_dir):
    """A collection with an input from a source would buffer that source: only the top-k (fed
    by the reduce alone) is held, not the join of the sums with the regions table."""
    with StateStore(state_dir) as store:
        df, top, joined = _build(store)
        held = held_nodes(df)
        assert top in held and joined not in held
