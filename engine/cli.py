"""The ``incview`` command line. Verbs are added as the engine grows; today: ``demo``.

Each verb parses its arguments and calls the engine; no logic lives here.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="incview", description="Incremental materialized views over PostgreSQL."
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    demo = verbs.add_parser(
        "demo", help="run the demo: views maintained while a writer changes the data"
    )
    demo.add_argument("--seconds", type=float, default=15.0, help="how long the writer runs")
    demo.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.verb == "demo":
        from engine.demo import run_demo

        return run_demo(seconds=args.seconds, seed=args.seed)
    parser.error(f"unknown verb {args.verb}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
