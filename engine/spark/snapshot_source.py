"""``incview_snapshot``: a Spark Python batch DataSource reading source tables in parallel, all
under ONE exported Postgres snapshot (population).

The driver holds a REPEATABLE READ transaction open and exports its snapshot
(``pg_export_snapshot()``); each Spark task opens its own connection, imports that snapshot
(``SET TRANSACTION SNAPSHOT``) and COPYs one block range of one table
(``ctid >= '(a,0)' AND ctid < '(b,0)'``, a TID range scan), so the tasks together read exactly
the snapshot's rows, each once. A task waits at most ``lock_timeout_ms`` for a table's lock
(the driver holds ACCESS SHARE already, but a task can queue behind an ALTER TABLE that waits
for the driver: without a timeout that would never end). Rows: ``table`` (string) and ``payload`` (binary: a pickled list
of row tuples, up to ``CHUNK_ROWS`` per row), values as the CDC decoder produces them. This
module must not write anything or keep state.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from engine.postgres.snapshot import read_table
from engine.sql.catalog import SourceTable

NAME = "incview_snapshot"
SCHEMA = "table string, payload binary"
CHUNK_ROWS = 20_000


@dataclass(frozen=True)
class TableSlice(InputPartition):
    """Blocks [first_block, end_block) of a table (end_block None: to the end)."""

    table: SourceTable
    columns: tuple[str, ...]
    first_block: int
    end_block: int | None
    filter_sql: str | None = None  # the view's pushed-down predicates (population_filter)

    def where_sql(self) -> str | None:
        parts = [f"({self.filter_sql})"] if self.filter_sql else []
        if self.first_block > 0:
            parts.append(f"ctid >= '({self.first_block},0)'::tid")
        if self.end_block is not None:
            parts.append(f"ctid < '({self.end_block},0)'::tid")
        return " AND ".join(parts) or None


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
        for batch in read_table(
            self.dsn,
            partition.table,
            list(partition.columns),
            partition.where_sql(),
            snapshot_name=self.snapshot_name,
            batch_rows=CHUNK_ROWS,
            lock_timeout_ms=self.lock_timeout_ms,
        ):
            yield name, pickle.dumps(batch.rows, protocol=pickle.HIGHEST_PROTOCOL)


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
