"""Memory of many views' state, without and within an engine-wide budget (``Engine(memory_mb=)``).

Fills ``items`` (``--rows``, each with a key into ``dims``) and ``dims`` (a tenth as many), then,
in a fresh process per setting (no budget; ``--memory-mb`` shared by use, the default; the same
with equal shares, ``INCVIEW_BUDGET_SHARES=equal``), creates ``--views`` views joining them and
grouping (each view its own join state, caches and memtables), applies ``--rounds`` rounds of
``--updates`` random updates of ``items`` with a ``catch_up`` after each, and prints the
process's own memory (resident and not file-backed: the heap, RocksDB's memtables and block
cache, the collections' caches) after the populations and after the updates, next to the time the
rounds took; every view is compared with its query at the end. ``--busy K``: only the first K
views read ``items``, the others a copy that does not change (their caches idle): the rounds'
time is then the busy views', and the budget by use gives them what the idle ones do not use.
With ``--json`` the figures also go to bench/results/memory_budget.json (``--busy``: to
memory_budget_busy.json).

    python -m bench.memory_budget [--dsn DSN] [--views 24] [--memory-mb 128] [--busy K] [--json]

Without ``--dsn`` a private throwaway server is started (tests/postgres_server.py). Compare the
figures of one run (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from bench.bench_postgres import bench_dsn
from bench.results_json import add_json_option, save
from engine.engine import Engine
from engine.memory_setting import SHARES_ENV

MB = 1 << 20


def own_mb() -> float:
    """This process's resident memory that is not file-backed (statm: resident - shared)."""
    fields = Path("/proc/self/statm").read_text().split()
    return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE") / MB


def view_sql(j: int, views: int, busy: int | None = None) -> str:
    """View ``j`` of ``views``: over ``items`` when among the ``busy`` first (None: all)."""
    table = "items" if busy is None or j < busy else "quiet_items"
    return (
        f"SELECT d.grp, count(*) AS n, sum(i.v) AS total FROM {table} i JOIN dims d ON i.k = d.k "
        f"WHERE i.id % {views} <> {j} GROUP BY d.grp"
    )


def fill(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS items, quiet_items, dims")
        conn.execute("CREATE TABLE dims (k int PRIMARY KEY, grp int, label text)")
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, k int, v int, note text)")
        conn.execute("ALTER TABLE dims REPLICA IDENTITY FULL")
        conn.execute("ALTER TABLE items REPLICA IDENTITY FULL")
        keys = max(1, rows // 10)
        conn.execute(
            "INSERT INTO dims SELECT g, g %% 50, repeat('d', 40) || g FROM generate_series(0, %s) g",
            (keys - 1,),
        )
        conn.execute(
            "INSERT INTO items SELECT g, (g::int8 * 7919) %% %s, g %% 1000, repeat('n', 60) || g "
            "FROM generate_series(0, %s) g",
            (keys, rows - 1),
        )
        conn.execute("CREATE TABLE quiet_items (LIKE items INCLUDING ALL)")
        conn.execute("ALTER TABLE quiet_items REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO quiet_items SELECT * FROM items")
        for table in ("items", "quiet_items", "dims"):
            conn.execute(f"ANALYZE {table}")


def child(
    dsn: str, views: int, rows: int, rounds: int, updates: int, memory_mb: int, busy: int | None
) -> dict:
    """One setting, in this process: the figures as a dict."""
    rng = random.Random(7)
    shares = os.environ.get(SHARES_ENV, "use") if memory_mb else None
    out: dict = {"memory_mb": memory_mb, "shares": shares, "own_mb_at_start": round(own_mb(), 1)}
    with (
        tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as state,
        Engine(dsn, state, runner="local", memory_mb=memory_mb) as eng,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        t0 = time.perf_counter()
        for j in range(views):
            eng.create_view(f"mb_view_{j}", view_sql(j, views, busy))
        out["populate_s"] = round(time.perf_counter() - t0, 2)
        out["own_mb_after_populations"] = round(own_mb(), 1)
        t0 = time.perf_counter()
        for _ in range(rounds):
            ids = rng.sample(range(rows), updates)
            conn.execute("UPDATE items SET v = v + 1 WHERE id = ANY(%s)", (ids,))
            eng.catch_up(timeout_s=600)
        out["rounds_s"] = round(time.perf_counter() - t0, 2)
        out["own_mb_after_updates"] = round(own_mb(), 1)
        if eng.memory_budget is not None:
            caches = [c for j in range(views) for c in eng.views[f"mb_view_{j}"].store._caches]
            given = [eng.memory_budget.share_of(c) or 0 for c in caches]
            out["cache_shares_mb"] = {
                "largest": round(max(given) / MB, 1),
                "smallest": round(min(given) / MB, 1),
                "caches": len(given),
            }
            out["cache_hits"] = sum(getattr(c, "hits", 0) for c in caches)
            out["cache_misses"] = sum(getattr(c, "misses", 0) for c in caches)
        out["equal"] = all(
            conn.execute(
                f"SELECT (SELECT count(*) FROM (({view_sql(j, views, busy)}) EXCEPT ALL "
                f"SELECT * FROM mb_view_{j}) a) + (SELECT count(*) FROM (SELECT * FROM "
                f"mb_view_{j} EXCEPT ALL ({view_sql(j, views, busy)})) b)"
            ).fetchone()[0]
            == 0
            for j in range(views)
        )
        for j in range(views):
            eng.drop_view(f"mb_view_{j}")
    return out


def run(
    dsn: str, views: int, rows: int, rounds: int, updates: int, memory_mb: int, busy: int | None
) -> dict:
    fill(dsn, rows)
    settings = {}
    for mb, shares in ((0, "use"), (memory_mb, "use"), (memory_mb, "equal")):
        cmd = [sys.executable, "-m", "bench.memory_budget", "--child", str(mb), "--dsn", dsn,
               "--views", str(views), "--rows", str(rows), "--rounds", str(rounds),
               "--updates", str(updates)]  # fmt: skip
        if busy is not None:
            cmd += ["--busy", str(busy)]
        env = {**os.environ, SHARES_ENV: shares}
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        name = (
            (f"budget_{mb}_mb" + ("_equal_shares" if shares == "equal" else ""))
            if mb
            else ("no_budget")
        )
        settings[name] = r
        line = (
            f"{name:>28}: own memory {r['own_mb_at_start']:,.0f} MB at start, "
            f"{r['own_mb_after_populations']:,.0f} MB after {views} populations "
            f"({r['populate_s']:.1f} s), {r['own_mb_after_updates']:,.0f} MB after {rounds} x "
            f"{updates:,} updates ({r['rounds_s']:.1f} s); views equal: {r['equal']}"
        )
        if "cache_shares_mb" in r:
            c = r["cache_shares_mb"]
            seen = r["cache_hits"] + r["cache_misses"]
            line += (
                f"; {c['caches']} caches given {c['smallest']:g}-{c['largest']:g} MB, "
                f"{r['cache_hits'] / max(1, seen):.0%} of the {seen:,} keys the entry caches "
                "read found in them"
            )
        print(line, flush=True)
    shape = {"views": views, "rows": rows, "rounds": rounds, "updates": updates}
    if busy is not None:
        shape["busy"] = busy
    return {"settings": shape, **settings}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a PostgreSQL with wal_level=logical (default: start one)")
    ap.add_argument("--views", type=int, default=24)
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--updates", type=int, default=20_000)
    ap.add_argument("--memory-mb", type=int, default=128)
    ap.add_argument("--busy", type=int, help="only the first K views see updates")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)  # one setting, in this process
    add_json_option(ap, "memory_budget")
    args = ap.parse_args()
    if args.child is not None:
        shape = (args.views, args.rows, args.rounds, args.updates, args.child, args.busy)
        print(json.dumps(child(args.dsn, *shape)), flush=True)
        return
    shape = (args.views, args.rows, args.rounds, args.updates, args.memory_mb, args.busy)
    if args.json is not None and args.busy is not None and args.json.name == "memory_budget.json":
        args.json = args.json.with_name("memory_budget_busy.json")
    with bench_dsn(args.dsn) as dsn:
        out = run(dsn, *shape)
    if args.json:
        save(args.json, out)


if __name__ == "__main__":
    main()
