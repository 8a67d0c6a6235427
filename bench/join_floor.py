"""The floor under the columnar lineitem JOIN orders: what a batch costs before any join logic.

Issue 13 asks 500k diffs/s of this join at 10k-diff batches (20 ms a batch). On the state of
``bench.lineitem_join`` (``--rows`` lines under a quarter as many orders, Arrow input, the
columnar join), batches of that bench's shape (half line updates, half order updates) alternate
between two uses:

* **whole**: the time as the join runs it (push, ``time_end``, ``commit``): that bench's figure;
* **floor**: the parts that any join keeping this state in RocksDB pays, each timed alone
  around the time (which is then applied, untimed): the point reads of the batch's join keys
  (the join's own table ``get_many``, in parallel slices), the write of those entries (the
  values read, written back unchanged: the state stays as it was) with the commit, and the
  consolidation of the time's output (the sink's work; the output taken from the join).

Prints the medians of each, the diffs/s each part alone allows and the diffs/s the three
together allow (and the two without the reads: a state held wholly in memory); ``--json``
writes them to bench/results/join_floor.json.

    python -m bench.join_floor [--rows 6000000] [--batch 10000] [--batches 15] [--json]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from bench import lineitem_join
from bench.results_json import add_json_option, save, target
from engine.dataflow.collections.columnar_join import entry_keys

TARGET = 500_000  # issue 13: lineitem JOIN orders, diffs/s


def measure(rows: int, batch: int, batches: int, cache_mb: int, root: Path) -> dict:
    """The medians (ms) of ``batches`` whole times and of the floor's parts on as many others."""
    loaded = lineitem_join.load("columnar_in", rows, cache_mb, root)
    join, store, df = loaded.join, loaded.store, loaded.df
    outputs = []
    process = join.process

    def kept(time_, deltas):
        out = process(time_, deltas)
        outputs.append(out)
        return out

    join.process = kept  # the join's output before the sink consolidates it
    table = join.entries.table
    parts: dict[str, list[float]] = {"whole": [], "read": [], "write": [], "consolidate": []}
    keys_read = []
    t = loaded.time
    for i in range(2 * batches):
        dl = loaded.lines.update_batch(batch // 2, True)
        do = loaded.orders.update_batch(batch // 2, True)
        t += 1
        if i % 2 == 0:
            s = time.perf_counter()
            df.push("lineitem", dl)
            df.push("orders", do)
            df.time_end(t)
            df.commit(t)
            parts["whole"].append(time.perf_counter() - s)
            continue
        keys = pa.concat_arrays([dl.columns[0], do.columns[0]]).cast(join.key_types[0])
        _, _, heads = entry_keys([keys])
        keys_read.append(len(heads))
        s = time.perf_counter()
        values = table.get_many(heads)
        parts["read"].append(time.perf_counter() - s)
        present = [(k, v) for k, v in zip(heads, values, strict=True) if v is not None]
        s = time.perf_counter()
        table.put_many([k for k, _ in present], [v for _, v in present])
        store.commit(t - 1)
        parts["write"].append(time.perf_counter() - s)
        outputs.clear()
        df.push("lineitem", dl)
        df.push("orders", do)
        df.time_end(t)
        df.commit(t)
        s = time.perf_counter()
        consolidated = outputs[0].consolidate()
        parts["consolidate"].append(time.perf_counter() - s)
        assert len(consolidated.column_weights) > 0
    store.close()
    out = {k: statistics.median(v) * 1000 for k, v in parts.items()}
    out["keys_read"] = statistics.median(keys_read)
    return out


def figures(ms: dict, batch: int) -> dict:
    """diffs/s of the whole time and of what each floor allows at ``batch`` diffs a time."""
    floor = ms["read"] + ms["write"] + ms["consolidate"]
    in_memory = ms["write"] + ms["consolidate"]
    per_s = {
        "whole": batch / ms["whole"] * 1000,
        "floor_read_write_consolidate": batch / floor * 1000,
        "floor_without_reads": batch / in_memory * 1000,
    }
    return {
        "ms_per_batch": ms,
        "diffs_per_s": per_s,
        "target": target(per_s["whole"], "diffs_per_s.whole", at_least=TARGET),
        "floor_allows_target": per_s["floor_read_write_consolidate"] >= TARGET,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=6_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--cache-mb", type=int, default=64)
    add_json_option(ap, "join_floor")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ms = measure(args.rows, args.batch, args.batches, args.cache_mb, Path(tmp))
    result = figures(ms, args.batch)
    per_s = result["diffs_per_s"]
    print(f"\n== lineitem JOIN orders: {args.rows:,} lines, batches of {args.batch:,} diffs")
    print(f"   keys read a batch (median): {ms['keys_read']:,.0f}")
    for part in ("whole", "read", "write", "consolidate"):
        print(f"   {part:12} {ms[part]:7.1f} ms  -> {args.batch / ms[part] * 1000:11,.0f} diffs/s")
    print(
        f"   reads + write + consolidation: {per_s['floor_read_write_consolidate']:,.0f} diffs/s "
        f"at most; without the reads (state in memory): {per_s['floor_without_reads']:,.0f}; "
        f"the whole time: {per_s['whole']:,.0f} (target {TARGET:,})"
    )
    if args.json:
        save(args.json, {"settings": vars(args) | {"json": None}, **result})


if __name__ == "__main__":
    main()
