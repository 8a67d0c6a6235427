"""CDC throughput: pgoutput decoding and whole-transaction polling against a real PostgreSQL.

Writes a workload (inserts in 1,000-row transactions, then single-row-per-statement updates in
100-row transactions) into a 7-column table with REPLICA IDENTITY FULL, then prints:
  * peek: the server's own decoding + transfer of the binary messages (no Python decoding);
  * decode: ``PgOutputDecoder.decode_all`` over the fetched messages (row changes/s, the
    figure the CDC target of >= 100k row changes/s is about);
  * assemble: decode + grouping into ``Transaction``s of ``DiffBatch``es (diffs/s);
  * poll loop: ``poll(max_changes)`` + ``advance()`` until drained, end to end.

    python -m bench.cdc_decode [--dsn DSN] [--rows 200000] [--updates 50000]

Without ``--dsn`` a private throwaway server is started (tests/postgres_server.py). This
script must not be imported by engine code, and it drops its slot and publication when done.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from engine.postgres.cdc import CdcReader
from engine.postgres.pgoutput import Delete, Insert, PgOutputDecoder, Update

SLOT = "bench_cdc_decode"
PUB = "bench_cdc_decode_pub"


def fmt(n: float) -> str:
    return f"{n:,.0f}"


def workload(conn: psycopg.Connection, rows: int, updates: int) -> None:
    conn.execute("DROP TABLE IF EXISTS bench_orders")
    conn.execute(
        "CREATE TABLE bench_orders (id bigint PRIMARY KEY, customer int, name text,"
        " amount numeric(12,2), placed timestamptz, paid boolean, due date)"
    )
    conn.execute("ALTER TABLE bench_orders REPLICA IDENTITY FULL")


def fill(conn: psycopg.Connection, rows: int, updates: int) -> None:
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


def run(dsn: str, rows: int, updates: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        workload(conn, rows, updates)
        reader = CdcReader(dsn, SLOT, PUB)
        try:
            reader.ensure(["bench_orders"])
            t0 = time.perf_counter()
            fill(conn, rows, updates)
            write_s = time.perf_counter() - t0
            reader.flush_wal()

            t0 = time.perf_counter()
            messages = reader.peek(None)
            peek_s = time.perf_counter() - t0
            nbytes = sum(len(m) for m in messages)

            best = float("inf")
            for _ in range(3):
                decoder = PgOutputDecoder()
                t0 = time.perf_counter()
                events = decoder.decode_all(messages)
                best = min(best, time.perf_counter() - t0)
            changes = sum(isinstance(e, Insert | Update | Delete) for e in events)

            best_asm = float("inf")
            for _ in range(3):
                reader.decoder = PgOutputDecoder()
                reader.last_lsn = 0
                t0 = time.perf_counter()
                txs, _ = reader._assemble(messages)
                best_asm = min(best_asm, time.perf_counter() - t0)
            diffs = sum(tx.change_count for tx in txs)

            reader.decoder = PgOutputDecoder()
            reader.last_lsn = 0
            t0 = time.perf_counter()
            polled = 0
            while batch := reader.poll(max_changes=10000):
                polled += sum(tx.change_count for tx in batch)
                reader.advance(batch[-1].end_lsn)
            poll_s = time.perf_counter() - t0
        finally:
            reader.drop()
            reader.close()
            conn.execute("DROP TABLE IF EXISTS bench_orders")

    print(f"workload: {fmt(rows)} inserts + {fmt(updates)} updates, {len(txs)} transactions")
    print(f"  write (source side, for scale)   {write_s:7.2f} s")
    print(
        f"  peek (server decode + transfer)  {peek_s:7.2f} s  {fmt(changes / peek_s)} row changes/s"
        f"  ({fmt(len(messages))} messages, {nbytes / 1e6:.1f} MB)"
    )
    print(f"  decode (PgOutputDecoder)         {best:7.2f} s  {fmt(changes / best)} row changes/s")
    print(f"  assemble (decode + DiffBatches)  {best_asm:7.2f} s  {fmt(diffs / best_asm)} diffs/s")
    print(
        f"  poll loop (peek+decode+advance)  {poll_s:7.2f} s  {fmt(polled / poll_s)} diffs/s"
        f"  ({fmt(changes / poll_s)} row changes/s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a PostgreSQL with wal_level=logical (default: start one)")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--updates", type=int, default=50_000)
    args = ap.parse_args()
    if args.dsn:
        run(args.dsn, args.rows, args.updates)
        return
    from tests.postgres_server import PostgresServer

    with PostgresServer() as server:
        run(server.dsn, args.rows, args.updates)


if __name__ == "__main__":
    main()
