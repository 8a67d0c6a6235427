"""Transactions assembled from pgoutput messages one message at a time (a part of ``CdcReader``).

The row path of ``CdcReader._assemble`` (``columnar=False``; the reference the columnar assembly,
``columnar_assembly``, equals): each message decoded by ``PgOutputDecoder``, its rows gathered per
relation, a transaction's diffs moved to disk each time they reach ``spill_after``. Shared with
the columnar assembly: ``_transaction`` (a relation's diffs also reported under every table above
a partition or inheritance child), ``_old_row_missing`` (an UPDATE or DELETE without its old row)
and ``_spill``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from engine.dataflow.batch import DiffBatch
from engine.errors import ViewError
from engine.postgres.cdc_transaction import Transaction
from engine.postgres.pgoutput import (
    Begin,
    Commit,
    PgOutputDecoder,
    Relation,
    Truncate,
    replica_identity_fix,
)
from engine.postgres.tx_spill import SpilledChanges

log = logging.getLogger(__name__)


class _TableChanges:
    __slots__ = ("rel", "rows", "weights", "truncated")

    def __init__(self, rel: Relation) -> None:
        self.rel = rel
        self.rows: list[tuple] = []
        self.weights: list[int] = []
        self.truncated = False

    def clear(self) -> None:
        """A TRUNCATE (or a change without its old row): the diffs so far no longer count."""
        self.rows.clear()
        self.weights.clear()
        self.truncated = True

    def reshape(self, new_rel: Relation) -> None:
        """Re-shape the rows gathered so far to ``new_rel``'s columns (by name)."""
        old_names = self.rel.column_names
        index = {n: i for i, n in enumerate(old_names)}
        picks = [index.get(c.name) for c in new_rel.columns]
        self.rows = [tuple(None if i is None else r[i] for i in picks) for r in self.rows]
        self.rel = new_rel


def _copy(batch: DiffBatch) -> DiffBatch:
    """Another batch of the same diffs (Arrow arrays are immutable: shared)."""
    if batch.columns is not None:
        return DiffBatch.from_columns(batch.columns, batch.column_weights)
    return DiffBatch(list(batch.rows), list(batch.weights))


def _missing_old_row(rel: Relation, what: str) -> ViewError:
    ident = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX", "f": "FULL"}.get(
        rel.replica_identity, rel.replica_identity
    )
    return ViewError(
        f"{what} of table {rel.qualified_name} arrived without the full old row (replica "
        f"identity {ident}); incview needs the old values to retract them. Run "
        f"{replica_identity_fix(rel.schema, rel.table)}"
    )


class RowAssembly:
    """``CdcReader``'s message-by-message assembly."""

    decoder: PgOutputDecoder
    last_lsn: int
    spilled_transactions: int
    spilled_chunks: int
    _ancestors: dict[int, list[str]]
    ancestors_of: Callable[[int], list[str]]  # CdcReader's

    def _assemble_rows(
        self, messages: Iterable[bytes], spill_after: int = 0
    ) -> tuple[list[Transaction], int]:
        """``CdcReader._assemble`` message by message (``columnar=False``): the reference the
        columnar assembly equals."""
        decoder = self.decoder
        decode = decoder.decode
        relations = decoder.relations
        after = self.last_lsn
        txs: list[Transaction] = []
        skipped = 0
        begin: Begin | None = None
        skipping = False
        tables: dict[int, _TableChanges] = {}
        start = 0
        spill: SpilledChanges | None = None
        buffered = 0
        bound = spill_after if spill_after > 0 else -1
        for i, data in enumerate(messages):
            kind = data[0]
            if buffered == bound:
                spill = self._spill(tables, spill)
                buffered = 0
            if skipping:
                if kind == 82 or kind == 89:  # R, Y: keep the relation cache current
                    ev = decode(data)
                    if kind == 82:
                        self._ancestors.pop(ev.oid, None)
                elif kind == 67:  # C
                    skipping = False
                    begin = None
                    skipped += i - start + 1
                continue
            if kind == 73:  # I
                ev = decode(data)
                acc = tables.get(ev.oid)
                if acc is None:
                    acc = tables[ev.oid] = _TableChanges(relations[ev.oid])
                acc.rows.append(ev.new)
                acc.weights.append(1)
                buffered += 1
            elif kind == 85:  # U
                ev = decode(data)
                acc = tables.get(ev.oid)
                if acc is None:
                    acc = tables[ev.oid] = _TableChanges(relations[ev.oid])
                if ev.old is None or ev.old_is_key:
                    self._old_row_missing(acc.rel, ev.oid, "an UPDATE")
                    acc.clear()
                    continue
                acc.rows += (ev.old, ev.new)
                acc.weights += (-1, 1)
                buffered += 1
            elif kind == 68:  # D
                ev = decode(data)
                acc = tables.get(ev.oid)
                if acc is None:
                    acc = tables[ev.oid] = _TableChanges(relations[ev.oid])
                if ev.old_is_key:
                    self._old_row_missing(acc.rel, ev.oid, "a DELETE")
                    acc.clear()
                    continue
                acc.rows.append(ev.old)
                acc.weights.append(-1)
                buffered += 1
            elif kind == 66:  # B
                begin = decode(data)
                start = i
                tables = {}
                spill = None
                buffered = 0
                if begin.final_lsn < after:  # returned by an earlier poll
                    skipping = True
            elif kind == 67:  # C
                commit = decode(data)
                assert isinstance(commit, Commit) and begin is not None
                held = {
                    oid: (acc.rel, DiffBatch(acc.rows, acc.weights), acc.truncated)
                    for oid, acc in tables.items()
                }
                tx = self._transaction(begin, commit, held)
                if spill is not None:
                    tx.spilled = spill
                    spill = None
                    self.spilled_transactions += 1
                txs.append(tx)
                buffered = 0
                begin = None
            elif kind == 82:  # R
                rel = decode(data)
                self._ancestors.pop(rel.oid, None)  # re-read: it may have been attached/detached
                acc = tables.get(rel.oid)
                if acc is not None and acc.rel is not rel:
                    acc.reshape(rel)  # schema change inside the transaction
            elif kind == 84:  # T
                ev = decode(data)
                assert isinstance(ev, Truncate)
                for oid in ev.oids:
                    acc = tables.get(oid)
                    if acc is None:
                        acc = tables[oid] = _TableChanges(relations[oid])
                    acc.clear()
                    if spill is not None:
                        spill.truncate(acc.rel.qualified_name)
            else:  # O (origin), Y (type), M (message): nothing to gather
                decode(data)
        return txs, skipped

    def _old_row_missing(self, rel: Relation, oid: int, what: str) -> None:
        """A change arrived without its old row: an error (``_missing_old_row``), unless the
        table is a partition or inheritance child of another, one created or attached after the
        views were (the engine gives those REPLICA IDENTITY FULL when it notices them, which may
        be after their first UPDATE): then the transaction counts as a TRUNCATE of the table
        (the caller drops its diffs so far and marks it truncated), and the views reading it or
        its parents re-populate from a snapshot holding it."""
        parents = self.ancestors_of(oid)
        if not parents:
            raise _missing_old_row(rel, what)
        log.warning(
            "%s of %s (below %s) arrived without the old row: its views are re-populated",
            what,
            rel.qualified_name,
            ", ".join(parents),
        )

    def _spill(
        self, tables: dict[int, _TableChanges], spill: SpilledChanges | None
    ) -> SpilledChanges:
        """Move the diffs gathered so far in ``tables`` into ``spill`` (made on first use)."""
        if spill is None:
            spill = SpilledChanges()
        for oid, acc in tables.items():
            if acc.rows:
                # also under every table above a partition or child (as ``_transaction`` does);
                # the chunk keeps its own column names: the views project by name
                for name in (acc.rel.qualified_name, *self.ancestors_of(oid)):
                    spill.append(name, acc.rel.column_names, acc.rows, acc.weights)
                acc.rows, acc.weights = [], []
                self.spilled_chunks += 1
        return spill

    def _transaction(
        self,
        begin: Begin,
        commit: Commit,
        tables: dict[int, tuple[Relation, DiffBatch, bool]],
    ) -> Transaction:
        """The transaction of ``tables``: per relation oid its shape at the end, its diffs
        (rows or Arrow columns) and whether it was truncated."""
        tx = Transaction(begin.xid, commit.commit_lsn, commit.end_lsn, commit.commit_ts)
        for rel, batch, truncated in tables.values():
            name = rel.qualified_name
            have = tx.changes.get(name)
            if have is None:
                tx.changes[name] = batch
            else:  # the same name under two oids (table dropped and re-created)
                tx.changes[name] = DiffBatch.concat([have, batch])
            tx.relations[name] = rel
            if truncated:
                tx.truncated.add(name)
        # a partition's or inheritance child's changes are also changes of every table above it
        # (``SELECT ... FROM parent`` reads them): reported under each ancestor's name too, rows
        # as the first such table's relation has them (by column name; a child's extra columns
        # another child lacks are None: no view of the parent reads them)
        for oid, (rel, batch, truncated) in tables.items():
            for parent in self.ancestors_of(oid):
                have = tx.changes.get(parent)
                if have is None:
                    tx.changes[parent] = _copy(batch)
                    tx.relations[parent] = rel
                else:
                    shape = tx.relations[parent]
                    if shape.column_names != rel.column_names:
                        index = {n: i for i, n in enumerate(rel.column_names)}
                        picks = [index.get(n) for n in shape.column_names]
                        rows = [
                            tuple(None if i is None else r[i] for i in picks) for r in batch.rows
                        ]
                        batch = DiffBatch(rows, list(batch.weights))
                    tx.changes[parent] = DiffBatch.concat([have, batch])
                if truncated:
                    tx.truncated.add(parent)
        return tx
