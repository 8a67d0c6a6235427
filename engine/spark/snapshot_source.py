"""``incview_snapshot``: a Spark Python batch DataSource reading source tables in parallel, all
under ONE exported Postgres snapshot (population).

The driver holds a REPEATABLE READ transaction open and exports its snapshot
(``pg_export_snapshot()``); each Spark task opens its own connection, imports that snapshot
(``SET TRANSACTION SNAPSHOT``) and COPYs one block range of one table
(``ctid >= '(a,0)' AND ctid < '(b,0)'``, a TID range scan), so the tasks together read exactly
the snapshot's rows, each once. A task waits at most ``lock_timeout_ms`` for a table's lock
(the driver holds ACCESS SHARE already, but a task can queue behind an ALTER TABLE that waits
for the driver: without a timeout that would never end). A slice of a table whose columns are
all ``arrow_readable`` is read as Arrow by ADBC (``engine.postgres.arrow_snapshot``), others by
the row reader. Rows: ``table`` (string) and ``payload`` (binary, ``encode_batch``: Arrow IPC of
up to ``ARROW_CHUNK_ROWS`` rows' columns, or a pickled list of up to ``CHUNK_ROWS`` row tuples),
values as the CDC decoder produces them. This module must not write anything or keep state.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from engine.dataflow.batch import DiffBatch
from engine.dataflow.nan import loads
from engine.postgres.arrow_snapshot import ArrowSnapshot, arrow_readable
from engine.postgres.snapshot import read_table
from engine.postgres.table_slices import range_where
from engine.sql.catalog import SourceTable

NAME = "incview_snapshot"
SCHEMA = "table string, payload binary"
CHUNK_ROWS = 20_000  # rows per payload of pickled tuples
ARROW_CHUNK_ROWS = 65_536  # rows per payload of Arrow columns
_ARROW, _PICKLED = b"A", b"P"  # a payload's first byte: its form


@dataclass(frozen=True)
class TableSlice(InputPartition):
    """Blocks [first_block, end_block) of a table (end_block None: to the end)."""

    table: SourceTable
    columns: tuple[str, ...]
    first_block: int
    end_block: int | None
    filter_sql: str | None = None  # the view's pushed-down predicates (population_filter)
    arrow: bool = True  # read as Arrow where the columns allow (else the row reader)

    def where_sql(self) -> str | None:
        return range_where(self.filter_sql, self.first_block, self.end_block)


def encode_plan(slices: list[TableSlice]) -> str:
    return base64.b64encode(pickle.dumps(slices)).decode()


class SnapshotReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.dsn = options["dsn"]
        self.snapshot_name = options["snapshot"]
        self.slices: list[TableSlice] = pickle.loads(base64.b64decode(options["plan"]))
        timeout = options.get("lock_timeout_ms")
        self.lock_timeout_ms = int(timeout) if timeout else None

    def partitions(self) -> list[InputPartition]:
        return list(self.slices)

    def read(self, partition: TableSlice) -> Iterator[tuple[str, bytes]]:
        name = partition.table.qualified_name
        columns = list(partition.columns)
        if partition.arrow and arrow_readable(partition.table, columns):
            with ArrowSnapshot(self.dsn, self.snapshot_name, self.lock_timeout_ms) as snap:
                for read in snap.read(partition.table, columns, partition.where_sql()):
                    for batch in read.slices(ARROW_CHUNK_ROWS):
                        yield name, encode_batch(batch)
            return
        for batch in read_table(
            self.dsn,
            partition.table,
            columns,
            partition.where_sql(),
            snapshot_name=self.snapshot_name,
            batch_rows=CHUNK_ROWS,
            lock_timeout_ms=self.lock_timeout_ms,
        ):
            yield name, encode_batch(batch)


def encode_batch(batch: DiffBatch) -> bytes:
    """An insert-only batch as a payload: Arrow IPC of its columns, else its pickled rows."""
    if batch.columns is None:
        return _PICKLED + pickle.dumps(batch.rows, protocol=pickle.HIGHEST_PROTOCOL)
    names = [f"c{i}" for i in range(len(batch.columns))]
    record = pa.RecordBatch.from_arrays(batch.columns, names=names)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, record.schema) as writer:
        writer.write_batch(record)
    return _ARROW + sink.getvalue().to_pybytes()


def decode_batch(payload: bytes | bytearray) -> DiffBatch:
    """``encode_batch``'s batch back (a NaN of pickled rows is the shared NaN object)."""
    if payload[:1] == _PICKLED:
        rows = loads(bytes(payload[1:]))
        return DiffBatch(rows, [1] * len(rows))
    table = pa.ipc.open_stream(pa.py_buffer(memoryview(payload)[1:])).read_all()
    columns = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    return DiffBatch.from_columns(columns, np.ones(table.num_rows, np.int64))


class SnapshotDataSource(DataSource):
    """``spark.read.format("incview_snapshot").option("dsn", ...).option("snapshot", name)
    .option("plan", encode_plan(slices)).load()``"""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> SnapshotReader:
        return SnapshotReader(dict(self.options))


def register(spark) -> None:
    spark.dataSource.register(SnapshotDataSource)
