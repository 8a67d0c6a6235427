"""CDC throughput: pgoutput decoding and whole-transaction polling against a real PostgreSQL.

Writes a workload (inserts in 1,000-row transactions, then single-row-per-statement updates in
100-row transactions) into a 7-column table with REPLICA IDENTITY FULL, then prints, for the
row decoder and the columnar one on the same messages, in the same run:
  * peek: the server's own decoding + transfer of the binary messages (no Python decoding);
  * decode: the messages -> values: ``PgOutputDecoder.decode_all`` (events of Python tuples)
    vs ``columnar_decode.decode_blocks`` (Arrow columns per relation), row changes/s (the
    figure issue 14's ">= 1M rows/s" is about);
  * assemble: decode + grouping into ``Transaction``s of ``DiffBatch``es (diffs/s), and the
    columnar batches' ``rows`` made as well (what a row-wise consumer pays);
  * poll loop: ``poll(max_changes)`` + ``advance()`` until drained, end to end (each decoder
    drains a slot of its own).
With ``--small N``, N more single-row INSERT transactions follow (per-transaction costs).

    python -m bench.cdc_decode [--dsn DSN] [--rows 200000] [--updates 50000] [--small 0] [--json]

With ``--json`` the figures also go to bench/results/cdc_decode.json, with issue 14's target
(the columnar decode >= 1M row changes/s) judged on this run.

Without ``--dsn`` a private throwaway server is started (tests/postgres_server.py). This
script must not be imported by engine code, and it drops its slot and publication when done.
The machine is shared: compare the two decoders' figures of one run, not across runs.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from bench.bench_postgres import bench_dsn
from bench.results_json import add_json_option, save, target
from engine.postgres.cdc import CdcReader
from engine.postgres.columnar_decode import decode_blocks
from engine.postgres.pgoutput import Delete, Insert, PgOutputDecoder, Update

SLOT = "bench_cdc_decode"
SLOT2 = "bench_cdc_decode_2"
PUB = "bench_cdc_decode_pub"
#: issue 14: our decode must never be the bottleneck
DECODE_TARGET = 1_000_000


def fmt(n: float) -> str:
    return f"{n:,.0f}"


def workload(conn: psycopg.Connection, rows: int, updates: int) -> None:
    conn.execute("DROP TABLE IF EXISTS bench_orders")
    conn.execute(
        "CREATE TABLE bench_orders (id bigint PRIMARY KEY, customer int, name text,"
        " amount numeric(12,2), placed timestamptz, paid boolean, due date)"
    )
    conn.execute("ALTER TABLE bench_orders REPLICA IDENTITY FULL")


def fill(conn: psycopg.Connection, rows: int, updates: int, small: int) -> None:
    for start in range(0, rows, 1000):
        conn.execute(
            "INSERT INTO bench_orders SELECT g, g %% 997, 'customer ' || (g %% 997),"
            " (g %% 100000) / 100.0, timestamptz '2024-01-01' + g * interval '1 second',"
            " g %% 2 = 0, date '2024-01-01' + (g %% 365)::int FROM generate_series(%s::bigint, %s::bigint) g",
            (start, min(start + 1000, rows) - 1),
        )
    for start in range(0, updates, 100):
        with conn.transaction():
            conn.execute(
                "UPDATE bench_orders SET amount = amount + 1 WHERE id >= %s AND id < %s",
                (start, start + 100),
            )
    for i in range(rows, rows + small):
        conn.execute(
            "INSERT INTO bench_orders VALUES (%s, 1, 'customer', 1.50, now(), true, current_date)",
            (i,),
        )


def interleaved(fns: dict, runs: int) -> dict:
    """``{name: (best wall s, best CPU s, result)}``, the functions run in turn ``runs`` times
    (a shared machine's load then weighs on each alike; CPU time ignores waiting for a core)."""
    best = {k: [float("inf"), float("inf"), None] for k in fns}
    for _ in range(runs):
        for k, f in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            out = f()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            b = best[k]
            b[0], b[1], b[2] = min(b[0], wall), min(b[1], cpu), out
    return {k: tuple(v) for k, v in best.items()}


def assemble(reader: CdcReader, messages: list[bytes], columnar: bool, rows: bool):
    reader.decoder = PgOutputDecoder()
    reader.columnar = columnar
    reader.last_lsn = 0
    txs, _ = reader._assemble(messages)
    if rows:
        for tx in txs:
            for batch in tx.changes.values():
                batch.rows  # noqa: B018
    return txs


def poll_loop(dsn: str, slot: str, columnar: bool) -> tuple[float, int]:
    reader = CdcReader(dsn, slot, PUB, columnar=columnar)
    try:
        t0 = time.perf_counter()
        polled = 0
        while batch := reader.poll(max_changes=10000):
            polled += sum(tx.change_count for tx in batch)
            reader.advance(batch[-1].end_lsn)
        return time.perf_counter() - t0, polled
    finally:
        reader.close()


def run(dsn: str, rows: int, updates: int, small: int, runs: int = 5) -> dict:
    """Write the workload, measure, print; returns the figures (``--json``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        workload(conn, rows, updates)
        reader = CdcReader(dsn, SLOT, PUB)
        try:
            reader.ensure(["bench_orders"])
            # a second slot at the same position: each poll loop drains (advances) its own
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT2,))
            t0 = time.perf_counter()
            fill(conn, rows, updates, small)
            write_s = time.perf_counter() - t0
            reader.flush_wal()

            t0 = time.perf_counter()
            messages = reader.peek(None)
            peek_s = time.perf_counter() - t0
            nbytes = sum(len(m) for m in messages)

            decodes = interleaved(
                {
                    "rows": lambda: PgOutputDecoder().decode_all(messages),
                    "columnar": lambda: decode_blocks(PgOutputDecoder(), messages),
                },
                runs,
            )
            events, decoded = decodes["rows"][2], decodes["columnar"][2]
            changes = sum(isinstance(e, Insert | Update | Delete) for e in events)
            assert sum(int(g.first.sum()) for d in decoded for g in d.groups) == changes
            asm = interleaved(
                {
                    "rows": lambda: assemble(reader, messages, False, False),
                    "columnar": lambda: assemble(reader, messages, True, False),
                    "columnar + rows": lambda: assemble(reader, messages, True, True),
                },
                runs,
            )
            txs = asm["rows"][2]
            diffs = sum(tx.change_count for tx in txs)
            arrow = sum(
                b.columns is not None for tx in asm["columnar"][2] for b in tx.changes.values()
            )
            tables = sum(len(tx.changes) for tx in txs)

            polls = {False: poll_loop(dsn, SLOT, False), True: poll_loop(dsn, SLOT2, True)}
        finally:
            reader.drop()
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (SLOT2,),
            )
            reader.close()
            conn.execute("DROP TABLE IF EXISTS bench_orders")

    print(
        f"workload: {fmt(rows)} inserts + {fmt(updates)} updates + {fmt(small)} single-row"
        f" transactions, {len(txs)} transactions"
    )
    print(f"  write (source side, for scale)        {write_s:7.2f} s")
    print(
        f"  peek (server decode + transfer)       {peek_s:7.2f} s  {fmt(changes / peek_s)} row"
        f" changes/s  ({fmt(len(messages))} messages, {nbytes / 1e6:.1f} MB)"
    )
    print(f"  (best of {runs} runs, in turn; wall time, and in brackets CPU time)")
    for name, label in (
        ("rows", "rows (PgOutputDecoder)"),
        ("columnar", "columnar (decode_blocks)"),
    ):
        wall, cpu, _ = decodes[name]
        print(
            f"  decode, {label:28s} {wall:6.2f} s  {fmt(changes / wall):>9} row changes/s"
            f"  ({fmt(changes / cpu)})"
        )
    for name in ("rows", "columnar", "columnar + rows"):
        wall, cpu, _ = asm[name]
        print(
            f"  assemble, {name:26s} {wall:6.2f} s  {fmt(diffs / wall):>9} diffs/s"
            f"        ({fmt(diffs / cpu)})"
        )
    print(
        f"    ({arrow} of {tables} table batches as Arrow; 'columnar + rows': batch.rows made too)"
    )
    for columnar in (False, True):
        s_, polled = polls[columnar]
        label = "columnar" if columnar else "rows    "
        print(f"  poll loop, {label} (peek + decode)   {s_:6.2f} s  {fmt(polled / s_):>9} diffs/s")
    columnar_decode = changes / decodes["columnar"][0]
    return {
        "workload": {
            "inserts": rows, "updates": updates, "small_transactions": small,
            "transactions": len(txs), "messages": len(messages), "mb": nbytes / 1e6,
        },
        "write_s": write_s,
        "peek_rows_per_s": changes / peek_s,
        "decode_rows_per_s": {k: changes / decodes[k][0] for k in decodes},
        "decode_cpu_rows_per_s": {k: changes / decodes[k][1] for k in decodes},
        "assemble_diffs_per_s": {k: diffs / asm[k][0] for k in asm},
        "poll_loop_diffs_per_s": {
            "columnar" if c else "rows": polled / s_ for c, (s_, polled) in polls.items()
        },
        "target": target(columnar_decode, "decode_rows_per_s.columnar", at_least=DECODE_TARGET),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a PostgreSQL with wal_level=logical (default: start one)")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--updates", type=int, default=50_000)
    ap.add_argument("--small", type=int, default=0, help="single-row transactions after them")
    add_json_option(ap, "cdc_decode")
    args = ap.parse_args()
    with bench_dsn(args.dsn) as dsn:
        figures = run(dsn, args.rows, args.updates, args.small)
    if args.json:
        save(args.json, figures)


if __name__ == "__main__":
    main()
