"""Result-sink throughput against a real PostgreSQL: apply() and populate() of a 6-column view.

Populates a result table of ``--rows`` rows (bigint, int, text, numeric(12,2), timestamptz,
boolean), then applies ``--batches`` batches of ``--batch`` diffs of each kind and prints diffs/s
(the figure the >= 100k diffs/s at 100k-diff batches target is about) and ms per batch:
  * insert: new rows, weight +1;
  * delete: existing rows, weight -1;
  * update: -old +new pairs (``--batch``/2 rows updated);
  * dup: rows with weight +2 then -1 (generate_series insert, multiset delete of duplicates);
then prints population into a new table (COPY + rename) and re-population of the existing table
with 1% of rows changed (only the difference written).

    python -m bench.sink [--dsn DSN] [--rows 1000000] [--batch 100000] [--batches 3]

Without ``--dsn`` a private throwaway server is started (tests/postgres_server.py). This script
must not be imported by engine code; it drops its tables and its incview.views row when done.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg

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
T0 = datetime(2024, 1, 1, tzinfo=UTC)


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


def run(dsn: str, rows: int, batch: int, batches: int) -> None:
    rnd = random.Random(42)
    with psycopg.connect(dsn, autocommit=True) as conn:
        cat = ViewCatalog.open(conn)
        cat.delete(VIEW)
        cat.insert(VIEW, "-- bench", "public", VIEW)
        sink = ResultSink(conn, VIEW, "public", VIEW, COLUMNS)
        sink.drop()
        live = [make_row(i, rnd) for i in range(rows)]
        next_id = rows

        start = time.perf_counter()
        n = sink.populate(
            (DiffBatch.inserts(live[i : i + 100_000]) for i in range(0, rows, 100_000)), lsn=1
        )
        secs = time.perf_counter() - start
        print(f"populate new table: {fmt(n)} rows in {secs:.2f} s = {fmt(n / secs)} rows/s")
        conn.execute(f"VACUUM ANALYZE {VIEW}")

        lsn = 1
        results: dict[str, list[float]] = {}

        def timed(kind: str, diffs: DiffBatch) -> None:
            nonlocal lsn
            lsn += 1
            t = time.perf_counter()
            assert sink.apply(diffs, lsn)
            results.setdefault(kind, []).append(time.perf_counter() - t)

        for _ in range(batches):
            new = [make_row(next_id + i, rnd) for i in range(batch)]
            next_id += batch
            timed("insert", DiffBatch.inserts(new))
            live.extend(new)

            rnd.shuffle(live)
            gone, live = live[:batch], live[batch:]
            timed("delete", DiffBatch.deletes(gone))

            half = batch // 2
            old = live[:half]
            upd = [(r[0], r[1] + 1, r[2], r[3] + 1, r[4], not r[5]) for r in old]
            timed("update", DiffBatch(old + upd, [-1] * half + [1] * half))
            live[:half] = upd

            dup = [make_row(next_id + i, rnd) for i in range(half)]
            next_id += half
            timed("dup", DiffBatch(dup, [2] * half))
            timed("dup", DiffBatch(dup, [-1] * half))
            live.extend(dup)

        print(f"apply, {fmt(batch)}-diff batches against a ~{fmt(rows)}-row result table:")
        for kind, secs_list in results.items():
            med = statistics.median(secs_list)
            size = batch if kind in ("insert", "delete", "update") else batch // 2
            print(
                f"  {kind:7s} {fmt(size / med):>10s} diffs/s  "
                f"(median {med * 1000:.0f} ms/batch over {len(secs_list)})"
            )

        t = time.perf_counter()
        assert sink.apply(DiffBatch(), lsn + 1)
        print(f"  empty batch (LSN only): {(time.perf_counter() - t) * 1000:.1f} ms")
        lsn += 1

        total = sink.row_count()
        content = [r for r, w in ((r, 1) for r in conn.execute(f"SELECT * FROM {VIEW}"))]
        changed = max(1, total // 100)
        for i in range(changed):
            r = content[i]
            content[i] = (r[0], r[1], r[2] + "!", r[3], r[4], r[5])
        t = time.perf_counter()
        written = sink.populate(
            (DiffBatch.inserts(content[i : i + 100_000]) for i in range(0, total, 100_000)),
            lsn=lsn + 1,
        )
        secs = time.perf_counter() - t
        print(
            f"re-populate existing {fmt(total)}-row table, {fmt(changed)} rows changed: "
            f"{secs:.2f} s, {fmt(written)} rows written"
        )
        sink.drop()
        cat.delete(VIEW)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=3)
    args = ap.parse_args()
    if args.dsn:
        run(args.dsn, args.rows, args.batch, args.batches)
        return
    from tests.postgres_server import PostgresServer

    with PostgresServer() as server:
        run(server.dsn, args.rows, args.batch, args.batches)


if __name__ == "__main__":
    main()
