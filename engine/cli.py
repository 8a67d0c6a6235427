"""The ``incview`` command line: the Engine's verbs, plus ``demo``.

``--dsn`` (or env ``INCVIEW_DSN``) names the database, ``--state-dir`` (or ``INCVIEW_STATE_DIR``)
the state directory. Each verb parses its arguments and calls the engine; no logic lives here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _engine(args):
    from engine import Engine

    # No --dsn / INCVIEW_DSN: the embedded Postgres under the state dir (started if needed).
    views = getattr(args, "view", None) or None
    return Engine(
        args.dsn or None,
        args.state_dir or ".incview",
        runner=args.runner,
        views=views,
        trigger_ms=getattr(args, "trigger_ms", 50),
        spark_conf=_spark_conf(args),
        memory_mb=args.memory_mb,
    )


def _megabytes(text: str) -> int:
    """``--memory-mb``'s value, checked as ``Engine(memory_mb=...)`` checks it."""
    from engine.memory_setting import memory_mb_setting

    try:
        return memory_mb_setting(text, "--memory-mb")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _spark_conf(args) -> dict[str, str]:
    """Spark settings: env ``INCVIEW_SPARK_CONF`` (a JSON object), then ``--conf KEY=VALUE``."""
    conf = json.loads(os.environ.get("INCVIEW_SPARK_CONF") or "{}")
    for item in getattr(args, "conf", None) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"incview: --conf expects KEY=VALUE, got {item!r}")
        conf[key] = value
    return {str(k): str(v) for k, v in conf.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="incview", description="Incremental materialized views over PostgreSQL."
    )
    parser.add_argument(
        "--dsn", default=os.environ.get("INCVIEW_DSN"), help="Postgres connection string"
    )
    parser.add_argument(
        "--state-dir",
        default=os.environ.get("INCVIEW_STATE_DIR"),
        help="where view state (and the embedded Postgres, without --dsn) lives; default "
        ".incview (.incview-demo for the demo)",
    )
    parser.add_argument(
        "--runner",
        default=os.environ.get("INCVIEW_RUNNER", "spark"),
        choices=["local", "spark"],
        help="Spark (default; env INCVIEW_RUNNER) or in-process (local)",
    )
    parser.add_argument(
        "--memory-mb",
        type=_megabytes,
        default=None,
        help="one memory budget for the state of all views (block cache, memtables, caches); "
        "default env INCVIEW_MEMORY_MB, else none (each view's state has caches of its own)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.master=spark://host:7077 (repeatable; also env "
        "INCVIEW_SPARK_CONF as a JSON object)",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create-view", help="plan, populate and start maintaining a view")
    create.add_argument("name")
    create.add_argument("sql")
    drop = verbs.add_parser("drop-view", help="drop a view, its result table and state")
    drop.add_argument("name")
    catch = verbs.add_parser("catch-up", help="apply every change committed so far to every view")
    catch.add_argument("--timeout", type=float, default=60.0)
    run = verbs.add_parser(
        "run",
        help="keep the views up to date (streaming) until SIGINT/SIGTERM; without --view, also "
        "answer CALL incview.create_view/drop_view/explain issued in the database",
    )
    run.add_argument(
        "--view", action="append", help="run only this view (repeatable); default all views"
    )
    run.add_argument(
        "--trigger-ms", type=int, default=50, help="micro-batch trigger interval (default 50)"
    )
    verbs.add_parser("list-views", help="views with phase, lag, rows, state size, last error")
    verbs.add_parser(
        "install",
        help="install (or upgrade) the incview schema in the database: its catalog and the SQL "
        "procedures (CALL incview.create_view...) that `incview run` answers",
    )
    explain = verbs.add_parser("explain", help="print the logical, optimized and physical plans")
    explain.add_argument("sql")
    demo = verbs.add_parser(
        "demo", help="run the demo: views maintained while a writer changes the data"
    )
    demo.add_argument("--seconds", type=float, default=30.0, help="how long the writer runs")
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument(
        "--report-every", type=float, default=3.0, help="seconds between the progress reports"
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep the demo schema and views for inspection"
    )
    # also accepted after the verb: `incview demo --state-dir DIR`
    demo.add_argument("--dsn", default=argparse.SUPPRESS, help="Postgres connection string")
    demo.add_argument("--state-dir", default=argparse.SUPPRESS, help="default .incview-demo")
    demo.add_argument(
        "--runner", default=argparse.SUPPRESS, choices=["local", "spark"], help="default spark"
    )
    demo.add_argument(
        "--dagster",
        action="store_true",
        help="instead: serve the demo's views in `dagster dev` (embedded Postgres or --dsn, the "
        "runner) and print its URL; Ctrl-C stops it",
    )
    demo.add_argument("--port", type=int, default=3000, help="dagster dev's port (--dagster)")
    args = parser.parse_args(argv)

    from engine.errors import IncviewError

    try:
        if args.verb == "demo" and args.dagster:
            from incview_dagster.dev_server import serve_demo

            return serve_demo(
                dsn=args.dsn or None,
                state_dir=args.state_dir or ".incview-demo",
                runner=args.runner,
                spark_conf=_spark_conf(args),
                port=args.port,
            )
        if args.verb == "demo":
            from engine.demo import run_demo

            return run_demo(
                dsn=args.dsn or None,
                state_dir=args.state_dir or ".incview-demo",
                seconds=args.seconds,
                seed=args.seed,
                report_every=args.report_every,
                keep=args.keep,
                runner=args.runner,
                spark_conf=_spark_conf(args),
            )
        if args.verb == "install" and args.dsn:
            from engine.commander import install

            print(install(args.dsn))
            return 0
        with _engine(args) as eng:
            if args.verb == "install":  # the embedded server: the Engine installed it on open
                print("the incview schema is installed")
            elif args.verb == "create-view":
                eng.create_view(args.name, args.sql)
                print(f"view {args.name} created")
            elif args.verb == "drop-view":
                eng.drop_view(args.name)
                print(f"view {args.name} dropped")
            elif args.verb == "catch-up":
                eng.catch_up(timeout_s=args.timeout)
                print("all views caught up")
            elif args.verb == "list-views":
                print(
                    f"{'name':<30} {'phase':<11} {'lag ms':>8} {'rows':>10} {'state':>10}  last error"
                )
                for v in eng.list_views():
                    lag = "-" if v.lag_ms is None else f"{v.lag_ms:.0f}"
                    rows = "-" if v.rows is None else str(v.rows)
                    print(
                        f"{v.name:<30} {v.phase:<11} {lag:>8} {rows:>10} {v.state_bytes:>10}  {v.last_error or ''}"
                    )
            elif args.verb == "run":
                names = args.view or [v.name for v in eng.list_views()]
                commands = "" if args.view else "; answering CALL incview.create_view(...)"
                budget = eng.memory_budget
                within = (
                    f", within a memory budget of {budget.total_bytes >> 20} MB" if budget else ""
                )
                print(
                    f"running {', '.join(names) or 'no views'} ({args.runner}{within}){commands}; "
                    "Ctrl-C stops",
                    flush=True,
                )
                eng.run(args.view)
                print("stopped")
            elif args.verb == "explain":
                print(eng.explain(args.sql))
    except IncviewError as e:
        print(f"incview: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
