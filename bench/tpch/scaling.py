"""Scaling mode: the same fixed change stream at several scale factors.

Per scale factor (a fresh database each): load, ``CREATE MATERIALIZED VIEW`` and
``create_view`` for every view, a wait for the machine to settle (``settle``: the populations'
compactions end, as before the main benchmark's attached measurements), then ``reps`` x (RF1 of
1,500 orders with their lineitems, RF2 of 1,500 orders): commit -> ``catch_up`` of all views
timed (and each view alone, as in ``benchmark``), then ``REFRESH MATERIALIZED VIEW`` of every
view. The issue's target: the apply time at SF 3 within 1.5x of SF 0.1 while REFRESH grows with
the data. Returns rows for ``report.scaling_markdown``; measures only.

Until 2026-11-28 the streams began right after the last population: at SF 3 the first ones ran
beside RocksDB compacting 11 populations' state in the engine's background threads, on the same
two cores (a probe, all views, 1,500-order streams: the first RF2 300 ms, the next ones 211-235
ms), and the median of 3 carried that in (RF2 296-420 ms over runs).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from bench.tpch.benchmark import compare, log, timed
from bench.tpch.datagen import generate_base_csv
from bench.tpch.load import load
from bench.tpch.phase_times import PhaseTimes
from bench.tpch.queries import ViewQuery
from bench.tpch.settle import settle
from bench.tpch.streams import RefreshStreams
from engine.engine import Engine

FIXED_ORDERS = 1_500


def run_scaling(
    dsn_for: Callable[[float], str],
    sfs: list[float],
    views: tuple[ViewQuery, ...],
    runner: str = "local",
    reps: int = 3,
    char: bool = False,
) -> tuple[list[dict], bool, set[str]]:
    """``dsn_for(sf)`` gives a fresh database per scale factor.
    Returns (rows, all equal, labels of views the engine refused)."""
    rows = []
    all_equal = True
    refused: set[str] = set()
    for sf in sfs:
        dsn = dsn_for(sf)
        with (
            tempfile.TemporaryDirectory(prefix="tpch-scaling-") as tmp,
            psycopg.connect(dsn, autocommit=True) as conn,
        ):
            t0 = time.perf_counter()
            generate_base_csv(sf, Path(tmp) / "data")
            counts = load(conn, Path(tmp) / "data", char=char)
            log(f"SF {sf:g}: loaded {counts['lineitem']:,} lineitems in "
                f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
            for v in views:
                conn.execute(f"CREATE MATERIALIZED VIEW {v.name}_mv AS {v.sql}")
            with Engine(dsn, Path(tmp) / "state", runner=runner) as engine:
                live = []
                for v in views:
                    t0 = time.perf_counter()
                    try:
                        engine.create_view(v.name, v.sql)
                        live.append(v)
                        log(f"SF {sf:g} {v.label}: populated in {time.perf_counter() - t0:.1f} s")
                    except Exception as e:
                        refused.add(v.label)
                        log(f"SF {sf:g} {v.label}: create_view FAILED: {type(e).__name__}: {e}")
                settled = settle(conn)
                log(f"SF {sf:g}: settled in {settled:.0f} s (the populations' compactions)")
                phases = PhaseTimes(engine)
                streams = RefreshStreams(sf, size=FIXED_ORDERS)
                applies: dict[str, list[float]] = {"RF1": [], "RF2": []}
                alone: dict[str, list[float]] = {v.label: [] for v in live}
                refresh: dict[str, list[float]] = {v.label: [] for v in live}
                refresh_all: list[float] = []
                for _ in range(reps):
                    for kind in ("RF1", "RF2"):
                        stream = streams.next(kind)
                        changed, _ = stream.apply(conn)
                        phases.reset()
                        t0 = time.perf_counter()
                        engine.catch_up(timeout_s=3600)
                        total = time.perf_counter() - t0
                        applies[kind].append(total)
                        for v in live if phases.per_view and runner == "local" else []:
                            alone[v.label].append(phases.alone(v.name, total))
                        r_all = 0.0
                        for v in live:
                            r = timed(conn, f"REFRESH MATERIALIZED VIEW {v.name}_mv")
                            refresh[v.label].append(r)
                            r_all += r
                        refresh_all.append(r_all)
                        log(f"SF {sf:g} {kind}: {changed:,} rows; apply {total * 1000:.0f} ms; "
                            f"REFRESH all {r_all * 1000:.0f} ms")  # fmt: skip
                for v in live:
                    ok, diff = compare(conn, v)
                    if not ok:
                        all_equal = False
                        log(f"SF {sf:g} {v.label}: DIFFERS from its query: {diff}")
            rows.append(
                {
                    "sf": sf,
                    "lineitems": counts["lineitem"],
                    "rf1_apply": statistics.median(applies["RF1"]),
                    "rf2_apply": statistics.median(applies["RF2"]),
                    "refresh": statistics.median(refresh_all),
                    "settle_s": settled,
                    "per_view": {
                        v.label: (
                            statistics.median(alone[v.label]),
                            statistics.median(refresh[v.label]),
                        )
                        for v in live
                    },  # fmt: skip
                }
            )
            for v in views:
                conn.execute(f"DROP MATERIALIZED VIEW IF EXISTS {v.name}_mv")
    return rows, all_equal, refused
