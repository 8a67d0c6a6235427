"""ColumnarReduceCollection against ReduceCollection (itself oracle-tested) on random streams.

Both collections see the same random transactions (NULLs, duplicate rows, deletes, FILTER
columns, numeric NaN, sums past 64 bits); after every time their accumulated outputs must be the
same multiset and equal a from-scratch GROUP BY. State is reopened from disk every few times,
and a rolled-back time (the sink failed) is replayed without leaving its writes in the cache.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import date, datetime
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.columnar_reduce import ColumnarReduceCollection, supports
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.columnar.arrow_types import to_arrow_column
from engine.dataflow.graph import Dataflow
from engine.dataflow.nan import NUMERIC_NAN
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import RandomTable, SideBySide, ZSetSink, pick

# columns: text key, int key, numeric(8,2) key, float key, int arg, numeric(12,2) arg, flag, big int,
# date, timestamp
TYPES = [
    pa.string(),
    pa.int64(),
    pa.decimal128(8, 2),
    pa.float64(),
    pa.int64(),
    pa.decimal128(12, 2),
    pa.bool_(),
    pa.int64(),
    pa.date32(),
    pa.timestamp("us"),
]
T_KEY, I_KEY, D_KEY, F_KEY, I_ARG, D_ARG, FLAG, BIG, DAY, TS = range(10)
DAYS = [date(2024, 2, 29), date(1999, 12, 31), date(1, 1, 1), None]
STAMPS = [datetime(2024, 1, 1, 12, 0, 0, 1), datetime(1970, 1, 1), datetime(1969, 12, 31, 23, 59)]
DECS = [Decimal("1.50"), Decimal("-2.25"), Decimal("0.00"), Decimal("99999.99"), Decimal("10.00")]


def make_row(rng, nan=False, inf=False):
    dec = pick(rng, DECS)
    if nan and rng.random() < 0.05:
        dec = NUMERIC_NAN  # the engine's one NaN (as CDC and population hand it out)
    elif inf and rng.random() < 0.05:
        dec = Decimal("Infinity") if rng.random() < 0.5 else Decimal("-Infinity")
    return (
        pick(rng, ["a", "b", ""]),
        pick(rng, [1, 2, 3]),
        pick(rng, [Decimal("1.00"), Decimal("2.50")] + ([NUMERIC_NAN] if nan else [])),
        pick(rng, [0.0, -0.0, 1.5]),
        pick(rng, [-5, 0, 7, 100]),
        dec,
        pick(rng, [True, False]),
        pick(rng, [2**62, -(2**62) + 1, 3]),
        pick(rng, DAYS),
        pick(rng, STAMPS),
    )


AGGS = [
    Aggregate("count_star"),
    Aggregate("count", I_ARG),
    Aggregate("sum", I_ARG),
    Aggregate("avg", I_ARG),
    Aggregate("sum", D_ARG),
    Aggregate("avg", D_ARG),
    Aggregate("count", D_ARG, filter=FLAG),
    Aggregate("sum", D_ARG, filter=FLAG),
    Aggregate("count_star", filter=FLAG),
    Aggregate("sum", BIG),
    Aggregate("avg", BIG),
    Aggregate("min", I_ARG),
    Aggregate("max", I_ARG),
    Aggregate("max", D_ARG),
    Aggregate("min", D_ARG, filter=FLAG),
    Aggregate("max", D_ARG, filter=FLAG),
    Aggregate("min", BIG),
    Aggregate("max", DAY),
    Aggregate("min", DAY),
    Aggregate("min", TS),
    Aggregate("count_distinct", I_ARG),
    Aggregate("count_distinct", D_ARG, filter=FLAG),
    Aggregate("count_distinct", DAY),
]
EXTREMES = [a for a in AGGS if a.kind in ("min", "max", "count_distinct")]


def _norm(row):
    return tuple(0.0 if isinstance(v, float) and v == 0 else v for v in row)


def _as_columns(batch):
    """The same diffs as an Arrow-columned batch (as a columnar source would deliver them)."""
    columns = [to_arrow_column([r[i] for r in batch.rows], t) for i, t in enumerate(TYPES)]
    return DiffBatch.from_columns(columns, np.asarray(batch.weights, dtype=np.int64))


def _drive(
    tmp_path, group, aggs, seed, times=60, nan=False, reopen_every=7, inf=False, columns=False
):
    rng = random.Random(seed)
    table = RandomTable(lambda r: make_row(r, nan, inf), rng, max_changes=12)
    sinks = {"row": ZSetSink(), "col": ZSetSink()}

    def build(kind, df):
        coll = (
            ReduceCollection(group, aggs)
            if kind == "row"
            else ColumnarReduceCollection(group, aggs, TYPES)
        )
        df.build(df.add(coll, df.input("a")))

    with SideBySide(tmp_path, build) as pair:
        flows = pair.flows
        for t in range(1, times + 1):
            batch = table.step()
            if rng.random() < 0.1:  # a time whose sink fails: rolled back, then replayed
                flows["col"].push("a", batch)
                flows["col"].time_end(t)
                flows["col"].abort()
            for kind, df in flows.items():
                if columns and kind == "col":
                    df.push("a", _as_columns(batch))
                else:
                    df.push("a", DiffBatch(list(batch.rows), list(batch.weights)))
                out = df.time_end(t)
                df.commit(t)
                sinks[kind].apply(out.diffs)
            got = Counter({_norm(r): n for r, n in sinks["col"].rows.items()})
            want = Counter({_norm(r): n for r, n in sinks["row"].rows.items()})
            assert got == want, f"time {t}: columnar {got - want} vs row {want - got}"
            pair.reopen_every(t, reopen_every)
    return sinks["col"]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    "group",
    [(T_KEY,), (I_KEY, D_KEY), (F_KEY, T_KEY), ()],
    ids=["text", "int+num", "float+text", "global"],
)
def test_columnar_reduce_equals_row_reduce(tmp_path, group, seed):
    out = _drive(tmp_path, list(group), AGGS, seed)
    if group:
        assert all(r[len(group)] > 0 for r in out.rows)  # count(*) of a live group


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    "group", [(T_KEY,), (I_KEY, D_KEY, F_KEY), ()], ids=["text", "mixed", "global"]
)
def test_columnar_input_equals_row_input(tmp_path, group, seed):
    """Arrow-columned deltas (a columnar source's) give what tuple rows give."""
    _drive(tmp_path, list(group), AGGS, seed, columns=True)


@pytest.mark.parametrize("seed", range(4))
def test_numeric_nan_in_sums(tmp_path, seed):
    _drive(tmp_path, [T_KEY], AGGS[4:8], seed, nan=True)


@pytest.mark.parametrize("seed", range(4))
def test_numeric_nan_in_group_keys(tmp_path, seed):
    _drive(tmp_path, [D_KEY, T_KEY], AGGS, seed, nan=True)


@pytest.mark.parametrize("seed", range(4))
def test_min_max_with_numeric_nan_and_infinity(tmp_path, seed):
    _drive(tmp_path, [I_KEY], [Aggregate("count_star"), *EXTREMES], seed, nan=True, inf=True)


def test_supports_what_it_computes():
    assert supports([pa.string()], AGGS, TYPES)
    assert not supports([None], AGGS, TYPES)
    assert not supports([pa.string()], [Aggregate("min", T_KEY)], TYPES)
    assert not supports([pa.string()], [Aggregate("max", F_KEY)], TYPES)
    assert not supports([pa.string()], [Aggregate("sum", F_KEY)], TYPES)
    with pytest.raises(ValueError):
        ColumnarReduceCollection([T_KEY], [Aggregate("max", T_KEY)], TYPES)


def test_cache_smaller_than_the_groups(tmp_path):
    """With room for few groups the cache evicts and rereads; results stay exact."""
    rng = random.Random(3)
    store = StateStore(tmp_path / "s")
    df = Dataflow(store)
    coll = ColumnarReduceCollection([I_ARG], [Aggregate("sum", D_ARG)], TYPES, cache_bytes=1)
    df.build(df.add(coll, df.input("a")))
    sink, rows = ZSetSink(), []
    try:
        for t in range(1, 40):
            batch = DiffBatch()
            for _ in range(30):
                r = (
                    None,
                    None,
                    None,
                    None,
                    rng.randrange(3000),
                    Decimal(rng.randrange(999)) / 100,
                    None,
                    None,
                    None,
                    None,
                )
                r = r[:5] + (Decimal(r[5]).quantize(Decimal("0.01")),) + r[6:]
                rows.append(r)
                batch.rows.append(r)
                batch.weights.append(1)
            df.push("a", batch)
            sink.apply(df.time_end(t).diffs)
            df.commit(t)
        want = Counter()
        sums: dict = {}
        for r in rows:
            sums[r[I_ARG]] = sums.get(r[I_ARG], 0) + r[D_ARG]
        want = Counter({(k, v): 1 for k, v in sums.items()})
        assert Counter(sink.rows) == want
        assert coll.groups.cached_groups <= coll.groups.max_groups
    finally:
        store.close()
