"""Huge transactions (issue 17, fault 6): time and peak RSS of applying one 1M-row transaction.

For each view and each buffering setting, a child process (so its peak RSS is its own) opens an
``Engine(runner="local")`` on a fresh database, creates the view over an empty table, then:

  1. one transaction INSERTs ``--rows`` rows, ``catch_up()`` applies it;
  2. one transaction DELETEs half of them, ``catch_up()`` applies it;

and reports the seconds of each ``catch_up``, the peak RSS (``VmHWM`` of /proc/self/status)
after each, the RSS before the first, the spill counters, and whether the result table equals
the query afterwards (EXCEPT ALL both ways). Views: ``rows`` (a filter/projection whose output is
every row) and ``groups`` (a GROUP BY with 100 groups). Settings (``--bounds``, values of
``max_buffered_changes``): ``0`` (unbounded: a whole transaction in memory, the path before the
bound existed), 100,000 (the engine's default) and 20,000.

    python -m bench.huge_transaction [--rows 1000000] [--bounds 0,100000,20000] [--dsn DSN]

Without ``--dsn`` a private throwaway server is started (tests/postgres_server.py). Writes
bench/results/huge_transaction.json. Must not be imported by engine code.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from bench.results_json import RESULTS as RESULTS_DIR
from bench.results_json import save

VIEWS = {
    "rows": "SELECT id, amount, note FROM big WHERE grp >= 0",
    "groups": "SELECT grp, count(*) AS n, sum(amount) AS total FROM big GROUP BY grp",
}
RESULTS = RESULTS_DIR / "huge_transaction.json"


def _status(field: str) -> float:
    """A /proc/self/status field in MB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    raise KeyError(field)


def child(dsn: str, view: str, rows: int, bound: int) -> dict:
    """One run in this process: the figures as a dict."""
    from engine import Engine
    from tests.e2e.test_engine_oracle import diff_rows

    sql = VIEWS[view]
    out: dict = {"view": view, "rows": rows, "max_buffered_changes": bound}
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        tempfile.TemporaryDirectory() as state,
    ):
        conn.execute("CREATE TABLE big (id int, grp int, amount numeric(12,2), note text)")
        conn.execute("ALTER TABLE big REPLICA IDENTITY FULL")
        with Engine(dsn, state, runner="local", max_buffered_changes=bound) as eng:
            eng.create_view(view, sql)
            out["rss_before_mb"] = round(_status("VmRSS"), 1)
            conn.execute(
                "INSERT INTO big SELECT i, i %% 100, (i %% 1000) * 1.25, 'note ' || i "
                "FROM generate_series(1, %s) i",
                (rows,),
            )
            t0 = time.perf_counter()
            eng.catch_up(timeout_s=3600)
            out["insert_s"] = round(time.perf_counter() - t0, 2)
            out["insert_peak_rss_mb"] = round(_status("VmHWM"), 1)
            conn.execute("DELETE FROM big WHERE id % 2 = 0")
            t0 = time.perf_counter()
            eng.catch_up(timeout_s=3600)
            out["delete_s"] = round(time.perf_counter() - t0, 2)
            out["peak_rss_mb"] = round(_status("VmHWM"), 1)
            out["spills"] = dict(eng.spill_counts())
            out["equal"] = diff_rows(conn, view, sql) == (0, 0)
            eng.drop_view(view)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="a Postgres with wal_level=logical (default: a private server)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--bounds", default="0,100000,20000")
    ap.add_argument("--views", default=",".join(VIEWS))
    ap.add_argument("--child", nargs=3, metavar=("DSN", "VIEW", "BOUND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        dsn, view, bound = args.child
        print(json.dumps(child(dsn, view, args.rows, int(bound))))
        return
    server = None
    if args.dsn is None:
        from tests.postgres_server import PostgresServer

        server = PostgresServer().start()
    runs = []
    try:
        for view in args.views.split(","):
            for bound in map(int, args.bounds.split(",")):
                if server is not None:
                    dsn = server.dsn_for(server.create_database("huge"))
                else:
                    dsn = args.dsn
                cmd = [sys.executable, "-m", "bench.huge_transaction", "--rows", str(args.rows)]
                cmd += ["--child", dsn, view, str(bound)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"the run of view {view} with bound {bound} failed")
                run = json.loads(proc.stdout.strip().splitlines()[-1])
                runs.append(run)
                label = "unbounded (old path)" if bound == 0 else f"bound {bound:,} changes"
                print(
                    f"{view:6s} {label:24s} insert {run['insert_s']:7.2f} s  delete "
                    f"{run['delete_s']:7.2f} s  RSS before {run['rss_before_mb']:7.1f} MB  peak "
                    f"{run['peak_rss_mb']:7.1f} MB  spills {run['spills']}  equal {run['equal']}",
                    flush=True,
                )
    finally:
        if server is not None:
            server.stop()
    save(RESULTS, {"rows": args.rows, "runs": runs})


if __name__ == "__main__":
    main()
