"""Compiled SQL expressions vs hand-written Python, on 1M-row batches.

Prints rows/s for a filter (``b > 30``) and projections compiled by
``engine.sql.expression_compiler`` and the same work written by hand (best of 5), and their ratio.
Issue target: >= 2M rows/s per core for a simple filter+projection, or within 3x of hand-written.

    python -m bench.expressions [--rows 1000000] [--json]

With ``--json`` the figures also go to bench/results/expressions.json, the target judged per case.
"""

from __future__ import annotations

import argparse
import random
import time

from bench.results_json import add_json_option, save
from engine.sql.expression_compiler import (
    ColumnRef,
    compile_expressions,
    compile_predicate,
    parse_expression,
)
from engine.sql.types import INTEGER, TEXT


def best_of(fn, rows, n: int = 5) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn(rows)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    add_json_option(ap, "expressions")
    args = ap.parse_args()
    rng = random.Random(1)
    rows = [
        (i, rng.choice([None, *range(60)]), rng.choice(["ab", "cd", None, "xyz"]))
        for i in range(args.rows)
    ]
    cols = [
        ColumnRef("a", None, INTEGER, False),
        ColumnRef("b", None, INTEGER),
        ColumnRef("s", None, TEXT),
    ]
    cases = [
        (
            "filter b > 30",
            compile_predicate(parse_expression("b > 30"), cols)[0],
            lambda rs: [r[1] is not None and r[1] > 30 for r in rs],
        ),
        (
            "projection a, b * 2, s",
            compile_expressions([parse_expression(e) for e in ("a", "b * 2", "s")], cols).fn,
            lambda rs: [(r[0], None if r[1] is None else r[1] * 2, r[2]) for r in rs],
        ),
        (
            "projection a + b, upper(s)",
            compile_expressions([parse_expression(e) for e in ("a + b", "upper(s)")], cols).fn,
            lambda rs: [
                (None if r[1] is None else r[0] + r[1], None if r[2] is None else r[2].upper())
                for r in rs
            ],
        ),
    ]
    print(f"bench/expressions.py: {args.rows:,} rows, best of 5")
    figures: dict = {"rows": args.rows}
    for name, compiled, hand in cases:
        tc, th = best_of(compiled, rows), best_of(hand, rows)
        print(
            f"  {name:<28} compiled {args.rows / tc / 1e6:6.2f} M rows/s   hand-written "
            f"{args.rows / th / 1e6:6.2f} M rows/s   ratio {tc / th:4.2f}x"
        )
        figures[name] = {
            "compiled_rows_per_s": args.rows / tc,
            "hand_written_rows_per_s": args.rows / th,
            "x_hand_written_time": tc / th,
            # the target: >= 2M rows/s, or within 3x of the hand-written Python
            "met": args.rows / tc >= 2e6 or tc / th <= 3,
        }
    if args.json:
        save(args.json, figures)


if __name__ == "__main__":
    main()
