"""ColumnarTopKCollection against TopKCollection (itself oracle-tested) on random streams.

Both see the same random times: inserts with NULLs in partition and order columns, ties on the
order columns (broken by the row's identity bytes in both), whole duplicate rows, weights above 1
and transient negative counts within a time, deletes in bursts that empty partitions below the
limit and inserts that grow them back. After every time their outputs must be the same Z-set, in
representation (a numeric compares by value: the columnar one gives the column's scale). State
is reopened from disk every few times; some times are rolled back (the sink failed) and
replayed; some reach the columnar collection as Arrow columns. Small slacks make the heads cut
and refill all the time.
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
from engine.dataflow.collections.columnar_top_k import ColumnarTopKCollection, supports
from engine.dataflow.collections.top_k import TopKCollection
from engine.dataflow.columnar import top_k_select as sel
from engine.dataflow.columnar.arrow_types import ColumnConversionError, to_arrow_column
from engine.dataflow.graph import Dataflow
from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import SideBySide, ZSetSink, pick

# part text, part int, order int, order numeric(12,2), text, float, date, timestamp, bool
TYPES = [
    pa.string(),
    pa.int64(),
    pa.int64(),
    pa.decimal128(12, 2),
    pa.string(),
    pa.float64(),
    pa.date32(),
    pa.timestamp("us"),
    pa.bool_(),
]
PTEXT, PINT, OINT, ONUM, TEXT, FLT, DATE, TS, BOOL = range(9)
VALUES = [
    ["a", "b", "ab", "a'", "é"],
    [1, 2, 3],
    list(range(-3, 5)),
    [Decimal("1.00"), Decimal("1.0"), Decimal("2.50"), Decimal("-0.50"), NUMERIC_NAN],
    ["x", "y", "xy", "", "it's"],
    [0.0, -0.0, NAN, 1.5, -2.25, math.inf],
    [dt.date(2024, 1, 1), dt.date(1999, 12, 31)],
    [dt.datetime(2024, 1, 1, 12, 0, 0, 5), dt.datetime(2024, 1, 1)],
    [True, False],
]


def make_row(rng, parts=None):
    row = [pick(rng, vs) for vs in VALUES]
    if parts is not None:
        row[PTEXT], row[PINT] = parts
    return tuple(row)


def _exact(v):
    if isinstance(v, float):
        return ("float", "nan" if v != v else v, math.copysign(1.0, v))
    if isinstance(v, Decimal):
        return ("numeric", "nan" if v.is_nan() else v)
    return (type(v).__name__, v)


def exact(row):
    return tuple(map(_exact, row))


def _columnar(batch):
    try:
        cols = [to_arrow_column([r[i] for r in batch.rows], t) for i, t in enumerate(TYPES)]
    except ColumnConversionError:  # a numeric NaN: no decimal128 holds it
        return None
    return DiffBatch.from_columns(cols, batch.column_weights)


class Table:
    """A random writer: rows as a multiset, deletes of rows that exist, bursts per partition."""

    def __init__(self, rng):
        self.rng = rng
        self.rows: list[tuple] = []

    def step(self) -> DiffBatch:
        rng, out = self.rng, DiffBatch()
        kind = rng.random()
        if kind < 0.08 and self.rows:  # a partition loses most of its rows
            p = rng.choice(self.rows)[:2]
            gone = [r for r in self.rows if r[:2] == p and rng.random() < 0.8]
            for r in gone:
                self.rows.remove(r)
            out.rows += gone
            out.weights += [-1] * len(gone)
            return out
        if kind < 0.14:  # a partition grows by many rows
            p = (pick(rng, VALUES[PTEXT]), pick(rng, VALUES[PINT]))
            new = [make_row(rng, p) for _ in range(rng.randint(5, 15))]
            self.rows += new
            out.rows += new
            out.weights += [1] * len(new)
            return out
        for _ in range(rng.randint(0, 12)):
            if self.rows and rng.random() < 0.4:
                r = self.rows.pop(rng.randrange(len(self.rows)))
                out.rows.append(r)
                out.weights.append(-1)
            else:
                r = rng.choice(self.rows) if self.rows and rng.random() < 0.2 else make_row(rng)
                self.rows.append(r)
                out.rows.append(r)
                out.weights.append(1)
        return out


def _sql_equal(row):
    """A row's identity under SQL equality (-0.0 = 0.0, NaN = NaN, 1.0 = 1.00)."""
    out = []
    for v in row:
        if isinstance(v, float):
            v = "nan" if v != v else v + 0.0
        elif isinstance(v, Decimal) and v.is_nan():
            v = "nan"
        out.append(v)
    return tuple(out)


class UniqueTable(Table):
    """A random writer whose table never holds a row twice (a primary key's table): inserts of
    rows not there, deletes, updates (-old +new in one time) that move a row in its order."""

    def __init__(self, rng):
        super().__init__(rng)
        self.live: set[tuple] = set()

    def _insert(self, row, out) -> None:
        if _sql_equal(row) not in self.live:
            self.live.add(_sql_equal(row))
            self.rows.append(row)
            out.rows.append(row)
            out.weights.append(1)

    def _delete(self, i, out) -> None:
        row = self.rows.pop(i)
        self.live.discard(_sql_equal(row))
        out.rows.append(row)
        out.weights.append(-1)

    def step(self) -> DiffBatch:
        rng, out = self.rng, DiffBatch()
        kind = rng.random()
        if kind < 0.08 and self.rows:  # a partition loses most of its rows
            p = rng.choice(self.rows)[:2]
            for i in reversed(range(len(self.rows))):
                if self.rows[i][:2] == p and rng.random() < 0.8:
                    self._delete(i, out)
            return out
        if kind < 0.14:  # a partition grows by many rows
            p = (pick(rng, VALUES[PTEXT]), pick(rng, VALUES[PINT]))
            for _ in range(rng.randint(5, 15)):
                self._insert(make_row(rng, p), out)
            return out
        for _ in range(rng.randint(0, 12)):
            r = rng.random()
            if self.rows and r < 0.3:
                self._delete(rng.randrange(len(self.rows)), out)
            elif self.rows and r < 0.6:  # an update: the same row with other order values
                old = self.rows[rng.randrange(len(self.rows))]
                new = list(make_row(rng, old[:2]))
                new[TEXT:] = old[TEXT:]
                if _sql_equal(new) not in self.live:
                    self._delete(self.rows.index(old), out)
                    self._insert(tuple(new), out)
            else:
                self._insert(make_row(rng), out)
        return out


def _stir(batch, rng, owed=None):
    """Weights above 1 and a transient negative count within the time; with ``owed``, negative
    counts across times too (a row taken away for a time, then paid back)."""
    rows, weights = list(batch.rows), list(batch.weights)
    if owed is not None:
        rows += owed
        weights += [1] * len(owed)
        owed.clear()
        if rng.random() < 0.2:
            r = make_row(rng)
            rows.append(r)
            weights.append(-1)
            owed.append(r)
    if rng.random() < 0.3:
        c = DiffBatch(rows, weights).consolidate()
        rows, weights = list(c.rows), list(c.weights)
    if rng.random() < 0.2:
        r = make_row(rng)
        rows += [r, r, r]
        weights += [-2, 3, -1]
    order = list(range(len(rows)))
    rng.shuffle(order)
    return DiffBatch([rows[i] for i in order], [weights[i] for i in order])


def drive(
    tmp_path, seed, times=150, reopen_every=9, cache_bytes=64 << 20, negative=False,
    unique=False, **kw,
):  # fmt: skip
    """``unique``: the rows never repeat (``UniqueTable``, no weights above 1) and the columnar
    top-k is told so (``unique_rows``)."""
    rng = random.Random(seed)
    kw.setdefault("nulls_first", None)
    kw.setdefault("offset", 0)
    kw.setdefault("emit_rank", False)
    slack = kw.pop("slack", 1)
    table = UniqueTable(rng) if unique else Table(rng)
    owed: list | None = [] if negative else None
    sinks = {"row": ZSetSink(), "col": ZSetSink()}
    cols = []

    def build(kind, df):
        if kind == "row":
            coll = TopKCollection(**kw)
        else:
            coll = ColumnarTopKCollection(
                TYPES, cache_bytes=cache_bytes, slack=slack, unique_rows=unique, **kw
            )
            cols.append(coll)
        df.build(df.add(coll, df.input("a")))

    with SideBySide(tmp_path, build) as pair:
        flows = pair.flows
        for t in range(1, times + 1):
            batch = table.step() if unique else _stir(table.step(), rng, owed)
            feeds = {"row": batch, "col": batch}
            if rng.random() < 0.3 and (cb := _columnar(batch)) is not None:
                feeds["col"] = cb
            if rng.random() < 0.1:  # the sink failed: rolled back, then replayed
                flows["col"].push("a", feeds["col"])
                flows["col"].time_end(t)
                flows["col"].abort()
            outs = {}
            for kind, df in flows.items():
                b = feeds[kind]
                if b.columns is None:
                    b = DiffBatch(list(b.rows), list(b.weights))
                df.push("a", b)
                out = df.time_end(t).diffs
                df.commit(t)
                outs[kind] = Counter()
                for r, w in zip(map(exact, out.rows), out.weights, strict=True):
                    outs[kind][r] += w
                sinks[kind].apply(DiffBatch(list(map(exact, out.rows)), out.weights))
            got = +outs["col"] + (-outs["col"])
            want = +outs["row"] + (-outs["row"])
            assert {k: v for k, v in outs["col"].items() if v} == {
                k: v for k, v in outs["row"].items() if v
            }, f"time {t}: columnar {got} vs row {want}"
            pair.reopen_every(t, reopen_every)
    return cols


PER_PARTITION = [
    dict(partition_key=[PTEXT, PINT], order_by=[OINT], descending=[True], limit=3),
    dict(
        partition_key=[PTEXT],
        order_by=[ONUM, OINT],
        descending=[False, True],
        limit=2,
        offset=1,
        nulls_first=[True, None],
    ),
    dict(
        partition_key=[PINT],
        order_by=[TEXT, FLT],
        descending=[True, False],
        limit=4,
        nulls_first=[False, True],
        emit_rank=True,
    ),
    dict(
        partition_key=[PTEXT, PINT],
        order_by=[DATE, TS, BOOL],
        descending=[False, True, False],
        limit=1,
    ),
    dict(
        partition_key=[PINT], order_by=[OINT], descending=[False], limit=2, offset=2, emit_rank=True
    ),
    # numeric NaN, float NaN and -0.0 = 0.0 as partition values
    dict(partition_key=[ONUM, FLT], order_by=[OINT, TEXT], descending=[True, False], limit=2),
]


def _worked(cols):
    """How often the instances (one per reopen) skipped, refilled and cut."""
    return [sum(getattr(c, k) for c in cols) for k in ("skipped", "refills", "cuts")]


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("spec", range(len(PER_PARTITION)))
def test_per_partition_top_k_equals_row_top_k(tmp_path, spec, seed):
    cols = drive(tmp_path, 100 * spec + seed, **PER_PARTITION[spec])
    assert all(_worked(cols)), _worked(cols)  # every path of a time ran


@pytest.mark.parametrize("spec", range(len(PER_PARTITION)))
def test_unique_rows_equal_the_row_top_k(tmp_path, spec):
    """Told that its input never holds a row twice, the columnar top-k writes the changes past
    the heads unread (-1 deletes the row's entry, +1 creates it): the same output as the row
    top-k on a table of unique rows, and every path of a time ran."""
    cols = drive(tmp_path, 700 + spec, unique=True, **PER_PARTITION[spec])
    assert all(_worked(cols)), _worked(cols)


def test_unique_rows_refuse_a_row_counted_twice(tmp_path):
    """A change of +2 past a head contradicts the planner's derivation: the time fails loudly
    (rolled back by the caller) rather than storing a count the state cannot hold."""
    store = StateStore(tmp_path / "s")
    df = Dataflow(store)
    coll = ColumnarTopKCollection(
        [pa.int64(), pa.int64()], [0], [1], [True], limit=1, unique_rows=True
    )
    df.build(df.add(coll, df.input("a")))
    try:
        df.push("a", DiffBatch.inserts([(0, v) for v in range(10)]))
        df.time_end(1)
        df.commit(1)
        df.push("a", DiffBatch([(0, -5)], [2]))
        with pytest.raises(AssertionError, match="unique rows"):
            df.time_end(2)
    finally:
        store.close()


@pytest.mark.parametrize(("seed", "limit", "offset"), [(0, 5, 2), (1, 40, 0), (2, 1, 0)])
def test_global_order_by_limit_equals_row_top_k(tmp_path, seed, limit, offset):
    drive(
        tmp_path, seed, partition_key=[], order_by=[OINT, ONUM], descending=[False, True],
        limit=limit, offset=offset,
    )  # fmt: skip


@pytest.mark.parametrize("spec", [0, 2])
def test_negative_counts_across_times(tmp_path, spec):
    """A row deleted before it exists holds a negative count for a time (no position), in the
    head and in the tail alike, as in the row top-k."""
    drive(tmp_path, 50 + spec, negative=True, **PER_PARTITION[spec])


@pytest.mark.slow
def test_large_slack_and_no_cache(tmp_path):
    """No head stays in memory (every time reads heads from state); a slack of 8."""
    drive(tmp_path / "a", 7, cache_bytes=0, slack=8, **PER_PARTITION[0])
    drive(tmp_path / "b", 8, cache_bytes=0, slack=0, **PER_PARTITION[2])


def test_selection_kernels_match_a_loop():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(0, 30)
        part = np.sort(np.array([rng.randrange(4) for _ in range(n)], np.int64))
        counts = np.array([rng.randint(-1, 3) for _ in range(n)], np.int64)
        lo = rng.randint(0, 3)
        hi = lo + rng.randint(1, 4)
        starts = sel.live_starts(part, counts)
        chosen = sel.selected(starts, counts, lo, hi)
        rows, ranks = sel.ranked(starts, chosen, lo)
        want_rows, want_ranks, pos, prev = [], [], 0, None
        for i in range(n):
            if part[i] != prev:
                pos, prev = 0, part[i]
            assert starts[i] == pos
            for p in range(pos, pos + max(0, counts[i])):
                if lo <= p < hi:
                    want_rows.append(i)
                    want_ranks.append(p + 1)
            pos += max(0, counts[i])
        assert rows.tolist() == want_rows and ranks.tolist() == want_ranks
        assert chosen.sum() == len(want_rows)


def test_supports_and_describe():
    assert supports(TYPES)
    assert not supports(TYPES, "rank")
    assert not supports(TYPES, limit=None)
    assert not supports([pa.int64(), None])
    assert not supports([pa.timestamp("us", tz="UTC")])
    coll = ColumnarTopKCollection(TYPES, [PINT], [OINT], [True], limit=3, offset=1)
    assert coll.describe() == "TopK (columnar): partition=[1] order=[2 DESC] limit=3 offset=1"
    with pytest.raises(ValueError):
        ColumnarTopKCollection([pa.int64(), None], [], [0], [False], limit=1)


def test_changes_past_the_head_skip_the_partition(tmp_path):
    """A time whose changes all lie past a partition's head reads no head and emits nothing."""
    store = StateStore(tmp_path / "s")
    df = Dataflow(store)
    coll = ColumnarTopKCollection([pa.int64(), pa.int64()], [0], [1], [False], limit=2, slack=1)
    df.build(df.add(coll, df.input("a")))
    try:
        df.push("a", DiffBatch.inserts([(g, v) for g in range(3) for v in range(10)]))
        first = df.time_end(1).diffs
        df.commit(1)
        assert sorted(first.rows) == [(g, v) for g in range(3) for v in range(2)]
        df.push("a", DiffBatch([(0, 8), (1, 9), (2, 50)], [-1, -1, 1]))
        assert not df.time_end(2).diffs
        df.commit(2)
        assert coll.skipped == 3
        df.push("a", DiffBatch([(0, 3), (0, -1)], [-1, 1]))  # the head's last row, a new first
        out = df.time_end(3).diffs
        df.commit(3)
        assert sorted(zip(out.rows, out.weights, strict=True)) == [((0, -1), 1), ((0, 1), -1)]
    finally:
        store.close()


def test_a_row_changed_past_its_head_keeps_the_record_that_created_it(tmp_path):
    """0.0 and -0.0 are one row (SQL equality): the entry created by 0.0 past the head keeps its
    record when -0.0 adds to its count there, as in the row top-k, and is what the selection
    later shows."""
    times = [
        DiffBatch.inserts([(0, v, 1.5) for v in range(10)]),
        DiffBatch.inserts([(0, 8, 0.0)]),
        DiffBatch.inserts([(0, 8, -0.0)]),
        DiffBatch([(0, v, 1.5) for v in range(9)], [-1] * 9),
    ]
    outs = {}
    for kind in ("row", "col"):
        store = StateStore(tmp_path / kind)
        df = Dataflow(store)
        if kind == "row":
            coll = TopKCollection(partition_key=[0], order_by=[1], descending=[False], limit=1)
        else:
            types = [pa.int64(), pa.int64(), pa.float64()]
            coll = ColumnarTopKCollection(types, [0], [1], [False], limit=1, slack=1)
        df.build(df.add(coll, df.input("a")))
        got = []
        try:
            for t, batch in enumerate(times, 1):
                df.push("a", batch)
                out = df.time_end(t).diffs
                df.commit(t)
                got.append(sorted(zip(map(exact, out.rows), out.weights, strict=True)))
        finally:
            store.close()
        outs[kind] = got
    assert outs["col"] == outs["row"]
    assert outs["col"][-1] == [(exact((0, 0, 1.5)), -1), (exact((0, 8, 0.0)), 1)], outs["col"]


def test_one_entry_per_row_through_many_updates(tmp_path):
    """Every row keeps exactly one entry, holding its count: after many times of updates that
    mostly land past the heads, the table holds the live rows and nothing else."""
    rng = random.Random(3)
    store = StateStore(tmp_path / "s")
    df = Dataflow(store)
    coll = ColumnarTopKCollection([pa.int64(), pa.int64(), pa.int64()], [0], [1], [True], limit=3)
    df.build(df.add(coll, df.input("a")))
    rows = [(g, rng.randrange(10**6), i) for i, g in enumerate(list(range(5)) * 150)]
    try:
        df.push("a", DiffBatch.inserts(rows))
        df.time_end(1)
        df.commit(1)
        for t in range(2, 200):
            batch = DiffBatch()
            for _ in range(30):
                i = rng.randrange(len(rows))
                old = rows[i]
                rows[i] = (old[0], rng.randrange(10**6), old[2])
                batch.rows += [old, rows[i]]
                batch.weights += [-1, 1]
            df.push("a", batch)
            df.time_end(t)
            df.commit(t)
        counts = [int.from_bytes(v[:8], "little", signed=True) for _, v in coll.table.scan_all()]
        assert len(counts) == len(set(rows)) and set(counts) == {1}
        assert coll.skipped > 0  # most times' changes lay past the heads
    finally:
        store.close()
