"""ColumnarDistinctCollection against DistinctCollection (itself oracle-tested) on random streams.

Both collections see the same random times: table changes with NULLs and duplicate rows, rows
equal under SQL but not in form (NaN, -0.0 and 0.0, numeric 1.0/1.00/1, a numeric NaN and a
numeric past decimal128), weights above 1, transient negative counts within a time and negative
counts across times. After every time their accumulated outputs must be the same multiset *in
representation* (a -0.0 is not a 0.0 here: a retraction must name the row as it was emitted),
and, in runs without negative counts across times (which both forget), equal a from-scratch
DISTINCT of the table. State is reopened from
disk every few times; a time whose sink failed is rolled back and replayed; some times reach the
columnar collection as Arrow columns.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.columnar_distinct import ColumnarDistinctCollection, supports
from engine.dataflow.collections.distinct import DistinctCollection
from engine.dataflow.columnar.arrow_types import ColumnConversionError, to_arrow_column
from engine.dataflow.graph import Dataflow
from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.dataflow.state.keycodec import normalize_key
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import RandomTable, SideBySide, ZSetSink, pick

# int, numeric(12,2), float, date, timestamp, text, bool
TYPES = [
    pa.int64(),
    pa.decimal128(12, 2),
    pa.float64(),
    pa.date32(),
    pa.timestamp("us"),
    pa.string(),
    pa.bool_(),
]
INT, NUM, FLT, DATE, TS, TEXT, BOOL = range(7)
BIG = Decimal("1" + "0" * 37 + ".00")  # 40 digits: no decimal128 holds it
VALUES = [
    [1, 2, -3, 0, 2**40],
    [Decimal("1.00"), Decimal("1.0"), Decimal("1"), Decimal("-2.50"), Decimal("0.00")],
    [0.0, -0.0, NAN, 1.5, -2.25, math.inf],
    [dt.date(2024, 1, 1), dt.date(1999, 12, 31), dt.date(1, 1, 1)],
    [dt.datetime(2024, 1, 1, 12, 0, 0, 123456), dt.datetime(2024, 1, 1)],
    ["", "a", "a ", "é", "日本"],
    [True, False],
]


def make_row(rng, odd=False):
    row = [pick(rng, vs) for vs in VALUES]
    if odd and rng.random() < 0.1:
        row[NUM] = rng.choice([NUMERIC_NAN, BIG, -BIG])
    return tuple(row)


def _exact(v):
    """A value as the output must carry it: floats keep their sign of zero, numerics compare
    by value (the columnar path gives every numeric the column's scale)."""
    if isinstance(v, float):
        return ("float", "nan" if v != v else v, math.copysign(1.0, v))
    if isinstance(v, Decimal):
        return ("numeric", "nan" if v.is_nan() else v)
    return (type(v).__name__, v)


def exact(row):
    return tuple(map(_exact, row))


def _columnar(batch, types):
    """The batch as Arrow columns (None if a value does not fit its column)."""
    try:
        cols = [to_arrow_column([r[i] for r in batch.rows], t) for i, t in enumerate(types)]
    except ColumnConversionError:
        return None
    return DiffBatch.from_columns(cols, batch.column_weights)


def _stir(batch, rng, make, owed, negative):
    """The time's diffs with weights above 1, transient negative counts, and (``negative``)
    negative counts that the next time pays back (``owed``: rows taken away for one time)."""
    rows, weights = list(batch.rows), list(batch.weights)
    if rng.random() < 0.3:  # weights > 1
        c = DiffBatch(rows, weights).consolidate()
        rows, weights = list(c.rows), list(c.weights)
    if rng.random() < 0.3:  # a row goes below zero and back within the time
        r = make(rng)
        rows += [r, r, r]
        weights += [-2, 3, -1]
    for r in owed:  # pay back last time's negative counts
        rows.append(r)
        weights.append(1)
    owed.clear()
    if negative and rng.random() < 0.15:  # a negative count across times
        r = make(rng)
        rows.append(r)
        weights.append(-1)
        owed.append(r)
    order = list(range(len(rows)))
    rng.shuffle(order)
    return DiffBatch([rows[i] for i in order], [weights[i] for i in order])


def _drive(tmp_path, cols, seed, times=60, odd=False, negative=False, reopen_every=7):
    rng = random.Random(seed)
    types = [TYPES[i] for i in cols]

    def make(r):
        full = make_row(r, odd)
        return tuple(full[i] for i in cols)

    table = RandomTable(make, rng, max_changes=14)
    sinks = {"row": ZSetSink(), "col": ZSetSink()}
    raw = ZSetSink()  # the columnar output under SQL equality
    owed: list = []

    def build(kind, df):
        coll = DistinctCollection() if kind == "row" else ColumnarDistinctCollection(types)
        df.build(df.add(coll, df.input("a")))

    with SideBySide(tmp_path, build) as pair:
        flows = pair.flows
        for t in range(1, times + 1):
            batch = _stir(table.step(), rng, make, owed, negative)
            feeds, outs = {"row": batch, "col": batch}, {}
            if rng.random() < 0.3 and (cb := _columnar(batch, types)) is not None:
                feeds["col"] = cb
            if rng.random() < 0.1:  # a time whose sink fails: rolled back, then replayed
                flows["col"].push("a", feeds["col"])
                flows["col"].time_end(t)
                flows["col"].abort()
            for kind, df in flows.items():
                b = feeds[kind]
                if b.columns is None:
                    b = DiffBatch(list(b.rows), list(b.weights))
                df.push("a", b)
                out = df.time_end(t)
                df.commit(t)
                outs[kind] = out.diffs
                sinks[kind].apply(DiffBatch(list(map(exact, out.diffs.rows)), out.diffs.weights))
            got, want = Counter(sinks["col"].rows), Counter(sinks["row"].rows)
            assert got == want, f"time {t}: columnar {got - want} vs row {want - got}"
            raw.apply(outs["col"])
            if not negative:  # the DISTINCT of the table
                want_rows = Counter({normalize_key(r): 1 for r in table.rows})
                got_rows = Counter()
                for r, n in raw.rows.items():
                    got_rows[normalize_key(r)] += n
                assert got_rows == want_rows, f"time {t}: {got_rows - want_rows}"
            pair.reopen_every(t, reopen_every)
    return sinks["col"]


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(
    "cols",
    [
        (INT, NUM, FLT, DATE, TS, TEXT, BOOL),
        (FLT,),
        (NUM, TEXT),
        (DATE, TS, BOOL),
        (INT, FLT, NUM),
    ],
    ids=["all", "float", "num+text", "date+ts+bool", "int+float+num"],
)
def test_columnar_distinct_equals_row_distinct(tmp_path, cols, seed):
    _drive(tmp_path / "a", list(cols), seed)
    # a negative count is forgotten (DistinctCollection's contract): no table to compare with
    _drive(tmp_path / "b", list(cols), seed, negative=True)


@pytest.mark.parametrize("seed", range(3))
def test_numeric_nan_and_values_past_decimal128(tmp_path, seed):
    _drive(tmp_path / "a", [NUM, TEXT], seed, odd=True)
    _drive(tmp_path / "b", [NUM], seed + 10, odd=True)


def test_cache_smaller_than_the_rows(tmp_path):
    """With room for few rows' counts the cache evicts and rereads; results stay exact."""
    rng = random.Random(5)
    store = StateStore(tmp_path / "s")
    df = Dataflow(store)
    coll = ColumnarDistinctCollection([pa.int64(), pa.string()], cache_bytes=1)
    df.build(df.add(coll, df.input("a")))
    sink, live = ZSetSink(), Counter()
    try:
        for t in range(1, 40):
            batch = DiffBatch()
            for _ in range(200):
                r = (rng.randrange(3000), pick(rng, ["x", "y"]))
                w = -1 if live[r] and rng.random() < 0.4 else 1
                live[r] += w
                batch.rows.append(r)
                batch.weights.append(w)
            df.push("a", batch)
            sink.apply(df.time_end(t).diffs)
            df.commit(t)
            assert Counter(sink.rows) == Counter({r: 1 for r, n in live.items() if n > 0})
        assert coll.groups.cached_groups <= coll.groups.max_groups < 3000
    finally:
        store.close()


def test_representative_keeps_its_sign_of_zero(tmp_path):
    store = StateStore(tmp_path / "s")
    df = Dataflow(store)
    df.build(df.add(ColumnarDistinctCollection([pa.float64(), pa.int64()]), df.input("a")))
    try:
        outs = []
        for t, batch in enumerate(
            [
                DiffBatch([(-0.0, 1), (0.0, 1), (NAN, None)], [1, 1, 1]),
                DiffBatch([(0.0, 1), (float("nan"), None)], [-1, 1]),
                DiffBatch([(0.0, 1), (NAN, None)], [-1, -2]),
            ],
            start=1,
        ):
            df.push("a", batch)
            outs.append(df.time_end(t).diffs)
            df.commit(t)
        assert [exact(r) for r in outs[0].rows] == [exact((-0.0, 1)), exact((NAN, None))]
        assert outs[0].weights == [1, 1] and not outs[1]
        assert [exact(r) for r in outs[2].rows] == [exact((-0.0, 1)), exact((NAN, None))]
        assert outs[2].weights == [-1, -1]
        assert outs[2].rows[1][0] is NAN
    finally:
        store.close()


def test_supports_what_it_computes():
    assert supports(TYPES)
    assert supports([pa.decimal128(38, 4), pa.large_string(), pa.int32(), pa.float32()])
    assert not supports([])
    assert not supports([pa.int64(), None])
    assert not supports([pa.timestamp("us", tz="UTC")])
    assert not supports([pa.duration("us")])
    with pytest.raises(ValueError):
        ColumnarDistinctCollection([pa.int64(), None])
    assert ColumnarDistinctCollection(TYPES).describe() == "Distinct (columnar)"


def test_columnar_input_of_other_arrow_types(tmp_path):
    """A columnar batch whose columns have other Arrow types (a numeric at another scale, int32,
    large strings) counts its rows with the same rows given as tuples."""
    store = StateStore(tmp_path / "s")
    df = Dataflow(store)
    types = [pa.decimal128(12, 2), pa.int64(), pa.string()]
    df.build(df.add(ColumnarDistinctCollection(types), df.input("a")))
    try:
        given = DiffBatch.from_columns(
            [
                pa.array([Decimal("1.000"), Decimal("2.500")], pa.decimal128(38, 3)),
                pa.array([7, None], pa.int32()),
                pa.array(["x", ""], pa.large_string()),
            ],
            np.array([1, 2], dtype=np.int64),
        )
        df.push("a", given)
        first = df.time_end(1).diffs
        df.commit(1)
        assert first.rows == [(Decimal("1.00"), 7, "x"), (Decimal("2.50"), None, "")]
        df.push("a", DiffBatch([(Decimal("1.00"), 7, "x"), (Decimal("2.5"), None, "")], [-1, -2]))
        second = df.time_end(2).diffs
        df.commit(2)
        assert sorted(second.rows) == sorted(first.rows) and second.weights == [-1, -1]
    finally:
        store.close()
