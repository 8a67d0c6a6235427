"""The payload rows of the ``incview_cdc`` source (``engine.spark.cdc_source``): transactions
pickled in chunks of about ``CHUNK_ROWS`` changes (a huge transaction in pieces, each table's
Relation once per row), and their reassembly into transactions on the driver (a huge one partly
on disk). Kept apart from the source so that the Spark planner workers which only create and
plan the source do not import the engine's CDC and dataflow modules.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator

from engine.dataflow.batch import DiffBatch
from engine.dataflow.nan import canonical_row, may_hold_nan
from engine.postgres.cdc import Transaction
from engine.postgres.tx_spill import SpilledChanges

CHUNK_ROWS = 20_000


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
