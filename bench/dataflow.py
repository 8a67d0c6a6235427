"""Dataflow throughput: filter+map, join, group-by and distinct on 10k-diff batches over 1M-row
state.

Prints, for each pipeline: steady diffs/s on update batches, the time to apply one 10k-diff
batch, and two ratios against recomputing the operator over the full input:
  * vs the same collection run from scratch (fresh state, the whole input in one time): what
    incview would pay without incrementality (re-population);
  * vs a plain in-memory Python recompute (dict hash join / dict group-by, no state written):
    the floor for any recompute in Python.

    python -m bench.dataflow [--rows 1000000] [--batch 10000] [--batches 20]
                             [--lineitem-rows 6000000] [--json]

(g) is a Q6/Q1-shaped filter + projection over lineitem-like Arrow batches (numerics, dates,
text), the vectorized expressions beside the row path on the same batches (``--only vector``).
(e) is SELECT DISTINCT over (orderkey, date, numeric(12,2)) rows, two copies of each distinct
row, the row distinct and the columnar distinct side by side (``--only distinct``).
(f) is a top-10 per partition (row_number) over 1M rows (a primary key's: unique) in 10k partitions, the row top-k and the
columnar top-k (tuple and Arrow input) side by side on the same update batches (``--only top_k``).
``--only lineitem_join`` is ``bench.lineitem_join``: lineitem JOIN orders over the same
lineitem-shaped state, the row join and the columnar join (tuple and Arrow input) side by side.
(d) is ``bench.lineitem_group_by``: GROUP BY count/sum/avg over lineitem-shaped state, the row
reduce and the columnar reduce side by side, with the process RSS at 1M and at all rows.
``--json`` prints one JSON object (pipeline -> diffs_per_s, plus rss_mb) and writes it to
bench/results/dataflow.json (with ``--only``, the figures it measured replace theirs in the file).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import random
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench import lineitem_group_by, lineitem_join
from bench.results_json import add_json_option, save
from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.columnar_distinct import ColumnarDistinctCollection
from engine.dataflow.collections.columnar_join import ColumnarInnerJoinCollection
from engine.dataflow.collections.columnar_reduce import ColumnarReduceCollection
from engine.dataflow.collections.columnar_top_k import ColumnarTopKCollection
from engine.dataflow.collections.distinct import DistinctCollection
from engine.dataflow.collections.filter import FilterCollection
from engine.dataflow.collections.join import InnerJoinCollection
from engine.dataflow.collections.map import MapCollection
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.collections.top_k import TopKCollection
from engine.dataflow.columnar.arrow_types import to_arrow_column
from engine.dataflow.graph import Dataflow
from engine.dataflow.state.store import StateStore


def fmt(n: float) -> str:
    return f"{n:,.0f}"


class Pipeline:
    """A dataflow on a fresh state directory, fed time by time."""

    cache_bytes = 256 << 20

    def __init__(self, root: Path, name: str, build) -> None:
        self.store = StateStore(root / name, cache_bytes=self.cache_bytes)
        self.df = Dataflow(self.store)
        self.inputs = build(self.df)
        self.t = 0

    def apply(self, per_input: dict[str, DiffBatch]) -> tuple[float, int]:
        start = time.perf_counter()
        for name, batch in per_input.items():
            self.df.push(name, batch)
        self.t += 1
        out = self.df.time_end(self.t)
        self.df.commit(self.t)
        return time.perf_counter() - start, len(out.diffs)

    def close(self) -> None:
        self.store.close()


def load(p: Pipeline, rows_by_input: dict[str, list[tuple]], chunk: int = 100_000) -> float:
    start = time.perf_counter()
    n = max(len(v) for v in rows_by_input.values())
    for i in range(0, n, chunk):
        p.apply({k: DiffBatch.inserts(v[i : i + chunk]) for k, v in rows_by_input.items()})
    return time.perf_counter() - start


FIGURES: dict[str, float] = {}


def report(title: str, times: list[float], batch: int, scratch_s: float, python_s: float) -> None:
    med = statistics.median(times)
    FIGURES[title.split(")")[0].strip("(")] = batch / med
    print(f"\n== {title}")
    print(f"  update batches: {len(times)} x {fmt(batch)} diffs, median {med * 1000:.1f} ms/batch")
    print(f"  throughput:     {fmt(batch / med)} diffs/s")
    print(
        f"  recompute, same operator from scratch: {scratch_s:.2f} s -> ratio {scratch_s / med:,.0f}x"
    )
    print(
        f"  recompute, plain in-memory Python:     {python_s:.2f} s -> ratio {python_s / med:,.1f}x"
    )


def bench_filter_map(rows: int, batch: int, batches: int, rng: random.Random) -> None:
    data = [(i, rng.randrange(1000), Decimal(rng.randrange(10**6)) / 100) for i in range(rows)]

    def build(df):
        a = df.input("a")
        f = df.add(FilterCollection(lambda rs: [r[1] > 300 for r in rs], "b > 300"), a)
        m = df.add(MapCollection(lambda rs: [(r[0], r[2] * 2) for r in rs], "id, amount*2"), f)
        df.build(m)
        return [a]

    with tempfile.TemporaryDirectory() as tmp:
        p = Pipeline(Path(tmp), "fm", build)
        times = []
        for i in range(batches):
            chunk = data[(i * batch) % rows :][:batch]
            dt, _ = p.apply({"a": DiffBatch.inserts(chunk)})
            times.append(dt)
        p.close()
    med = statistics.median(times)
    FIGURES["a"] = batch / med
    print("\n== (a) filter + map (fused, stateless)")
    print(
        f"  {len(times)} batches x {fmt(batch)} diffs, median {med * 1000:.1f} ms -> {fmt(batch / med)} diffs/s"
    )


def _arrow(batch: DiffBatch, types: list[pa.DataType]) -> DiffBatch:
    """The same diffs as Arrow columns (what a columnar source hands the join)."""
    cols = list(zip(*batch.rows, strict=True))
    arrays = [to_arrow_column(list(c), t) for c, t in zip(cols, types, strict=True)]
    return DiffBatch.from_columns(arrays, np.asarray(batch.weights, dtype=np.int64))


VECTOR_COLUMNS = [
    ("orderkey", "bigint"),
    ("quantity", "numeric(15,2)"),
    ("extendedprice", "numeric(15,2)"),
    ("discount", "numeric(15,2)"),
    ("tax", "numeric(15,2)"),
    ("returnflag", "text"),
    ("shipdate", "date"),
]
VECTOR_WHERE = (
    "shipdate <= '1998-09-02' AND discount BETWEEN 0.02 AND 0.09 AND quantity < 40 "
    "AND returnflag <> 'N'"
)
VECTOR_SELECT = [
    "orderkey",
    "extendedprice * (1 - discount)",
    "extendedprice * (1 - discount) * (1 + tax)",
    "quantity * 2 + 1",
    "returnflag",
    "shipdate + 30",
    "CASE WHEN discount > 0.05 THEN 'high' ELSE 'low' END",
]


def _lineitem_batch(rng: random.Random, n: int) -> DiffBatch:
    """``n`` lineitem-like diffs as Arrow columns (what a columnar source or collection sends)."""
    import numpy as np

    r = np.random.default_rng(rng.randrange(2**32))

    def dec(values):  # int64 unscaled values -> decimal128(15, 2)
        words = np.stack([values, values >> 63], axis=1).astype(np.int64)
        return pa.Array.from_buffers(pa.decimal128(15, 2), n, [None, pa.py_buffer(words)])

    columns = [
        pa.array(r.integers(1, 6_000_000, n, dtype=np.int64)),
        dec(r.integers(100, 5001, n, dtype=np.int64)),
        dec(r.integers(90_000, 10_500_000, n, dtype=np.int64)),
        dec(r.integers(0, 11, n, dtype=np.int64)),
        dec(r.integers(0, 9, n, dtype=np.int64)),
        pa.array(r.choice(["A", "N", "R"], n)),
        pa.array(r.integers(8036, 10_560, n, dtype=np.int32)).cast(pa.date32()),
    ]
    weights = np.where(r.random(n) < 0.5, -1, 1).astype(np.int64)
    return DiffBatch.from_columns(columns, weights)


def bench_vector_filter_map(batch: int, batches: int, rng: random.Random) -> None:
    """(g) WHERE + SELECT over Arrow batches: the vectorized programs, the row path on the same
    Arrow batches (turned into tuples first, as a row collection reads them), and the row path
    on tuple batches (the conversion already paid), per 10k-diff batch of the fused chain."""
    from engine.sql.expression_compiler import (
        ColumnRef,
        compile_expressions,
        compile_predicate,
        parse_expression,
    )
    from engine.sql.types import from_pg_name
    from engine.sql.vector_expressions import vectorize_expressions, vectorize_predicate

    refs = [ColumnRef(c, "l", from_pg_name(t)) for c, t in VECTOR_COLUMNS]
    where, select = parse_expression(VECTOR_WHERE), [parse_expression(e) for e in VECTOR_SELECT]

    def chain(vectorized: bool):
        fn, _ = compile_predicate(where, refs)
        filt = FilterCollection(fn, VECTOR_WHERE)
        mapped = MapCollection(compile_expressions(select, refs).fn, "select")
        if vectorized:
            filt.vector = vectorize_predicate(where, refs).program
            mapped.vector = vectorize_expressions(select, refs).program
        return filt, mapped

    inputs = [_lineitem_batch(rng, batch) for _ in range(batches)]
    tuples = [DiffBatch(list(b.rows), list(b.weights)) for b in inputs]
    paths = {
        "vectorized": (
            True,
            lambda i: DiffBatch.from_columns(inputs[i].columns, inputs[i].column_weights),
        ),
        "row_arrow_input": (
            False,
            lambda i: DiffBatch.from_columns(inputs[i].columns, inputs[i].column_weights),
        ),
        "row_tuple_input": (False, lambda i: DiffBatch(tuples[i].rows, tuples[i].weights)),
    }
    print(f"\n== (g) filter + map over Arrow batches, {batches} x {fmt(batch)} diffs")
    print(f"  WHERE {VECTOR_WHERE}")
    print(f"  SELECT {', '.join(VECTOR_SELECT)}")
    outputs = {}
    for kind, (vectorized, feed) in paths.items():
        filt, mapped = chain(vectorized)
        times, out = [], []
        for i in range(batches):
            b = feed(i)
            start = time.perf_counter()
            result = mapped.on_diffs(0, filt.on_diffs(0, b))
            times.append(time.perf_counter() - start)
            out.append(result)
        outputs[kind] = out
        med = statistics.median(times)
        FIGURES[f"filter_map_arrow_{kind}"] = batch / med
        note = (
            f" ({mapped.row_batches + filt.row_batches} batches sent to rows)" if vectorized else ""
        )
        print(
            f"  {kind:>16}: median {med * 1000:.2f} ms/batch -> {fmt(batch / med)} diffs/s, "
            f"{fmt(statistics.median(len(o) for o in out))} output diffs/batch{note}"
        )
    same = all(
        v.counts() == r.counts()
        for v, r in zip(outputs["vectorized"], outputs["row_arrow_input"], strict=True)
    )
    vec, row = FIGURES["filter_map_arrow_vectorized"], FIGURES["filter_map_arrow_row_arrow_input"]
    print(f"  vectorized / row (Arrow input): {vec / row:.1f}x; outputs equal: {same}")


def bench_join(rows: int, batch: int, batches: int, rng: random.Random) -> None:
    """(b) orders(id, custkey, price) JOIN customers(custkey, name, segment), 1M rows a side,
    updates on both sides; the row join and the columnar join on the same batches."""
    nkeys = rows
    left = [(i, rng.randrange(nkeys), rng.randrange(10**6)) for i in range(rows)]  # orders
    right = [(k, f"cust{k}", rng.randrange(100)) for k in range(nkeys)]  # customers
    gc.freeze()  # the benchmark's own 2M rows are not the engine's: keep them out of GC scans
    updates = []
    for _ in range(batches):
        dl, dr = DiffBatch(), DiffBatch()
        for _ in range(batch // 4):  # half the diffs per side, each update = -old +new
            i = rng.randrange(rows)
            old = left[i]
            new = (old[0], old[1], rng.randrange(10**6))
            left[i] = new
            dl.rows += [old, new]
            dl.weights += [-1, 1]
            k = rng.randrange(nkeys)
            old = right[k]
            new = (k, old[1], rng.randrange(100))
            right[k] = new
            dr.rows += [old, new]
            dr.weights += [-1, 1]
        updates.append((dl, dr))
    initial_left = [r for r in left]  # the loaded state is the rows before the updates
    initial_right = [r for r in right]
    for dl, dr in reversed(updates):  # undo the updates to get the state they start from
        for row, w in zip(dl.rows, dl.weights, strict=True):
            if w < 0:
                initial_left[row[0]] = row
        for row, w in zip(dr.rows, dr.weights, strict=True):
            if w < 0:
                initial_right[row[0]] = row
    ltypes, rtypes = [pa.int64()] * 3, [pa.int64(), pa.string(), pa.int64()]
    makers = {
        "row": lambda: InnerJoinCollection([1], [0]),
        "columnar": lambda: ColumnarInnerJoinCollection([1], [0], ltypes, rtypes),
        "columnar_in": lambda: ColumnarInnerJoinCollection([1], [0], ltypes, rtypes),
    }
    arrow_updates = [(_arrow(dl, ltypes), _arrow(dr, rtypes)) for dl, dr in updates]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for kind, make in makers.items():

            def build(df, make=make):
                a, b = df.input("l"), df.input("r")
                df.build(df.add(make(), a, b))
                return [a, b]

            p = Pipeline(root, f"join_{kind}", build)
            load_s = load(p, {"l": initial_left, "r": initial_right})
            print(f"\n(join, {kind}: loaded 2 x {fmt(rows)} rows in {load_s:.1f} s)")
            times, sizes = [], []
            for dl, dr in arrow_updates if kind == "columnar_in" else updates:
                dt_, n = p.apply({"l": dl, "r": dr})
                times.append(dt_)
                sizes.append(n)
            p.close()
            scratch = Pipeline(root, f"join_scratch_{kind}", build)
            scratch_s, _ = scratch.apply(
                {"l": DiffBatch.inserts(left), "r": DiffBatch.inserts(right)}
            )
            scratch.close()
            results[kind] = (times, scratch_s, sizes)
    sizes = {kind: r[2] for kind, r in results.items()}
    assert sizes["row"] == sizes["columnar"] == sizes["columnar_in"], "the joins disagree"
    start = time.perf_counter()
    index: dict = {}
    for r in right:
        index.setdefault(r[0], []).append(r)
    out = [lr + rr for lr in left for rr in index.get(lr[1], ())]
    python_s = time.perf_counter() - start
    assert len(out) == rows
    for kind, (times, scratch_s, _) in results.items():
        report(
            f"(inner_join_{kind}) inner join, 2 x {fmt(rows)} rows",
            times,
            batch,
            scratch_s,
            python_s,
        )


def bench_group_by(rows: int, batch: int, batches: int, rng: random.Random) -> None:
    """(c) sum/min/max/count under updates (each one deletes a value: min/max under deletes),
    the row reduce and the columnar reduce (tuple and Arrow input: ``columnar_in``) on the same
    batches."""
    groups = max(1, rows // 100)
    data = [(i, rng.randrange(groups), rng.randrange(10**6)) for i in range(rows)]
    gc.freeze()  # the benchmark's own rows are not the engine's: keep them out of GC scans
    aggs = [Aggregate("sum", 2), Aggregate("min", 2), Aggregate("max", 2), Aggregate("count_star")]
    current = list(data)
    updates = []
    for _ in range(batches):
        rows_, weights = [], []
        for _ in range(batch // 2):
            i = rng.randrange(rows)
            old = current[i]
            new = (old[0], old[1], rng.randrange(10**6))
            current[i] = new
            rows_ += [old, new]
            weights += [-1, 1]
        updates.append((rows_, weights))
    types = [pa.int64()] * 3
    kinds = {
        "columnar": lambda: ColumnarReduceCollection([1], aggs, types),
        "columnar_in": lambda: ColumnarReduceCollection([1], aggs, types),
        "row": lambda: ReduceCollection([1], aggs),
    }
    arrow_updates = [_arrow(DiffBatch(list(r), list(w)), types) for r, w in updates]
    for kind, make in kinds.items():

        def build(df, make=make):
            a = df.input("a")
            df.build(df.add(make(), a))
            return [a]

        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            p = Pipeline(root, "reduce", build)
            load_s = load(p, {"a": data})
            print(
                f"\n(group-by {kind}: loaded {fmt(rows)} rows in {fmt(groups)} groups in {load_s:.1f} s)"
            )
            if kind == "columnar_in":  # Arrow columns, as a columnar source hands them
                times = [p.apply({"a": d})[0] for d in arrow_updates]
            else:
                times = [p.apply({"a": DiffBatch(list(r), list(w))})[0] for r, w in updates]
            p.close()
            scratch = Pipeline(root, "reduce_scratch", build)
            scratch_s, _ = scratch.apply({"a": DiffBatch.inserts(current)})
            scratch.close()
        start = time.perf_counter()
        acc: dict = {}
        for _, g, v in current:
            s = acc.get(g)
            if s is None:
                acc[g] = [v, v, v, 1]
            else:
                s[0] += v
                s[1] = min(s[1], v)
                s[2] = max(s[2], v)
                s[3] += 1
        python_s = time.perf_counter() - start
        report(
            f"(group_by_sum_min_max_count_{kind}) group-by sum/min/max/count, {fmt(rows)} rows",
            times,
            batch,
            scratch_s,
            python_s,
        )


def bench_distinct(rows: int, batch: int, batches: int, rng: random.Random) -> None:
    """SELECT DISTINCT orderkey, day, price: ``rows`` input rows, two copies of each distinct row;
    an update batch moves ``batch / 2`` copies to a new price (-old +new)."""
    day0 = dt.date(1992, 1, 1)
    distinct = [
        (k, day0 + dt.timedelta(days=k % 2500), Decimal(rng.randrange(10**8)).scaleb(-2))
        for k in range(rows // 2)
    ]
    data = [distinct[i // 2] for i in range(rows)]
    gc.freeze()  # the benchmark's own rows are not the engine's: keep them out of GC scans
    updates = []  # the same update batches for both paths
    for _ in range(batches):
        d = DiffBatch()
        for _ in range(batch // 2):
            i = rng.randrange(rows)
            old = data[i]
            new = (old[0], old[1], Decimal(rng.randrange(10**8)).scaleb(-2))
            data[i] = new
            d.rows += [old, new]
            d.weights += [-1, 1]
        updates.append(d)
    types = [pa.int64(), pa.date32(), pa.decimal128(12, 2)]
    paths = {
        "row": lambda: DistinctCollection(),
        "columnar": lambda: ColumnarDistinctCollection(types),
    }
    print(f"\n== (e) SELECT DISTINCT, {fmt(rows)} rows ({fmt(rows // 2)} distinct)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for kind, make in paths.items():

            def build(df, make=make):
                a = df.input("a")
                df.build(df.add(make(), a))
                return [a]

            p = Pipeline(root, f"distinct_{kind}", build)
            initial = [distinct[i // 2] for i in range(rows)]
            load_s = load(p, {"a": initial})
            del initial
            times, outs = [], []
            for d in updates:
                dt_, n = p.apply({"a": DiffBatch(list(d.rows), list(d.weights))})
                times.append(dt_)
                outs.append(n)
            p.close()
            med = statistics.median(times)
            FIGURES[f"distinct_{kind}"] = batch / med
            print(
                f"  {kind:>8}: load {load_s:.1f} s; {len(times)} x {fmt(batch)} diffs, median "
                f"{med * 1000:.1f} ms/batch -> {fmt(batch / med)} diffs/s "
                f"(~{fmt(statistics.median(outs))} output diffs/batch)"
            )
    row, col = FIGURES["distinct_row"], FIGURES["distinct_columnar"]
    print(f"  columnar / row: {col / row:.1f}x")


def bench_top_k(rows: int, batch: int, batches: int, rng: random.Random) -> None:
    """(f) per-partition top-k (``row_number() OVER (PARTITION BY g ORDER BY v DESC) <= 10``):
    ``rows`` rows (id, g, v) in ``rows / 100`` partitions, update batches move ``batch / 2`` rows
    to a new v (-old +new); the row TopKCollection and the columnar one on the same batches (as
    tuple rows, and as Arrow columns: ``columnar_in``; told the rows are unique as the planner
    tells it for a table with a primary key, and ``columnar_in_multiset`` not told so), each
    batch through all of them one after the other
    (a shared machine's load hits them alike). Then the Arrow-input one goes on to ``5 x
    batches`` in all: ``columnar_in_steady`` is the median of the last ``batches`` (a cost that
    grows with the updates, as blind writes' garbage did, shows there). The from-scratch
    recomputes read the rows as they are after all of them."""
    groups = max(1, rows // 100)
    data = [(i, rng.randrange(groups), rng.randrange(10**6)) for i in range(rows)]
    initial = list(data)
    types = [pa.int64()] * 3

    def update() -> DiffBatch:
        d = DiffBatch()
        for _ in range(batch // 2):
            i = rng.randrange(rows)
            old = data[i]
            new = (old[0], old[1], rng.randrange(10**6))
            data[i] = new
            d.rows += [old, new]
            d.weights += [-1, 1]
        return d

    updates = [update() for _ in range(batches)]  # the same update batches for all paths
    arrow_updates = [_arrow(d, types) for d in updates]  # what a columnar source hands it
    # the rows are a table's with a primary key (id): the planner tells the columnar top-k its
    # input holds no row twice (``engine.sql.unique_rows``); ``columnar_in_multiset`` is the
    # same top-k not told so (a table without a key), which reads each changed row's count
    paths = {
        "row": lambda: TopKCollection([1], [2], [True], limit=10),
        "columnar": lambda: ColumnarTopKCollection(
            types, [1], [2], [True], limit=10, unique_rows=True
        ),
        "columnar_in": lambda: ColumnarTopKCollection(
            types, [1], [2], [True], limit=10, unique_rows=True
        ),
        "columnar_in_multiset": lambda: ColumnarTopKCollection(types, [1], [2], [True], limit=10),
    }
    gc.freeze()  # the benchmark's own rows and batches are not the engine's: out of GC scans
    print(f"\n== (f) top-10 per partition, {fmt(rows)} rows in {fmt(groups)} partitions")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pipes, loads = {}, {}
        for kind, make in paths.items():

            def build(df, make=make):
                a = df.input("a")
                df.build(df.add(make(), a))
                return [a]

            pipes[kind] = Pipeline(root, f"top_k_{kind}", build)
            loads[kind] = load(pipes[kind], {"a": initial})
        times: dict[str, list[float]] = {kind: [] for kind in paths}
        outs: dict[str, list[int]] = {kind: [] for kind in paths}
        for d, da in zip(updates, arrow_updates, strict=True):  # each batch through all,
            for kind, p in pipes.items():  # one after the other: the same machine load
                arrow = kind.startswith("columnar_in")
                given = da if arrow else DiffBatch(list(d.rows), list(d.weights))
                dt_, n = p.apply({"a": given})
                times[kind].append(dt_)
                outs[kind].append(n)
        steady = []  # made as they go: 80 batches of tuples would stay in the RSS
        for _ in range(4 * batches):
            given = _arrow(update(), types)
            gc.freeze()  # the rows it made (O(1): generations are linked lists)
            steady.append(pipes["columnar_in"].apply({"a": given})[0])
        steady = steady[-batches:]
        for p in pipes.values():
            p.close()
        for kind, make in paths.items():

            def build(df, make=make):
                a = df.input("a")
                df.build(df.add(make(), a))
                return [a]

            scratch = Pipeline(root, f"top_k_{kind}_scratch", build)
            scratch_s, _ = scratch.apply({"a": DiffBatch.inserts(data)})
            scratch.close()
            med = statistics.median(times[kind])
            FIGURES[f"top_k_{kind}"] = batch / med
            print(
                f"  {kind:>8}: load {loads[kind]:.1f} s; {len(times[kind])} x {fmt(batch)} diffs, "
                f"median {med * 1000:.1f} ms/batch -> {fmt(batch / med)} diffs/s "
                f"(~{fmt(statistics.median(outs[kind]))} output diffs/batch); from scratch "
                f"{scratch_s:.1f} s ({scratch_s / med:,.0f}x a batch)"
            )
    start = time.perf_counter()
    parts: dict = {}
    for r in data:
        parts.setdefault(r[1], []).append(r)
    top = [sorted(rs, key=lambda r: -r[2])[:10] for rs in parts.values()]
    python_s = time.perf_counter() - start
    assert sum(map(len, top)) <= 10 * groups
    row, col = FIGURES["top_k_row"], FIGURES["top_k_columnar"]
    med = statistics.median(steady)
    FIGURES["top_k_columnar_in_steady"] = batch / med
    print(
        f"  columnar_in, batches {4 * batches + 1}-{5 * batches}: median {med * 1000:.1f} ms/batch "
        f"-> {fmt(batch / med)} diffs/s"
    )
    print(f"  plain in-memory Python recompute: {python_s:.2f} s; columnar / row: {col / row:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument(
        "--only",
        choices=[
            "filter_map",
            "vector",
            "join",
            "group_by",
            "distinct",
            "top_k",
            "lineitem",
            "lineitem_join",
        ],
    )
    ap.add_argument("--lineitem-rows", type=int, default=6_000_000)
    add_json_option(ap, "dataflow")
    ap.add_argument("--cache-mb", type=int, default=256, help="RocksDB block cache per view")
    args = ap.parse_args()
    Pipeline.cache_bytes = args.cache_mb << 20
    rng = random.Random(42)
    print(
        f"bench/dataflow.py: rows={fmt(args.rows)} batch={fmt(args.batch)} batches={args.batches}"
    )
    if args.only in (None, "filter_map"):
        bench_filter_map(args.rows, 100_000, args.batches, rng)
    if args.only in (None, "vector"):
        bench_vector_filter_map(args.batch, args.batches, rng)
    if args.only in (None, "join"):
        bench_join(args.rows, args.batch, args.batches, rng)
    if args.only in (None, "group_by"):
        bench_group_by(args.rows, args.batch, args.batches, rng)
    if args.only in (None, "distinct"):
        bench_distinct(args.rows, args.batch, args.batches, rng)
    if args.only in (None, "top_k"):
        bench_top_k(args.rows, args.batch, args.batches, rng)
    result: dict = {}
    if args.only in (None, "lineitem"):
        li = lineitem_group_by.bench(args.lineitem_rows, args.batch, args.batches)
        for shape, paths in li.items():
            for kind, r in paths.items():
                result[f"group_by_count_sum_avg_{shape}_{kind}"] = r["diffs_per_s"]
        many = li["q18_by_orderkey"]["columnar"]
        result["rss_mb"] = {
            "at_1M_rows": many["rss_mb_at_1M"],
            f"at_{args.lineitem_rows}_rows": many["rss_mb_at_all"],
            "anon_at_1M_rows": many["anon_mb_at_1M"],
            f"anon_at_{args.lineitem_rows}_rows": many["anon_mb_at_all"],
        }
    if args.only in (None, "lineitem_join"):
        lj = lineitem_join.bench(args.lineitem_rows, args.batch, args.batches)
        for kind, r in lj.items():
            result[f"inner_join_lineitem_orders_{kind}"] = r["diffs_per_s"]
    names = {"a": "filter_map"}
    for key, value in FIGURES.items():
        result[names.get(key, key)] = value
    if args.json:
        if not args.only:  # one pipeline's figures replace theirs in the file, settings stay
            result["settings"] = {k: v for k, v in vars(args).items() if k != "json"}
        save(args.json, result, merge=bool(args.only))


if __name__ == "__main__":
    main()
