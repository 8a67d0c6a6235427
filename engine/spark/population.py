"""Population as a Spark batch job: the view's source tables read in parallel Spark tasks that
share one exported snapshot (see ``engine.spark.snapshot_source``), streamed back to the driver,
where the view's dataflow computes the initial result and its operators' initial state.

The driver keeps the snapshot's transaction open for the whole read (an exported snapshot lives
only as long as the transaction that exported it). This module must not write the result table
or commit state: ``Engine`` does that, exactly as for the in-process population.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from engine.dataflow.batch import DiffBatch
from engine.postgres.snapshot import SnapshotReader
from engine.postgres.table_slices import block_ranges, splits_by_ranges
from engine.postgres.table_slices import table_blocks as heap_blocks
from engine.postgres.waiting import WaitedTooLong
from engine.spark.snapshot_source import NAME, TableSlice, decode_batch, encode_plan
from engine.sql.catalog import SourceTable

MIN_SLICE_BLOCKS = 256  # 2 MB of heap: smaller tables are read by one task


def table_blocks(reader: SnapshotReader, table: SourceTable) -> int:
    """Heap blocks of ``table`` now (``table_slices.table_blocks``)."""
    return heap_blocks(reader.conn, table)


def plan_slices(
    reader: SnapshotReader,
    tables: list[tuple[SourceTable, tuple[str, ...], str | None]],
    parallelism: int,
    arrow: Callable[[str], bool] = lambda table: True,
) -> list[TableSlice]:
    """Block-range slices: about ``2 x parallelism`` per large table, one per small table (and
    per table before Postgres 14, ``splits_by_ranges``); the last slice of a table is
    open-ended. ``arrow(table)``: whether its slices are read as Arrow
    (``Dataflow.reads_columns``)."""
    slices: list[TableSlice] = []
    split = splits_by_ranges(reader.conn)
    for table, columns, where in tables:
        as_arrow = arrow(table.qualified_name)
        blocks = table_blocks(reader, table)
        n = max(1, min(2 * parallelism, blocks // MIN_SLICE_BLOCKS)) if split else 1
        for first, end in block_ranges(blocks, n):
            slices.append(TableSlice(table, columns, first, end, where, as_arrow))
    return slices


def read_sources(
    spark,
    dsn: str,
    reader: SnapshotReader,
    tables: list[tuple[SourceTable, tuple[str, ...], str | None]],
    wait_timeout_s: float = 60.0,
    arrow: Callable[[str], bool] = lambda table: True,
) -> Iterator[tuple[str, DiffBatch]]:
    """(table, insert-only batch) for every row of ``tables`` in ``reader``'s snapshot, read by
    Spark tasks in parallel; partitions stream to the driver one at a time. A task that waits
    longer than ``wait_timeout_s`` for a table's lock fails the read with ``WaitedTooLong``
    naming the sessions that hold or queue for locks on the tables."""
    slices = plan_slices(reader, tables, spark.sparkContext.defaultParallelism, arrow)
    if not slices:
        return
    df = (
        spark.read.format(NAME)
        .option("dsn", dsn)
        .option("snapshot", reader.export_snapshot())
        .option("plan", encode_plan(slices))
        .option("lock_timeout_ms", str(int(wait_timeout_s * 1000)))
        .load()
    )
    try:
        for row in df.toLocalIterator(prefetchPartitions=True):
            yield row["table"], decode_batch(row["payload"])
    except Exception as e:
        if "lock timeout" not in str(e):
            raise
        others = lock_holders(reader.conn, [t for t, _, _ in tables])
        raise WaitedTooLong(
            f"a Spark task reading the sources gave up after waiting {wait_timeout_s:g} s for a "
            f"table lock{': ' + '; '.join(others) if others else ''}; end that transaction "
            "and try again, or give incview a longer wait_timeout_s"
        ) from None


def lock_holders(conn, tables: list[SourceTable]) -> list[str]:
    """Sessions other than ``conn``'s holding or awaiting a lock stronger than ACCESS SHARE on
    ``tables``: who a population read may queue behind."""
    rows = conn.execute(
        "SELECT l.pid, l.mode, l.granted, a.state, left(a.query, 80) "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN unnest(%s::text[], %s::text[]) AS t(nsp, rel) "
        "ON t.nsp = n.nspname AND t.rel = c.relname "
        "WHERE l.locktype = 'relation' AND l.mode <> 'AccessShareLock' "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.pid <> pg_backend_pid() ORDER BY l.pid",
        ([t.schema for t in tables], [t.name for t in tables]),
    ).fetchall()
    return [
        f"backend pid {pid} {'holds' if granted else 'waits for'} {mode} ({state}: {query!r})"
        for pid, mode, granted, state, query in rows
    ]
