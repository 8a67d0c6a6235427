"""``python -m bench.tpch``: TPC-H views maintained by incview vs Postgres' own answers.

    python -m bench.tpch --sf 1 [--runner local|spark] [--quick] [--dsn DSN]
    python -m bench.tpch --scaling [--scaling-sfs 0.1,1,3]

Without ``--dsn`` a private throwaway Postgres is started (``bench.tpch.server``) and removed at
the end; with ``--dsn`` the TPC-H tables are (re)created in that database (which needs
wal_level=logical). Results: the Markdown table is printed and written to
``bench/results/tpch_sf<SF>_<runner>.md`` with a PNG chart and the raw figures (JSON) beside it (scaling:
``tpch_scaling_<runner>.md``). Exit status: 0 when every view equals its query at the end, 1 when
one differs, 2 when the engine refused a view (``create_view`` raised) and none differs, 3 when
the engine could not start (e.g. ``--runner spark`` in a build without the Spark runtime).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
from pathlib import Path

from bench.tpch import queries
from bench.tpch.benchmark import log, run
from bench.tpch.report import chart, markdown, scaling_markdown
from bench.tpch.scaling import run_scaling
from engine.errors import ViewError

RESULTS = Path(__file__).resolve().parent.parent / "results"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tpch", description=__doc__.split("\n")[0])
    ap.add_argument("--sf", type=float, default=None, help="scale factor (default 1; quick 0.01)")
    ap.add_argument("--runner", choices=("local", "spark"), default="local")
    ap.add_argument("--quick", action="store_true", help="smoke run: SF 0.01, one round")
    ap.add_argument("--scaling", action="store_true", help="fixed stream at several SFs")
    ap.add_argument("--scaling-sfs", default="0.1,1,3")
    ap.add_argument("--dsn", help="an existing Postgres database (wal_level=logical)")
    ap.add_argument("--views", help="comma-separated labels, e.g. Q1,Q18 (default: all)")
    ap.add_argument("--reps", type=int, default=None, help="runs per stream kind (default 3)")
    ap.add_argument("--rounds", type=int, default=None, help="sustained RF1+RF2+UF rounds")
    ap.add_argument(
        "--char",
        action="store_true",
        help="dss.ddl's char(n) text columns instead of varchar(n) (see bench/tpch/schema.py)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    ap.add_argument(
        "--memory-mb",
        type=int,
        help="the engine's memory budget for all views' state (Engine(memory_mb=...)); "
        "default: none",
    )
    ap.add_argument(
        "--max-memory-gb",
        type=float,
        help="address-space limit of this process: a population that needs more fails with "
        "MemoryError (reported for that view) instead of waking the machine's OOM killer",
    )
    args = ap.parse_args(argv)
    if args.max_memory_gb:
        limit = int(args.max_memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    views = queries.by_label(args.views)
    sf = args.sf if args.sf is not None else (0.01 if args.quick else 1.0)
    reps = args.reps or (1 if args.quick else 3)
    rounds = args.rounds or (1 if args.quick else 3)
    args.out.mkdir(parents=True, exist_ok=True)

    server = None
    if args.dsn is None:
        from bench.tpch.server import BenchServer

        server = BenchServer().start()
    try:
        if args.scaling:
            sfs = [float(x) for x in args.scaling_sfs.split(",")]
            made: list[str] = []

            def dsn_for(s: float) -> str:
                if server is None:
                    return args.dsn
                for name in made:  # one data set on disk at a time
                    server.drop_database(name)
                made.clear()
                made.append(f"tpch_sf{str(s).replace('.', '_')}")
                return server.create_database(made[-1])

            rows, equal, refused = run_scaling(dsn_for, sfs, views, args.runner, reps=args.reps or 3,
                                      char=args.char)  # fmt: skip
            text = scaling_markdown(rows)
            (args.out / f"tpch_scaling_{args.runner}.md").write_text(text)
            (args.out / f"tpch_scaling_{args.runner}.json").write_text(json.dumps(rows, indent=2))
            print(text)
            if refused:
                log(f"refused by the engine: {', '.join(sorted(refused))}")
            return 1 if not equal else 2 if refused else 0

        dsn = args.dsn or server.create_database("tpch")
        try:
            res = run(
                dsn,
                sf,
                views,
                args.runner,
                reps=reps,
                rounds=rounds,
                char=args.char,
                writer_reps=reps if args.quick else None,
                memory_mb=args.memory_mb,
            )
        except ViewError as e:  # e.g. a runner this build does not have yet
            log(f"the engine could not run the benchmark: {e}")
            return 3
        stem = f"tpch_sf{sf:g}_{args.runner}" + ("_quick" if args.quick else "")
        stem += f"_mem{args.memory_mb}" if args.memory_mb else ""
        text = markdown(res)
        png = chart(res, args.out / f"{stem}.png")
        if png is not None:
            text += f"\n![chart]({png.name})\n"
        (args.out / f"{stem}.md").write_text(text)
        (args.out / f"{stem}.json").write_text(json.dumps(dataclasses.asdict(res), indent=1))
        print(text)
        log(f"wrote {args.out / (stem + '.md')}" + (f" and {png}" if png else ""))
        if not res.all_equal:
            return 1
        return 2 if res.refused else 0
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
