"""A population's source reads on several connections at once, all in the population's snapshot.

A population reads its view's tables one after the other on one connection while its dataflow
computes (``engine.postgres.read_ahead``). Where a scan is slow on the server (a filter passing a
quarter of TPC-H lineitem, a date range of orders) the dataflow then waits for it. ``parallel_reads``
splits the reads into pieces: a table read as Arrow (``SnapshotReader.reads_arrow``) of at least
``SPLIT_BLOCKS`` heap blocks becomes one block range per reader (``engine.postgres.table_slices``,
a TID range scan), any other table one piece. ``readers`` threads take the pieces in order, each
reading on its own connection in the same exported snapshot: reader 0 on the reader's own
connections (the row reader's COPY and its ADBC connection), the others on ADBC connections
opened for them, taking Arrow pieces only. Their batches meet in one queue of ``depth`` batches,
tagged with their table: every row of the snapshot arrives exactly once, a table's pieces
interleaved (a population is a Z-set of chunks: any order gives the same state and result).

The read of every Arrow piece is planned on the reader's connection before the threads start
(``check_read``: a missing table or column fails with the row reader's errors), and the extra
connections are opened there too: while the threads run, only reader 0 uses the reader's
connection. Servers before Postgres 14 scan a whole table for a ctid range: there a table is
one piece.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from engine.dataflow.batch import DiffBatch
from engine.postgres.arrow_snapshot import ArrowSnapshot
from engine.postgres.read_ahead import read_ahead_all
from engine.postgres.snapshot import SnapshotReader
from engine.postgres.table_slices import (
    block_ranges,
    range_where,
    splits_by_ranges,
    table_blocks,
)
from engine.sql.catalog import SourceTable

#: a table read as Arrow of at least this many heap blocks (64 MB) is split into block ranges
SPLIT_BLOCKS = 8192

#: what a value of a tuple row costs in memory, roughly (a Python int or short str, its slot)
ROW_VALUE_BYTES = 64

Sources = list[tuple[SourceTable, tuple[str, ...] | list[str], str | None]]


@dataclass(frozen=True)
class ReadPiece:
    """Rows of ``table`` passing ``where_sql`` (a view's pushed-down filter, a block range),
    read as Arrow or by the row reader."""

    table: SourceTable
    columns: list[str]
    where_sql: str | None
    arrow: bool


def plan_pieces(
    reader: SnapshotReader,
    tables: Sources,
    reads_columns: Callable[[str], bool],
    readers: int,
) -> list[ReadPiece]:
    """The pieces of ``tables`` (see the module docstring); ``reads_columns(name)``: whether
    the dataflow computes on that table's columns (else it is read by the row reader)."""
    split = readers > 1 and splits_by_ranges(reader.conn)
    pieces = []
    for table, columns, where in tables:
        columns = list(columns)
        if not reader.reads_arrow(table, columns, reads_columns(table.qualified_name)):
            pieces.append(ReadPiece(table, columns, where, arrow=False))
            continue
        reader.check_read(table, columns, where)
        blocks = table_blocks(reader.conn, table) if split else 0
        n = readers if blocks >= SPLIT_BLOCKS else 1
        for first, end in block_ranges(blocks, n):
            pieces.append(ReadPiece(table, columns, range_where(where, first, end), arrow=True))
    return pieces


class _Pieces:
    """The pieces not read yet, taken in order by the reading threads."""

    def __init__(self, pieces: list[ReadPiece]) -> None:
        self._pieces = list(pieces)
        self._lock = threading.Lock()

    def take(self, arrow_only: bool) -> ReadPiece | None:
        with self._lock:
            for i, piece in enumerate(self._pieces):
                if piece.arrow or not arrow_only:
                    return self._pieces.pop(i)
        return None


@contextlib.contextmanager
def parallel_reads(
    reader: SnapshotReader,
    tables: Sources,
    reads_columns: Callable[[str], bool],
    readers: int = 2,
    depth: int = 8,
    budget: int | None = None,
) -> Iterator[Iterator[tuple[str, DiffBatch]]]:
    """(table, batch) of every row of ``tables`` in ``reader``'s snapshot, read by up to
    ``readers`` threads at most ``depth`` batches (and ``budget`` bytes, ``batch_bytes``) ahead
    of the consumer (module docstring). On exit the threads are stopped and joined and the
    extra connections closed."""
    pieces = plan_pieces(reader, tables, reads_columns, readers)
    arrow_pieces = sum(piece.arrow for piece in pieces)
    extra: list[ArrowSnapshot] = []
    try:
        if arrow_pieces:
            reader.arrow_reader()  # opened now: reader 0 must not export a snapshot mid-COPY
        for _ in range(min(readers, arrow_pieces) - 1):
            extra.append(reader.open_arrow_reader())
        todo = _Pieces(pieces)
        producers = [_read(reader, todo, None)] + [_read(reader, todo, snap) for snap in extra]
        with read_ahead_all(producers, depth, budget, batch_bytes) as batches:
            yield batches
    finally:
        for snap in extra:
            snap.close()


def batch_bytes(item: tuple[str, DiffBatch]) -> int:
    """The memory a read batch holds: its Arrow buffers and weights, or an estimate of its
    tuples' (``ROW_VALUE_BYTES`` a value)."""
    batch = item[1]
    if batch.columnar:
        return sum(c.nbytes for c in batch.columns) + batch.column_weights.nbytes
    rows = batch.rows
    return len(rows) * len(rows[0]) * ROW_VALUE_BYTES if rows else 0


def _read(
    reader: SnapshotReader, todo: _Pieces, snap: ArrowSnapshot | None
) -> Iterator[tuple[str, DiffBatch]]:
    """One reading thread's batches: reader 0 (``snap`` None) on the reader's connections takes
    any piece, another on ``snap`` Arrow pieces only."""
    while (piece := todo.take(arrow_only=snap is not None)) is not None:
        name = piece.table.qualified_name
        if not piece.arrow:
            batches = reader.read_table(piece.table, piece.columns, piece.where_sql, arrow=False)
        else:
            on = snap if snap is not None else reader.arrow_reader()
            batches = reader.read_arrow_on(on, piece.table, piece.columns, piece.where_sql)
        for batch in batches:
            yield name, batch
