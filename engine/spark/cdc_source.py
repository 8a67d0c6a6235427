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
to about ``CHUNK_ROWS`` changes per row). Only the tables
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
from engine.dataflow.nan import canonical_row, may_hold_nan
from engine.postgres.cdc import CdcReader, Transaction

NAME = "incview_cdc"
SCHEMA = "end_lsn long, seq int, payload binary"
CHUNK_ROWS = 20_000
DEFAULT_MAX_ROWS = 200_000


# per Python worker process: one open CdcReader per (dsn, slot, publication)
_READERS: dict[tuple[str, str, str], CdcReader] = {}


class LsnRange(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end


def _restricted(tx: Transaction, tables: set[str] | None) -> Transaction:
    """``tx`` with only the changes (and TRUNCATEs) of ``tables``."""
    if tables is None:
        return tx
    out = Transaction(
        tx.xid, tx.commit_lsn, tx.end_lsn, tx.commit_ts, truncated=tx.truncated & tables
    )
    for t, batch in tx.changes.items():
        if t in tables:
            out.changes[t] = batch
            out.relations[t] = tx.relations[t]
    for t in out.truncated:
        out.relations[t] = tx.relations[t]
    return out


def _parts(tx: Transaction) -> Iterator[Transaction]:
    """``tx`` cut into pieces of at most ``CHUNK_ROWS`` changes (the first carries TRUNCATEs)."""
    if tx.change_count <= CHUNK_ROWS:
        yield tx
        return
    first = True
    for table, batch in tx.changes.items():
        for i in range(0, len(batch), CHUNK_ROWS):
            part = Transaction(tx.xid, tx.commit_lsn, tx.end_lsn, tx.commit_ts)
            if first:
                part.truncated = set(tx.truncated)
                part.relations.update({t: tx.relations[t] for t in tx.truncated})
                first = False
            part.changes[table] = DiffBatch(
                batch.rows[i : i + CHUNK_ROWS], batch.weights[i : i + CHUNK_ROWS]
            )
            part.relations[table] = tx.relations[table]
            yield part


def transaction_rows(
    txs: Iterable[Transaction], tables: set[str] | None
) -> Iterator[tuple[int, int, bytes]]:
    """Rows of pickled lists of transactions (or pieces of one big transaction), each list up
    to about ``CHUNK_ROWS`` changes: few rows per batch, and each table's Relation is pickled
    once per row instead of once per transaction."""
    group: list[Transaction] = []
    size = 0
    seq = 0

    def flush() -> tuple[int, int, bytes]:
        return group[0].end_lsn, seq, pickle.dumps(group, protocol=pickle.HIGHEST_PROTOCOL)

    for tx in txs:
        for part in _parts(_restricted(tx, tables)):
            n = part.change_count
            if group and size + n > CHUNK_ROWS:
                yield flush()
                seq += 1
                group, size = [], 0
            group.append(part)
            size += n
    if group:
        yield flush()


def transactions_from_rows(rows: Iterable[tuple[int, int, bytes]]) -> list[Transaction]:
    """Reassemble ``transaction_rows`` output (in any order) into transactions, oldest first."""
    txs: dict[int, Transaction] = {}
    for _end, _seq, payload in sorted(rows, key=lambda r: (r[0], r[1])):
        parts = pickle.loads(payload)
        if may_hold_nan(payload):  # unpickled NaNs are new objects: back to the shared one
            for part in parts:
                for batch in part.changes.values():
                    batch.rows = list(map(canonical_row, batch.rows))
        for part in parts:
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
        key = (self.dsn, self.slot, self.publication)
        reader = _READERS.pop(key, None) or CdcReader(*key)
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
