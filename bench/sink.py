"""Result-sink throughput against a real PostgreSQL: apply() by the row path and the Arrow path.

Populates a result table of ``--rows`` rows (bigint, int, text, numeric(12,2), timestamptz,
boolean), then applies ``--batches`` batches of ``--batch`` diffs of each kind and prints diffs/s
and ms per batch, per kind, for each path side by side, on the same batches:
  * insert: new rows, weight +1;
  * delete: existing rows, weight -1;
  * update: -old +new pairs (``--batch``/2 rows updated);
  * dup: rows with weight +2 then -1 (repeated inserts, multiset delete of duplicates).
The paths (``--paths``):
  * rows: ``ResultSink(arrow_copy=False)`` with tuple batches: psycopg ``write_row`` into the diff
    table, then DELETE ... USING and INSERT ... SELECT (the sink before the Arrow COPY);
  * arrow: the default sink with columnar batches (``DiffBatch.from_columns``, what the columnar
    collections emit): binary COPY encoded from the Arrow arrays, retractions into the diff
    table, insertions straight into the result table;
  * arrow-rows: the default sink with tuple batches (converted to Arrow once, then the same).
Each path gets its own freshly populated table; ``--rounds`` repeats the whole sequence, paths in
turn, and the figure is the median over rounds and batches. A second table splits each batch's
time into CPU milliseconds of this process (encoding, conversion) and of the Postgres backend
(COPY, index maintenance, the delete's lookups), read from /proc when the server is local: on a
shared machine CPU times are steadier than wall times. Then, once, population into a new
table (COPY + rename) and re-population of the existing table with 1% of rows changed.

    python -m bench.sink [--dsn DSN] [--rows 1000000] [--batch 100000] [--batches 3] [--rounds 2]
        [--json]

With ``--json`` the figures also go to bench/results/sink.json, with issue 14's target (the Arrow
path >= 500k diffs/s) judged per kind on this run.

Without ``--dsn`` a private throwaway server is started (tests/postgres_server.py). This script
must not be imported by engine code; it drops its tables and its incview.views rows when done.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import numpy as np
import psycopg
import pyarrow as pa

from bench.bench_postgres import bench_dsn
from bench.results_json import add_json_option, save, target
from engine.dataflow.batch import DiffBatch
from engine.postgres.sink import ResultSink
from engine.postgres.view_catalog import ViewCatalog
from engine.sql.types import BIGINT, BOOLEAN, INTEGER, TEXT, TIMESTAMPTZ, numeric

VIEW = "bench_sink"
COLUMNS = [
    ("id", BIGINT),
    ("customer", INTEGER),
    ("name", TEXT),
    ("amount", numeric(12, 2)),
    ("placed", TIMESTAMPTZ),
    ("paid", BOOLEAN),
]
ARROW_TYPES = [
    pa.int64(),
    pa.int64(),
    pa.string(),
    pa.decimal128(12, 2),
    pa.timestamp("us", tz="UTC"),
    pa.bool_(),
]
T0 = datetime(2024, 1, 1, tzinfo=UTC)
KINDS = ("insert", "delete", "update", "dup")
PATHS = ("rows", "arrow", "arrow-rows")
#: issue 14: the sink writes a time's net diff from Arrow at this many diffs/s or more
ARROW_TARGET = 500_000


def fmt(n: float) -> str:
    return f"{n:,.0f}"


def make_row(i: int, rnd: random.Random) -> tuple:
    return (
        i,
        rnd.randrange(10_000),
        f"customer-{rnd.randrange(100_000)}",
        Decimal(rnd.randrange(1_000_000)) / 100,
        T0 + timedelta(seconds=rnd.randrange(10_000_000)),
        rnd.random() < 0.5,
    )


def make_steps(rows: int, batch: int, batches: int) -> tuple[list[tuple], list[tuple]]:
    """The initial rows and the (kind, diffs counted, DiffBatch) steps, the same for every path."""
    rnd = random.Random(42)
    live = [make_row(i, rnd) for i in range(rows)]
    initial = list(live)
    next_id = rows
    steps: list[tuple] = []
    half = batch // 2
    for _ in range(batches):
        new = [make_row(next_id + i, rnd) for i in range(batch)]
        next_id += batch
        steps.append(("insert", batch, DiffBatch.inserts(new)))
        live.extend(new)

        rnd.shuffle(live)
        gone, live = live[:batch], live[batch:]
        steps.append(("delete", batch, DiffBatch.deletes(gone)))

        old = live[:half]
        upd = [(r[0], r[1] + 1, r[2], r[3] + 1, r[4], not r[5]) for r in old]
        steps.append(("update", batch, DiffBatch(old + upd, [-1] * half + [1] * half)))
        live[:half] = upd

        dup = [make_row(next_id + i, rnd) for i in range(half)]
        next_id += half
        steps.append(("dup", half, DiffBatch(dup, [2] * half)))
        steps.append(("dup", half, DiffBatch(dup, [-1] * half)))
        live.extend(dup)
    return initial, steps


def columnar(diffs: DiffBatch) -> DiffBatch:
    """The same diffs as Arrow columns (what a columnar collection hands the sink)."""
    columns = list(zip(*diffs.rows, strict=True))
    arrays = [pa.array(c, t) for c, t in zip(columns, ARROW_TYPES, strict=True)]
    return DiffBatch.from_columns(arrays, np.asarray(diffs.weights, dtype=np.int64))


def backend_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of a local Postgres backend process, or None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_path(
    conn: psycopg.Connection, path: str, initial: list[tuple], steps: list[tuple]
) -> dict[str, list[tuple[float, float, float | None]]]:
    """Populate a fresh table for ``path`` and apply every step; (wall, client CPU, server CPU)
    seconds per step, by kind."""
    view = f"{VIEW}_{path.replace('-', '_')}"
    cat = ViewCatalog.open(conn)
    cat.delete(view)
    cat.insert(view, "-- bench", "public", view)
    sink = ResultSink(conn, view, "public", view, COLUMNS, arrow_copy=path != "rows")
    sink.drop()
    sink.populate(
        (DiffBatch.inserts(initial[i : i + 100_000]) for i in range(0, len(initial), 100_000)),
        lsn=1,
    )
    conn.execute(f"VACUUM ANALYZE {view}")
    batches = [(kind, columnar(d) if path == "arrow" else d) for kind, _, d in steps]
    secs: dict[str, list[tuple[float, float, float | None]]] = {}
    pid = conn.info.backend_pid
    for lsn, (kind, diffs) in enumerate(batches, start=2):
        server = backend_cpu(pid)
        client = time.process_time()
        t = time.perf_counter()
        assert sink.apply(diffs, lsn)
        wall = time.perf_counter() - t
        client = time.process_time() - client
        after = backend_cpu(pid)
        server = None if server is None or after is None else after - server
        secs.setdefault(kind, []).append((wall, client, server))
    want = len(initial) + sum(sum(d.weights) for _, _, d in steps)
    assert sink.row_count() == want, (path, sink.row_count(), want)
    sink.drop()
    cat.delete(view)
    return secs


def run(dsn: str, rows: int, batch: int, batches: int, rounds: int, paths: list[str]) -> dict:
    """Measure and print; returns the figures (``--json``)."""
    initial, steps = make_steps(rows, batch, batches)
    sizes = {kind: size for kind, size, _ in steps}
    results: dict[str, dict[str, list[tuple]]] = {p: {} for p in paths}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for r in range(rounds):
            for path in paths if r % 2 == 0 else paths[::-1]:
                for kind, secs in run_path(conn, path, initial, steps).items():
                    results[path].setdefault(kind, []).extend(secs)
        figures: dict = {
            "settings": {"rows": rows, "batch": batch, "batches": batches, "rounds": rounds},
            "diffs_per_s": {p: {} for p in paths},
        }
        print(
            f"apply, {fmt(batch)}-diff batches against a ~{fmt(rows)}-row result table "
            f"(median of {rounds} round(s) x {batches} batch(es)), diffs/s:"
        )
        print("  " + f"{'kind':8s}" + "".join(f"{p:>16s}" for p in paths))
        for kind in KINDS:
            cells = []
            for p in paths:
                med = statistics.median(w for w, _, _ in results[p][kind])
                figures["diffs_per_s"][p][kind] = sizes[kind] / med
                cells.append(f"{fmt(sizes[kind] / med)} {med * 1000:4.0f}ms")
            print("  " + f"{kind:8s}" + "".join(f"{c:>16s}" for c in cells))
        if all(s is not None for p in paths for v in results[p].values() for _, _, s in v):
            figures["cpu_ms_per_batch"] = {p: {} for p in paths}
            print("CPU ms per batch, median (client + Postgres backend):")
            print("  " + f"{'kind':8s}" + "".join(f"{p:>16s}" for p in paths))
            for kind in KINDS:
                cells = []
                for p in paths:
                    client = statistics.median(c for _, c, _ in results[p][kind]) * 1000
                    server = statistics.median(s for _, _, s in results[p][kind]) * 1000
                    figures["cpu_ms_per_batch"][p][kind] = {"client": client, "server": server}
                    cells.append(f"{client:.0f} + {server:.0f}")
                print("  " + f"{kind:8s}" + "".join(f"{c:>16s}" for c in cells))
        if "arrow" in paths:
            figures["targets"] = {
                kind: target(
                    figures["diffs_per_s"]["arrow"][kind],
                    f"diffs_per_s.arrow.{kind}",
                    at_least=ARROW_TARGET,
                )
                for kind in KINDS
            }
        figures["population"] = population(conn, initial)
    return figures


def population(conn: psycopg.Connection, initial: list[tuple]) -> dict:
    """Population into a new table, an empty apply, re-population with 1% of rows changed;
    returns their figures."""
    cat = ViewCatalog.open(conn)
    cat.delete(VIEW)
    cat.insert(VIEW, "-- bench", "public", VIEW)
    sink = ResultSink(conn, VIEW, "public", VIEW, COLUMNS)
    sink.drop()
    n = len(initial)
    start = time.perf_counter()
    written = sink.populate(
        (DiffBatch.inserts(initial[i : i + 100_000]) for i in range(0, n, 100_000)), lsn=1
    )
    secs = time.perf_counter() - start
    print(f"populate new table: {fmt(written)} rows in {secs:.2f} s = {fmt(written / secs)} rows/s")
    out = {"new_table_rows_per_s": written / secs}
    t = time.perf_counter()
    assert sink.apply(DiffBatch(), 2)
    out["empty_batch_ms"] = (time.perf_counter() - t) * 1000
    print(f"empty batch (LSN only): {out['empty_batch_ms']:.1f} ms")
    content = list(conn.execute(f"SELECT * FROM {VIEW}"))
    changed = max(1, n // 100)
    for i in range(changed):
        r = content[i]
        content[i] = (r[0], r[1], r[2] + "!", r[3], r[4], r[5])
    t = time.perf_counter()
    written = sink.populate(
        (DiffBatch.inserts(content[i : i + 100_000]) for i in range(0, n, 100_000)), lsn=3
    )
    secs = time.perf_counter() - t
    print(
        f"re-populate existing {fmt(n)}-row table, {fmt(changed)} rows changed: "
        f"{secs:.2f} s, {fmt(written)} rows written"
    )
    out["repopulate_1pct_changed_s"] = secs
    sink.drop()
    cat.delete(VIEW)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {PATHS}")
    add_json_option(ap, "sink")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if unknown := set(paths) - set(PATHS):
        ap.error(f"unknown paths {sorted(unknown)}; choose from {PATHS}")
    params = (args.rows, args.batch, args.batches, args.rounds, paths)
    with bench_dsn(args.dsn) as dsn:
        figures = run(dsn, *params)
    if args.json:
        save(args.json, figures)


if __name__ == "__main__":
    main()
