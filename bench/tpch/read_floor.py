"""The part of a TPC-H view's population that Postgres alone spends: reading its sources.

A population must read every row its state keeps (a view's state holds all the rows a later
change may join, not only the ones today's answer uses), while ``CREATE TABLE AS`` of the same
query may touch a few through an index: TPC-H Q5's joins 46k orders to lineitem through
``lineitem_pkey``, and its incremental state must hold all 6M lines. For each view this prints,
on the same server and in the same run:

* *CTAS*: ``CREATE TABLE AS`` of the view's query (median of 3, after one unmeasured run; the
  server's default settings, parallel workers included, as ``python -m bench.tpch`` times it);
* *read*: the server's own work of the population's reads, every source with the plan's columns
  and pushed-down filters as the Arrow reader asks for them (numerics as text),
  ``COPY (SELECT ...) TO '/dev/null' (FORMAT binary)`` one after the other on one connection
  (median of 3), no client, no decoding, no state;
  (a GROUP BY over one table that Postgres computes for the population, as Q1's, reads less
  than this: ``engine.sql.population_aggregate``);
* read / CTAS, against issue 14's ceiling for a population (10x CTAS; Q1 and Q18 2x): what is
  left of the ceiling for the engine's own work, if it ran wholly beside the reads on the other
  core.

    python -m bench.tpch.read_floor [--sf 1] [--dsn DSN] [--views Q4,Q5] [--json [PATH]]

Without ``--dsn`` a private server is started and SF ``--sf`` generated and loaded (as
``python -m bench.tpch`` does); with ``--dsn`` the TPC-H tables must be loaded there and the role
must be allowed to COPY to a server file (a superuser, or ``pg_write_server_files``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql

from bench.results_json import add_json_option, save, target
from bench.tpch.datagen import generate_base_csv
from bench.tpch.load import load
from bench.tpch.queries import POPULATION_CEILING, POPULATION_TARGETS, VIEWS
from bench.tpch.server import BenchServer
from engine.postgres.arrow_snapshot import select_query
from engine.postgres.source_catalog import PostgresCatalog
from engine.sql.planner import build_dataflow, plan_view
from engine.sql.population_filter import population_filters


def reads(conn: psycopg.Connection, query: str) -> list[sql.Composed]:
    """The population's reads of ``query``: one COPY to /dev/null per source table, of the
    SELECT the Arrow reader sends (``arrow_snapshot.select_query``: its casts included)."""
    catalog = PostgresCatalog(conn)
    plan = plan_view(query, catalog, "UTC")
    filters = population_filters(plan.optimized)
    out = []
    for table, columns in build_dataflow(plan, None).inputs.items():
        schema, _, name = table.partition(".")
        select, _ = select_query(catalog.lookup(schema, name), list(columns), filters.get(table))
        out.append(sql.SQL("COPY ({}) TO '/dev/null' (FORMAT binary)").format(sql.SQL(select)))
    return out


def timed(conn: psycopg.Connection, statements: list, reps: int = 3) -> float:
    """The median seconds of running ``statements`` one after the other (after one warm-up)."""
    times = []
    for i in range(reps + 1):
        start = time.perf_counter()
        for s in statements:
            conn.execute(s)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(conn: psycopg.Connection, labels: set[str] | None) -> dict:
    out = {}
    for v in VIEWS:
        if labels and v.label not in labels:
            continue
        ctas = [
            sql.SQL("DROP TABLE IF EXISTS read_floor_ctas"),
            sql.SQL("CREATE TABLE read_floor_ctas AS {}").format(sql.SQL(v.sql)),
        ]
        ctas_s = timed(conn, ctas)
        conn.execute("DROP TABLE read_floor_ctas")
        read_s = timed(conn, reads(conn, v.sql))
        ceiling = POPULATION_TARGETS.get(v.label, POPULATION_CEILING)
        out[v.label] = {
            "ctas_s": ctas_s,
            "read_s": read_s,
            "read_x_ctas": read_s / ctas_s,
            "ceiling_x_ctas": ceiling,
            "read_within_ceiling": target(read_s / ctas_s, "read_x_ctas", at_most=ceiling),
        }
    return out


@contextlib.contextmanager
def tpch_dsn(dsn: str | None, sf: float) -> Iterator[str]:
    """``dsn``, or a private server with SF ``sf`` loaded, removed after the block."""
    if dsn:
        yield dsn
        return
    server = BenchServer().start()
    try:
        tpch = server.create_database("tpch")
        with tempfile.TemporaryDirectory() as tmp, psycopg.connect(tpch, autocommit=True) as c:
            generate_base_csv(sf, Path(tmp))
            load(c, Path(tmp))
        yield tpch
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--dsn", help="a database with the TPC-H tables loaded")
    ap.add_argument("--views", help="comma-separated labels, e.g. Q4,Q5 (default: all)")
    add_json_option(ap, "tpch_read_floor")
    args = ap.parse_args()
    labels = set(args.views.split(",")) if args.views else None
    with tpch_dsn(args.dsn, args.sf) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        figures = measure(conn, labels)
    print(f"\n== TPC-H SF {args.sf:g}: the server's reads of each population vs CREATE TABLE AS")
    print(f"   {'view':5} {'CTAS s':>8} {'read s':>8} {'read/CTAS':>10} {'ceiling':>8}")
    for label, f in figures.items():
        print(
            f"   {label:5} {f['ctas_s']:8.3f} {f['read_s']:8.3f} {f['read_x_ctas']:9.1f}x "
            f"{f['ceiling_x_ctas']:7.0f}x"
        )
    if args.json:
        save(args.json, {"sf": args.sf, "views": figures})


if __name__ == "__main__":
    main()
