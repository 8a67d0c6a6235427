"""Block ranges of a table: the pieces parallel population reads split a big table into.

A slice reads blocks [first, end) of a table's heap with ``ctid >= '(first,0)' AND ctid <
'(end,0)'``, which Postgres 14 and later run as a TID range scan (only those blocks are read);
the last slice is open-ended, so the slices together cover every block, including any the table
grew by after its size was looked up, and read every row of a snapshot exactly once. The Spark
population's tasks (``engine.spark.population``) and the in-process parallel reads
(``engine.postgres.parallel_reads``) both plan with these.
"""

from __future__ import annotations

import psycopg

from engine.sql.catalog import SourceTable

#: the first server version that reads a ctid range without scanning the whole table
TID_RANGE_SCAN_VERSION = 140000


def splits_by_ranges(conn: psycopg.Connection) -> bool:
    """Whether the server reads a ctid range without scanning the whole table (Postgres 14 and
    later): before, every slice would scan the table, so a table is read as one slice."""
    return conn.info.server_version >= TID_RANGE_SCAN_VERSION


def table_blocks(conn: psycopg.Connection, table: SourceTable) -> int:
    """Heap blocks of ``table`` now (>= its size when a snapshot was taken before: every row
    the snapshot sees lies in one of them)."""
    row = conn.execute(
        "SELECT pg_relation_size(format('%%I.%%I', %s::text, %s::text)::regclass) "
        "/ current_setting('block_size')::int",
        (table.schema, table.name),
    ).fetchone()
    return int(row[0]) if row else 0


def block_ranges(blocks: int, pieces: int) -> list[tuple[int, int | None]]:
    """``pieces`` (>= 1) contiguous ranges [first, end) over ``blocks`` blocks, the last one
    open-ended (end None)."""
    pieces = max(1, pieces)
    step = -(-blocks // pieces) if blocks else 0
    return [(i * step, None if i == pieces - 1 else (i + 1) * step) for i in range(pieces)]


def range_where(filter_sql: str | None, first_block: int, end_block: int | None) -> str | None:
    """``filter_sql`` (a view's pushed-down predicates) AND the ctid bounds of the range."""
    parts = [f"({filter_sql})"] if filter_sql else []
    if first_block > 0:
        parts.append(f"ctid >= '({first_block},0)'::tid")
    if end_block is not None:
        parts.append(f"ctid < '({end_block},0)'::tid")
    return " AND ".join(parts) or None
