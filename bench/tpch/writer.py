"""A writer in its own process: commits a list of refresh streams back to back and reports
each transaction's time (commit included), so the writer's timings are not disturbed by the
engine's Python work sharing an interpreter (both share the machine's cores, as in production).

``start_writer(dsn, streams)`` returns ``(process, queue)``; the queue yields one dict
``{"start": epoch_s, "end": epoch_s, "times": [(kind, changed, seconds), ...]}``.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import psycopg

from bench.tpch.streams import Stream


def _write(dsn: str, streams: list[Stream], queue) -> None:
    times = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")
        start = time.time()
        for s in streams:
            changed, seconds = s.apply(conn)
            times.append((s.kind, changed, seconds))
        end = time.time()
    queue.put({"start": start, "end": end, "times": times})


def start_writer(dsn: str, streams: list[Stream]):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_write, args=(dsn, streams, queue), daemon=True)
    proc.start()
    return proc, queue
