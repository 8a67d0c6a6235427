"""GROUP BY count/sum/avg over lineitem-shaped state: the row reduce vs the columnar reduce.

The input is TPC-H lineitem's aggregation columns (l_orderkey, l_quantity, l_extendedprice,
l_discount: numeric(15,2), l_returnflag, l_linestatus: text) with 4 lines per order on average,
in two shapes: grouped by l_orderkey as in Q18 (the many-groups case: ``rows / 4`` groups, a
10k-diff batch touches ~5k groups chosen at random over all orders, so every changed group costs
a state read and write) and by l_returnflag, l_linestatus as in Q1 (6 groups). Three runs load
the same rows in 100k chunks, then apply the same update batches (each update of a line's
quantity is -old +new): the row reduce and the columnar reduce fed tuple rows (as today's CDC
reader delivers them: each time's columns are converted from Python values), and the columnar
reduce fed Arrow columns (``columnar_in``: as a columnar source will deliver them). The figures
are the median time per batch and diffs/s, side by side. The columnar run comes first so that the
process RSS printed after loading 1M rows and after loading all rows is its own (growth within
its cache budget).

    python -m bench.lineitem_group_by [--rows 6000000] [--batch 10000] [--batches 20]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.columnar_reduce import ColumnarReduceCollection
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.graph import Dataflow
from engine.dataflow.state.store import StateStore

AGGS = [
    Aggregate("count_star"),
    Aggregate("sum", 1),
    Aggregate("sum", 2),
    Aggregate("avg", 1),
    Aggregate("avg", 3),
]
TYPES = [
    pa.int64(),
    pa.decimal128(15, 2),
    pa.decimal128(15, 2),
    pa.decimal128(15, 2),
    pa.string(),
    pa.string(),
]
_FLAGS, _STATUSES = pa.array(["A", "N", "R"]), pa.array(["F", "O"])
#: shape -> group key columns
SHAPES = {"q18_by_orderkey": [0], "q1_by_flag_status": [4, 5]}


def rss_mb(field: str = "VmRSS") -> float:
    """A /proc/self/status memory field in MB: VmRSS (all resident pages), RssAnon (the
    process's own memory) or RssFile (pages of mapped files: libraries, and the state's tables,
    read through a memory map: page cache)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Lineitem:
    """The aggregation columns of lineitem as numpy arrays (unscaled cents for numerics)."""

    def __init__(self, rows: int, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        self.n = rows
        self.orderkey = np.sort(rng.integers(0, max(1, rows // 4), rows))
        self.quantity = rng.integers(100, 5001, rows)
        self.price = self.quantity * rng.integers(90, 2000, rows)
        self.discount = rng.integers(0, 11, rows)
        self.flag = rng.integers(0, 3, rows)
        self.status = rng.integers(0, 2, rows)
        self.rng = rng

    def tuples(self, idx) -> list[tuple]:
        c = Decimal("0.01")
        return [
            (k, Decimal(q) * c, Decimal(p) * c, Decimal(d) * c, "ANR"[f], "FO"[s])
            for k, q, p, d, f, s in zip(
                self.orderkey[idx].tolist(),
                self.quantity[idx].tolist(),
                self.price[idx].tolist(),
                self.discount[idx].tolist(),
                self.flag[idx].tolist(),
                self.status[idx].tolist(),
                strict=True,
            )
        ]

    def columns(self, idx) -> list[pa.Array]:
        """The same rows as Arrow columns, as a columnar source delivers them."""

        def numeric(unscaled: np.ndarray) -> pa.Array:
            words = np.empty((len(unscaled), 2), dtype="<i8")
            words[:, 0], words[:, 1] = unscaled, unscaled >> 63
            return pa.Array.from_buffers(TYPES[1], len(unscaled), [None, pa.py_buffer(words)])

        return [
            pa.array(self.orderkey[idx]),
            numeric(self.quantity[idx]),
            numeric(self.price[idx]),
            numeric(self.discount[idx]),
            _FLAGS.take(pa.array(self.flag[idx])),
            _STATUSES.take(pa.array(self.status[idx])),
        ]

    def batch(self, idx, columnar: bool) -> DiffBatch:
        if not columnar:
            return DiffBatch.inserts(self.tuples(idx))
        cols = self.columns(idx)
        return DiffBatch.from_columns(cols, np.ones(len(cols[0]), dtype=np.int64))

    def update_batch(self, diffs: int, columnar: bool = False) -> DiffBatch:
        """``diffs // 2`` random lines get a new quantity: -old +new each."""
        idx = self.rng.choice(self.n, diffs // 2, replace=False)
        if columnar:
            old = self.columns(idx)
            self.quantity[idx] = self.rng.integers(100, 5001, len(idx))
            new = self.columns(idx)
            weights = np.concatenate([np.full(len(idx), -1), np.ones(len(idx))]).astype(np.int64)
            return DiffBatch.from_columns(
                [pa.concat_arrays([o, n]) for o, n in zip(old, new, strict=True)], weights
            )
        old = self.tuples(idx)
        self.quantity[idx] = self.rng.integers(100, 5001, len(idx))
        new = self.tuples(idx)
        return DiffBatch(old + new, [-1] * len(old) + [1] * len(new))


def _flow(root: Path, kind: str, cache_mb: int, group: list[int]) -> tuple[StateStore, Dataflow]:
    store = StateStore(root / kind, cache_bytes=cache_mb << 20)
    df = Dataflow(store)
    a = df.input("lineitem")
    if kind.startswith("columnar"):
        coll = ColumnarReduceCollection(group, AGGS, TYPES, cache_bytes=cache_mb << 20)
    else:
        coll = ReduceCollection(group, AGGS)
    df.build(df.add(coll, a))
    return store, df


def run(
    kind: str, shape: str, rows: int, batch: int, batches: int, cache_mb: int, root: Path
) -> dict:
    data = Lineitem(rows)
    store, df = _flow(root / shape, kind, cache_mb, SHAPES[shape])
    t = 0
    rss_at: dict[str, float] = {}
    start = time.perf_counter()
    chunk = 100_000
    for lo in range(0, rows, chunk):
        t += 1
        df.push("lineitem", data.batch(slice(lo, lo + chunk), kind == "columnar_in"))
        df.time_end(t)
        df.commit(t)
        if lo + chunk >= 1_000_000 and "1M" not in rss_at:
            gc.collect()
            rss_at["1M"] = rss_mb()
            rss_at["anon_1M"] = rss_mb("RssAnon")
    load_s = time.perf_counter() - start
    gc.collect()
    rss_at["all"] = rss_mb()
    rss_at["anon_all"] = rss_mb("RssAnon")
    times = []
    for _ in range(batches):
        d = data.update_batch(batch, kind == "columnar_in")
        t += 1
        s = time.perf_counter()
        df.push("lineitem", d)
        df.time_end(t)
        df.commit(t)
        times.append(time.perf_counter() - s)
    store.close()
    med = statistics.median(times)
    return {
        "kind": kind,
        "load_s": load_s,
        "median_ms": med * 1000,
        "diffs_per_s": batch / med,
        "rss_mb_at_1M": rss_at.get("1M"),
        "rss_mb_at_all": rss_at["all"],
        "anon_mb_at_1M": rss_at.get("anon_1M"),
        "anon_mb_at_all": rss_at["anon_all"],
    }


def bench(rows: int, batch: int, batches: int, cache_mb: int = 64) -> dict:
    """Both paths on the same data, in both shapes; prints the tables, returns the figures
    (shape -> path -> figures)."""
    return {shape: bench_shape(shape, rows, batch, batches, cache_mb) for shape in SHAPES}


def bench_shape(shape: str, rows: int, batch: int, batches: int, cache_mb: int) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("columnar", "columnar_in", "row"):
            out[kind] = run(kind, shape, rows, batch, batches, cache_mb, Path(tmp))
            gc.collect()
    print(f"\n== group-by count/sum/avg over lineitem, {shape}: {rows:,} rows")
    print(f"   {'path':10} {'load s':>8} {'ms/batch':>9} {'diffs/s':>11}")
    for kind, r in out.items():
        print(f"   {kind:10} {r['load_s']:8.1f} {r['median_ms']:9.1f} {r['diffs_per_s']:11,.0f}")
    col = out["columnar"]
    print(
        f"   columnar / row: {col['diffs_per_s'] / out['row']['diffs_per_s']:.1f}x; "
        f"RSS {col['rss_mb_at_1M'] or float('nan'):.0f} MB at 1M rows, "
        f"{col['rss_mb_at_all']:.0f} MB at {rows:,}; of which its own (RssAnon) "
        f"{col['anon_mb_at_1M'] or float('nan'):.0f} MB and {col['anon_mb_at_all']:.0f} MB "
        f"(state cache budget {cache_mb} MB + RocksDB block cache {cache_mb} MB; the rest are "
        "pages of mapped files: libraries and state tables, page cache)"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=6_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--cache-mb", type=int, default=64)
    args = ap.parse_args()
    bench(args.rows, args.batch, args.batches, args.cache_mb)


if __name__ == "__main__":
    main()
