"""Waiting for the machine to settle before the writer's transactions are timed.

Two transients made the writer's times say more about when they were taken than about incview:
Postgres' background work after the load (autovacuum, the checkpoint of the load's WAL: early
UF transactions took 160-190 ms, ~50 ms a minute later), and the engine's own after its
populations (RocksDB compacting the new state in background threads of this process, on the
same two cores: RF1 28.6 ms right after the 11 TPC-H populations, 22.6 ms 30 s later, 23.1 ms
without incview; `/var/tmp` probe, SF 1). ``settle(conn)`` waits until no autovacuum worker
runs and this process (the embedded engine's threads included) has been idle for two seconds in
a row, then checkpoints; it returns the seconds it waited (reported with the figures).
"""

from __future__ import annotations

import os
import time

import psycopg

#: this process counts as idle below this share of one core over a second
IDLE_SHARE = 0.05


def settle(conn: psycopg.Connection, max_s: float = 180.0) -> float:
    """Wait for Postgres' autovacuum and this process's threads to go quiet, then CHECKPOINT;
    the seconds waited (at most ``max_s`` before the checkpoint)."""
    start = time.perf_counter()
    quiet = 0
    while time.perf_counter() - start < max_s and quiet < 2:
        cpu = _process_cpu()
        time.sleep(1.0)
        busy = _process_cpu() - cpu
        vacuuming = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
        ).fetchone()[0]
        quiet = quiet + 1 if busy < IDLE_SHARE and not vacuuming else 0
    conn.execute("CHECKPOINT")
    return time.perf_counter() - start


def _process_cpu() -> float:
    t = os.times()
    return t.user + t.system
