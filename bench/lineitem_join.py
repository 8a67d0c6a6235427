"""lineitem JOIN orders over lineitem-shaped state: the row join vs the columnar join.

State: ``--rows`` lineitem rows (l_orderkey, l_quantity, l_extendedprice, l_discount:
numeric(15,2), l_returnflag, l_linestatus: text; ~4 lines per order, ``bench.lineitem_group_by``'s
generator) and their orders (o_orderkey, o_custkey, o_orderdate: date, o_totalprice:
numeric(15,2), o_orderpriority: text), joined on the order key as in TPC-H Q3/Q10/Q18. Each path
loads the same rows in 100k chunks, then applies the same update batches: half of a batch's
diffs update random lines' quantities (-old +new), half update random orders' total prices (each
order update re-pairs its ~4 lines). Paths: the row join fed tuples, the columnar join fed tuples
(``columnar``: today's CDC reader delivers tuples) and fed Arrow columns (``columnar_in``: as a
columnar source will). Prints the median ms per batch and diffs/s side by side and the process
RSS after loading; the outputs of the three paths must have the same size every batch.

    python -m bench.lineitem_join [--rows 6000000] [--batch 10000] [--batches 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import statistics
import tempfile
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.lineitem_group_by import TYPES as LINE_TYPES
from bench.lineitem_group_by import Lineitem, rss_mb
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.columnar_join import ColumnarInnerJoinCollection
from engine.dataflow.collections.join import InnerJoinCollection
from engine.dataflow.graph import Dataflow
from engine.dataflow.state.store import StateStore

ORDER_TYPES = [pa.int64(), pa.int64(), pa.date32(), pa.decimal128(15, 2), pa.string()]
_PRIORITIES = pa.array(["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"])
_DAY0 = dt.date(1992, 1, 1)


class Orders:
    """orders rows as numpy arrays, one per order key of the lineitem data."""

    def __init__(self, n: int, seed: int = 11) -> None:
        rng = np.random.default_rng(seed)
        self.n = n
        self.custkey = rng.integers(0, max(1, n // 10), n)
        self.day = rng.integers(0, 2400, n)
        self.total = rng.integers(100_00, 50_000_000, n)
        self.priority = rng.integers(0, 5, n)
        self.rng = rng

    def tuples(self, idx) -> list[tuple]:
        c = Decimal("0.01")
        keys = np.arange(self.n)[idx]
        return [
            (k, ck, _DAY0 + dt.timedelta(days=d), Decimal(t) * c, _PRIORITIES[p].as_py())
            for k, ck, d, t, p in zip(
                keys.tolist(),
                self.custkey[idx].tolist(),
                self.day[idx].tolist(),
                self.total[idx].tolist(),
                self.priority[idx].tolist(),
                strict=True,
            )
        ]

    def columns(self, idx) -> list[pa.Array]:
        total = self.total[idx]
        words = np.empty((len(total), 2), dtype="<i8")
        words[:, 0], words[:, 1] = total, total >> 63
        return [
            pa.array(np.arange(self.n)[idx]),
            pa.array(self.custkey[idx]),
            pa.array((self.day[idx] + (_DAY0 - dt.date(1970, 1, 1)).days).astype(np.int32)).cast(
                pa.date32()
            ),
            pa.Array.from_buffers(ORDER_TYPES[3], len(total), [None, pa.py_buffer(words)]),
            _PRIORITIES.take(pa.array(self.priority[idx])),
        ]

    def batch(self, idx, columnar: bool) -> DiffBatch:
        if not columnar:
            return DiffBatch.inserts(self.tuples(idx))
        cols = self.columns(idx)
        return DiffBatch.from_columns(cols, np.ones(len(cols[0]), dtype=np.int64))

    def update_batch(self, diffs: int, columnar: bool) -> DiffBatch:
        idx = self.rng.choice(self.n, diffs // 2, replace=False)
        weights = np.concatenate([np.full(len(idx), -1), np.ones(len(idx))]).astype(np.int64)
        if columnar:
            old = self.columns(idx)
            self.total[idx] = self.rng.integers(100_00, 50_000_000, len(idx))
            new = self.columns(idx)
            cols = [pa.concat_arrays([o, n]) for o, n in zip(old, new, strict=True)]
            return DiffBatch.from_columns(cols, weights)
        old = self.tuples(idx)
        self.total[idx] = self.rng.integers(100_00, 50_000_000, len(idx))
        return DiffBatch(old + self.tuples(idx), weights.tolist())


@dataclass
class Loaded:
    """A join path over loaded state: the generators, the store, the dataflow, the join, and
    the last committed time."""

    lines: Lineitem
    orders: Orders
    store: StateStore
    df: Dataflow
    join: InnerJoinCollection | ColumnarInnerJoinCollection
    time: int
    load_s: float


def load(kind: str, rows: int, cache_mb: int, root: Path) -> Loaded:
    """``kind``'s join (``row``, ``columnar``: fed tuples, ``columnar_in``: fed Arrow) with
    ``rows`` lines and their orders loaded in 100k chunks, a committed time each."""
    lines = Lineitem(rows)
    orders = Orders(max(1, rows // 4))
    store = StateStore(root / kind, cache_bytes=cache_mb << 20)
    df = Dataflow(store)
    a, b = df.input("lineitem"), df.input("orders")
    if kind == "row":
        coll = InnerJoinCollection([0], [0])
    else:
        coll = ColumnarInnerJoinCollection(
            [0], [0], LINE_TYPES, ORDER_TYPES, cache_bytes=cache_mb << 20
        )
    df.build(df.add(coll, a, b))
    columnar = kind == "columnar_in"
    t = 0
    start = time.perf_counter()
    chunk = 100_000
    for lo in range(0, rows, chunk):
        t += 1
        df.push("lineitem", lines.batch(slice(lo, lo + chunk), columnar))
        if lo < orders.n:
            df.push("orders", orders.batch(slice(lo, lo + chunk), columnar))
        df.time_end(t)
        df.commit(t)
    load_s = time.perf_counter() - start
    gc.collect()
    return Loaded(lines, orders, store, df, coll, t, load_s)


def run(kind: str, rows: int, batch: int, batches: int, cache_mb: int, root: Path) -> dict:
    loaded = load(kind, rows, cache_mb, root)
    rss = rss_mb()
    df, t = loaded.df, loaded.time
    columnar = kind == "columnar_in"
    times, sizes = [], []
    for _ in range(batches):
        dl = loaded.lines.update_batch(batch // 2, columnar)
        do = loaded.orders.update_batch(batch // 2, columnar)
        t += 1
        s = time.perf_counter()
        df.push("lineitem", dl)
        df.push("orders", do)
        out = df.time_end(t)
        df.commit(t)
        times.append(time.perf_counter() - s)
        sizes.append(len(out.diffs))
    loaded.store.close()
    med = statistics.median(times)
    return {
        "kind": kind,
        "load_s": loaded.load_s,
        "median_ms": med * 1000,
        "diffs_per_s": batch / med,
        "rss_mb_after_load": rss,
        "output_sizes": sizes,
    }


def bench(rows: int, batch: int, batches: int, cache_mb: int = 64) -> dict:
    """The three paths on the same data; prints the table, returns path -> figures."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("columnar_in", "columnar", "row"):
            out[kind] = run(kind, rows, batch, batches, cache_mb, Path(tmp))
            gc.collect()
    sizes = {k: r.pop("output_sizes") for k, r in out.items()}
    assert len({tuple(s) for s in sizes.values()}) == 1, "the joins' outputs differ in size"
    print(f"\n== lineitem JOIN orders on the order key: {rows:,} lines, {rows // 4:,} orders")
    print(f"   {'path':12} {'load s':>8} {'ms/batch':>9} {'diffs/s':>11} {'RSS MB':>8}")
    for kind, r in out.items():
        print(
            f"   {kind:12} {r['load_s']:8.1f} {r['median_ms']:9.1f} {r['diffs_per_s']:11,.0f} "
            f"{r['rss_mb_after_load']:8.0f}"
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
