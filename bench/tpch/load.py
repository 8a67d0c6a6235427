"""Loading TPC-H CSV files into Postgres with COPY, then keys, replica identity and statistics.

``load(conn, directory)`` creates the tables (``bench.tpch.schema``), COPYs every
``<table>.csv`` (header line, as ``bench.tpch.datagen`` writes them) and finishes the tables.
Returns the row count per table. Generation is not done here.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from bench.tpch.schema import TABLES, create_tables, finish_tables

CHUNK = 1 << 20


def load(conn: psycopg.Connection, directory: Path, char: bool = False) -> dict[str, int]:
    create_tables(conn, char)
    rows: dict[str, int] = {}
    for table in TABLES:
        with (
            open(directory / f"{table}.csv", "rb") as f,
            conn.cursor() as cur,
            cur.copy(f"COPY {table} FROM STDIN (FORMAT csv, HEADER true)") as copy,
        ):
            while chunk := f.read(CHUNK):
                copy.write(chunk)
        rows[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finish_tables(conn)
    return rows
