"""``incview_cdc``: a Spark Python streaming DataSource over incview's logical slot, LSN offsets.

Offsets are ``{"lsn": n}``: a micro-batch (start, end] holds exactly the source transactions
whose commit ends in that LSN range, whole (a transaction is never split: it belongs to the batch
its commit end falls into). ``latestOffset`` finds transaction ends with a peek filtered in the
server to the Commit messages (no rows shipped) and bounds a batch by ``max_rows`` changes
(``ReadMaxRows``; a bigger single transaction still comes whole); ``read`` peeks the slot up to
``end`` and ships the transactions as pickled chunks. Peeking does not consume the slot: the
driver advances it only after every view committed, so a replayed batch (Spark replays an
uncommitted batch with the same offsets after a crash) reads the same transactions again.
Rows: ``end_lsn`` (long), ``seq`` (int, 0 = the transaction's header), ``payload`` (binary: a
pickled ``Transaction`` holding the header or one chunk of one table's changes). Only the tables
in option ``tables`` are shipped. This module must not apply changes or move the slot.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from engine.dataflow.batch import DiffBatch
from engine.postgres.cdc import CdcReader, Transaction

NAME = "incview_cdc"
SCHEMA = "end_lsn long, seq int, payload binary"
CHUNK_ROWS = 20_000
DEFAULT_MAX_ROWS = 200_000


class LsnRange(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end


def transaction_rows(tx: Transaction, tables: set[str] | None) -> Iterator[tuple[int, int, bytes]]:
    """One header row (xid, LSNs, commit time, TRUNCATEd tables) and chunks of the changes."""
    keep = [t for t in tx.changes if tables is None or t in tables]
    truncated = {t for t in tx.truncated if tables is None or t in tables}
    header = Transaction(tx.xid, tx.commit_lsn, tx.end_lsn, tx.commit_ts, truncated=truncated)
    for t in truncated:
        header.relations[t] = tx.relations[t]
    yield tx.end_lsn, 0, pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
    seq = 1
    for table in keep:
        batch = tx.changes[table]
        for i in range(0, len(batch), CHUNK_ROWS):
            part = Transaction(tx.xid, tx.commit_lsn, tx.end_lsn, tx.commit_ts)
            part.changes[table] = DiffBatch(
                batch.rows[i : i + CHUNK_ROWS], batch.weights[i : i + CHUNK_ROWS]
            )
            part.relations[table] = tx.relations[table]
            yield tx.end_lsn, seq, pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
            seq += 1


def transactions_from_rows(rows: Iterable[tuple[int, int, bytes]]) -> list[Transaction]:
    """Reassemble ``transaction_rows`` output (in any order) into transactions, oldest first."""
    txs: dict[int, Transaction] = {}
    for _end, _seq, payload in sorted(rows, key=lambda r: (r[0], r[1])):
        part: Transaction = pickle.loads(payload)
        tx = txs.get(part.end_lsn)
        if tx is None:
            txs[part.end_lsn] = part
            continue
        for table, batch in part.changes.items():
            have = tx.changes.get(table)
            if have is None:
                tx.changes[table] = batch
            else:
                have.rows.extend(batch.rows)
                have.weights.extend(batch.weights)
            tx.relations[table] = part.relations[table]
    return list(txs.values())


class CdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.dsn = options["dsn"]
        self.slot = options["slot"]
        self.publication = options["publication"]
        self.start_lsn = int(options.get("start_lsn", "0"))
        self.max_rows = int(options.get("max_rows", DEFAULT_MAX_ROWS))
        tables = options.get("tables")
        self.tables = set(tables.split(",")) if tables else None
        self._reader: CdcReader | None = None
        self._available_now: int | None = None

    def _cdc(self) -> CdcReader:
        if self._reader is None:
            self._reader = CdcReader(self.dsn, self.slot, self.publication)
        return self._reader

    def initialOffset(self) -> dict:
        return {"lsn": self.start_lsn}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._cdc().flush_wal()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["lsn"])
        max_rows = None if isinstance(limit, ReadAllAvailable) else self.max_rows
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        peek_rows = max(max_rows or 0, 10_000)
        while True:
            ends, read = self._cdc().commit_ends(peek_rows if max_rows else None)
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
        with CdcReader(self.dsn, self.slot, self.publication) as reader:
            txs = reader.read_range(partition.start, partition.end)
        for tx in txs:
            yield from transaction_rows(tx, self.tables)

    def commit(self, end: dict) -> None:
        """Nothing: the driver advances the slot once every view committed (see Engine)."""

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


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
