"""``incview_cdc``: a Spark Python streaming DataSource over incview's logical slot, LSN offsets.

Offsets are ``{"lsn": n}``: a micro-batch (start, end] holds exactly the source transactions
whose commit ends in that LSN range, whole (a transaction is never split: it belongs to the batch
its commit end falls into). ``latestOffset`` finds transaction ends with a peek filtered in the
server to the Commit messages (no rows shipped) and bounds a batch by ``max_rows`` changes
(``ReadMaxRows``; a bigger single transaction still comes whole); ``read`` peeks the slot up to
``end`` and ships the transactions as pickled chunks. Peeking does not consume the slot: the
driver advances it only after every view committed, so a replayed batch (Spark replays an
uncommitted batch with the same offsets after a crash) reads the same transactions again.
Rows: ``end_lsn`` (long: of the row's first transaction), ``seq`` (int, the row's position),
``payload`` (binary: a pickled list of ``Transaction``s, or of pieces of one big transaction, up
to about ``CHUNK_ROWS`` changes per row, ``engine.spark.cdc_payloads``). Only the tables
in option ``tables`` are shipped. This module must not apply changes or move the slot.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

if TYPE_CHECKING:  # imported where used: Spark's planner workers only create and plan this
    from engine.postgres.cdc import CdcReader
    from engine.postgres.slot_session import SlotSession

NAME = "incview_cdc"
SCHEMA = "end_lsn long, seq int, payload binary"
DEFAULT_MAX_ROWS = 200_000


# per Python worker process: one open CdcReader per (dsn, slot, publication, bound)
_READERS: dict[tuple[str, str, str, int], CdcReader] = {}


class LsnRange(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end


class CdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.dsn = options["dsn"]
        self.slot = options["slot"]
        self.publication = options["publication"]
        self.start_lsn = int(options.get("start_lsn", "0"))
        self.max_rows = int(options.get("max_rows", DEFAULT_MAX_ROWS))
        # a huge transaction's diffs past this many go to the task's disk (0: no bound)
        self.max_buffered_changes = int(options.get("max_buffered_changes", "0"))
        tables = options.get("tables")
        self.tables = set(tables.split(",")) if tables else None
        self._session: SlotSession | None = None  # the offset work's: no decoding, few imports
        self._available_now: int | None = None

    def _slot(self) -> SlotSession:
        if self._session is None:
            from engine.postgres.slot_session import SlotSession

            self._session = SlotSession(self.dsn, self.slot, self.publication)
        return self._session

    def initialOffset(self) -> dict:
        return {"lsn": self.start_lsn}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._slot().flush_wal()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["lsn"])
        max_rows = None if isinstance(limit, ReadAllAvailable) else self.max_rows
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        peek_rows = max(max_rows or 0, 10_000)
        while True:
            ends, read = self._slot().commit_ends(peek_rows if max_rows else None)
            before = [n for end, n in ends if end <= begin]
            after = [(end, n) for end, n in ends if end > begin]
            if self._available_now is not None:
                after = [(end, n) for end, n in after if end <= self._available_now]
            if after or max_rows is None or read < peek_rows:
                break
            peek_rows *= 2  # the peek was spent on transactions already read
        if not after:
            return {"lsn": begin}
        base = before[-1] if before else 0
        chosen = after[0][0]
        for end, n in after:
            if max_rows is not None and n - base > max_rows:
                break
            chosen = end
        return {"lsn": chosen}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        a, b = int(start["lsn"]), int(end["lsn"])
        return [LsnRange(a, b)] if b > a else []

    def read(self, partition: LsnRange) -> Iterator[tuple[int, int, bytes]]:
        from engine.postgres.cdc import CdcReader
        from engine.spark.cdc_payloads import transaction_rows

        key = (self.dsn, self.slot, self.publication, self.max_buffered_changes)
        reader = _READERS.pop(key, None) or CdcReader(
            self.dsn, self.slot, self.publication, max_buffered_changes=self.max_buffered_changes
        )
        try:
            txs = reader.read_range(partition.start, partition.end)
        except BaseException:
            reader.close()
            raise
        _READERS[key] = reader  # Spark reuses its Python workers: keep the session for the next
        yield from transaction_rows(txs, self.tables)

    def commit(self, end: dict) -> None:
        """Nothing: the driver advances the slot once every view committed (see Engine)."""

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


class CdcDataSource(DataSource):
    """``spark.readStream.format("incview_cdc").option("dsn", ...).option("slot", ...)
    .option("publication", ...).option("start_lsn", n).option("tables", "s.t,s.u").load()``"""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> CdcStreamReader:
        return CdcStreamReader(dict(self.options))


def register(spark) -> None:
    spark.dataSource.register(CdcDataSource)
