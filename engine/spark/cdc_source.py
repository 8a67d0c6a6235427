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
from engine.postgres.tx_spill import SpilledChanges

NAME = "incview_cdc"
SCHEMA = "end_lsn long, seq int, payload binary"
CHUNK_ROWS = 20_000
DEFAULT_MAX_ROWS = 200_000


# per Python worker process: one open CdcReader per (dsn, slot, publication, bound)
_READERS: dict[tuple[str, str, str, int], CdcReader] = {}


class LsnRange(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end


def _parts(tx: Transaction, tables: set[str] | None) -> Iterator[Transaction]:
    """``tx`` restricted to ``tables`` (None: all) and cut into pieces of at most
    ``CHUNK_ROWS`` changes (the first carries TRUNCATEs). A huge transaction's chunks on disk
    (``Transaction.spilled``, the source's ``max_buffered_changes``) are read one at a time."""
    truncated = tx.truncated if tables is None else tx.truncated & tables
    whole = tables is None or (tables.issuperset(tx.changes) and truncated == tx.truncated)
    if whole and tx.spilled is None and tx.change_count <= CHUNK_ROWS:
        yield tx
        return
    first = Transaction(tx.xid, tx.commit_lsn, tx.end_lsn, tx.commit_ts, truncated=set(truncated))
    first.relations.update({t: tx.relations[t] for t in truncated})
    part, size = first, 0
    for table, batch in tx.iter_changes():
        if tables is not None and table not in tables:
            continue
        for i in range(0, len(batch), CHUNK_ROWS):
            rows, weights = batch.rows[i : i + CHUNK_ROWS], batch.weights[i : i + CHUNK_ROWS]
            if size and size + len(rows) > CHUNK_ROWS:
                yield part
                part, size = Transaction(tx.xid, tx.commit_lsn, tx.end_lsn, tx.commit_ts), 0
            have = part.changes.get(table)
            if have is None:
                part.changes[table] = DiffBatch(list(rows), list(weights))
            else:
                have.extend(DiffBatch(rows, weights))
            part.relations[table] = tx.relations[table]
            size += len(rows)
    if size or part is first:
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
        for part in _parts(tx, tables):
            n = part.change_count
            if group and size + n > CHUNK_ROWS:
                yield flush()
                seq += 1
                group, size = [], 0
            group.append(part)
            size += n
    if group:
        yield flush()


def transactions_from_rows(
    rows: Iterable[tuple[int, int, bytes]],
    max_buffered_changes: int = 0,
    presorted: bool = False,
) -> list[Transaction]:
    """Reassemble ``transaction_rows`` output into transactions, oldest first. ``rows`` are
    sorted by (end_lsn, seq) first, unless ``presorted`` says they come in that order (one
    micro-batch partition, streamed: then they are read one at a time). With
    ``max_buffered_changes``, a transaction's diffs beyond that many go to disk as they arrive
    (``Transaction.spilled``, read back chunk by chunk by the apply), so a huge transaction
    never sits whole in the driver's memory."""
    if not presorted:
        rows = sorted(rows, key=lambda r: (r[0], r[1]))
    txs: dict[int, Transaction] = {}
    for _end, _seq, payload in rows:
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
            tx.relations.update(part.relations)
            bound = max_buffered_changes
            if bound > 0 and (
                tx.spilled is not None or tx.change_count + part.change_count > bound
            ):
                _spill(tx, part)
                continue
            for table, batch in part.changes.items():
                have = tx.changes.get(table)
                if have is None:
                    tx.changes[table] = batch
                else:
                    have.extend(batch)
    return list(txs.values())


def _spill(tx: Transaction, part: Transaction) -> None:
    """Move what ``tx`` holds in memory, and ``part``, to ``tx``'s chunks on disk."""
    if tx.spilled is None:
        tx.spilled = SpilledChanges()
    for held in (tx.changes, part.changes):
        for table, batch in held.items():
            columns = tuple(tx.relations[table].column_names)
            tx.spilled.append(table, columns, batch.rows, batch.weights)
    tx.changes = {}


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
