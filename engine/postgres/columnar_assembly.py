"""Whole transactions from blocks of pgoutput messages decoded column-wise (``columnar_decode``).

``ColumnarAssembler(reader)`` is ``CdcReader._assemble`` for the vectorized decoder: ``feed``
takes the messages of a peek, all at once or block by block (a streamed peek; a transaction may
span blocks), and ``finish`` returns the committed transactions after the reader's ``last_lsn``
and the number of messages of the transactions it skipped. The semantics are the row
assembler's, step for step: Begin/Commit bound a transaction (its xid and commit LSN as sent);
a transaction whose Begin is before ``last_lsn`` is skipped without decoding its rows; a
TRUNCATE keeps only the table's diffs after it and marks it truncated; a Relation message
inside a transaction re-shapes the table's earlier rows by column name; an UPDATE or DELETE
without its old row is an error or, for a partition or inheritance child, a re-population
(``CdcReader._old_row_missing``); a transaction's diffs past ``spill_after`` go to disk. Each
table's diffs of a transaction are a columnar ``DiffBatch`` (Arrow slices of the decoded block,
no copy) when every column had an exact vector parse, else tuple rows equal to the row
decoder's. This module must not talk to Postgres itself (catalog look-ups of partition
ancestors go through the reader).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from engine.dataflow.batch import DiffBatch
from engine.postgres.columnar_decode import BLOCK, DecodedChanges, decode_buffer
from engine.postgres.pgoutput import Begin, Commit, Relation, Truncate
from engine.postgres.tx_spill import SpilledChanges

if TYPE_CHECKING:
    from engine.postgres.cdc import CdcReader, Transaction


_BEGIN, _COMMIT = 66, 67  # 'B', 'C'
# a table's diffs between two control messages fewer than this come as rows (DecodedChanges.
# prepare_rows): single-row transactions as Arrow slices cost ~3x the row decoder's time
SMALL = 32


class _Table:
    """One table's diffs in the open transaction: slices ``(group, a, b, k)`` of decoded groups,
    each added while the table had shape ``shapes[k]``."""

    __slots__ = ("rel", "shapes", "parts", "truncated")

    def __init__(self, rel: Relation) -> None:
        self.rel = rel  # the shape at the transaction's end (a Relation message may change it)
        self.shapes: list[tuple[str, ...]] = [rel.column_names]
        self.parts: list[tuple[DecodedChanges, int, int, int]] = []
        self.truncated = False

    def reshape(self, rel: Relation) -> None:
        """A Relation message changed the table inside the transaction: the rows so far are
        re-shaped by column name (as they would have been at this point, step by step)."""
        self.rel = rel
        if rel.column_names != self.shapes[-1]:
            self.shapes.append(rel.column_names)

    def add(self, group: DecodedChanges, a: int, b: int) -> None:
        self.parts.append((group, a, b, len(self.shapes) - 1))

    def clear(self) -> None:
        self.parts = []
        self.shapes = [self.shapes[-1]]

    def _picks(self, group: DecodedChanges, k: int) -> list[int | None] | None:
        """Where each column of the current shape comes from in the group's rows (None: no
        re-shaping)."""
        names = group.rel.column_names
        if len(self.shapes) == 1 and names == self.shapes[0]:
            return None  # the usual case: no schema change in the transaction
        picks: list[int | None] = list(range(len(names)))
        for shape in self.shapes[k:]:
            if shape != names:
                index = {n: i for i, n in enumerate(names)}
                picks = [None if (i := index.get(c)) is None else picks[i] for c in shape]
                names = shape
        return None if picks == list(range(len(group.rel.column_names))) else picks

    def chunks(self) -> list[tuple[list[tuple], np.ndarray]]:
        """Each part's rows (shaped as the table is now) and weights."""
        out = []
        for g, a, b, k in self.parts:
            rows = g.rows()[a:b]
            picks = self._picks(g, k)
            if picks is not None:
                rows = [tuple(None if i is None else r[i] for i in picks) for r in rows]
            out.append((rows, g.weights[a:b]))
        return out

    def batch(self) -> DiffBatch:
        """The diffs as one batch shaped as ``rel``: Arrow when every part is (with the same
        column types and no re-shaping), else rows."""
        parts = self.parts
        if not parts:
            return DiffBatch()
        if len(parts) == 1 and len(self.shapes) == 1:  # the usual case
            g, a, b, _ = parts[0]
            if g.rel.column_names == self.shapes[0]:
                return g.batch(a, b)
        if all(g.columnar and self._picks(g, k) is None for g, _, _, k in parts):
            if len(parts) == 1:
                g, a, b, _ = parts[0]
                return g.batch(a, b)
            types = [c.type for c in parts[0][0].columns]
            if all([c.type for c in g.columns] == types for g, _, _, _ in parts):
                columns = [
                    pa.concat_arrays([g.columns[i].slice(a, b - a) for g, a, b, _ in parts])
                    for i in range(len(types))
                ]
                weights = np.concatenate([g.weights[a:b] for g, a, b, _ in parts])
                return DiffBatch.from_columns(columns, weights)
        rows: list[tuple] = []
        weights_list: list[int] = []
        for chunk_rows, chunk_weights in self.chunks():
            rows += chunk_rows
            weights_list += chunk_weights.tolist()
        return DiffBatch(rows, weights_list)


class ColumnarAssembler:
    """Transactions of column-wise decoded blocks (see the module docstring)."""

    def __init__(self, reader: CdcReader, spill_after: int = 0) -> None:
        self.reader = reader
        self.after = reader.last_lsn
        self.bound = spill_after if spill_after > 0 else 0
        self.txs: list[Transaction] = []
        self.skipped = 0  # messages of skipped (already returned) transactions
        self.read = 0  # messages fed so far
        # the open transaction
        self.begin: Begin | None = None
        self.skipping = False
        self.start = 0
        self.tables: dict[int, _Table] = {}
        self.spill: SpilledChanges | None = None
        self.buffered = 0  # row changes held in memory since the last spill

    def feed(self, messages: Sequence[bytes]) -> None:
        """The next messages of the peek, in order (decoded ``BLOCK`` at a time)."""
        for i in range(0, len(messages), BLOCK):
            self._feed(messages[i : i + BLOCK])

    def _feed(self, messages: Sequence[bytes]) -> None:
        decoded = decode_buffer(
            self.reader.decoder, messages, self.after, self.skipping or self.begin is None
        )
        base = self.read
        self.read += len(messages)
        # boundaries: control messages and changes that lack their old row, in message order
        at = decoded.control_at
        missing = {i: (rel, what) for i, rel, what in decoded.missing_old}
        if missing:
            at = np.sort(np.concatenate([at, np.array(list(missing), np.int64)]))
        # each group's runs of diffs between two boundaries: (boundary before, a, b, messages)
        runs = [self._runs(g, at) for g in decoded.groups]
        next_run = [0] * len(runs)
        self._take_runs(runs, next_run, -1)
        decode = self.reader.decoder.decode
        controls = decoded.controls
        for j, i in enumerate(at.tolist()):
            data = messages[i]
            kind = data[0]
            if i in missing:
                self._old_row_missing(data, *missing[i])
            elif kind == _BEGIN:
                self._begin(base + i, decode(data))
            elif kind == _COMMIT:
                self._commit(base + i, decode(data))
            else:
                c = controls[i]
                self._control(c.event, c.relations)
            self._take_runs(runs, next_run, j)

    @staticmethod
    def _runs(g: DecodedChanges, at: np.ndarray) -> tuple[list, list, list, list, DecodedChanges]:
        mark = np.searchsorted(at, g.messages) - 1  # the boundary before each diff
        cuts = np.flatnonzero(mark[1:] != mark[:-1]) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.append(cuts, len(g))
        changes = np.add.reduceat(g.first.astype(np.int64), starts)  # messages per run
        small = (ends - starts) < SMALL
        g.prepare_rows(list(zip(starts[small].tolist(), ends[small].tolist(), strict=True)))
        return mark[starts].tolist(), starts.tolist(), ends.tolist(), changes.tolist(), g

    def _take_runs(self, runs: list, next_run: list[int], j: int) -> None:
        """Append the runs that follow boundary ``j`` (-1: the block's start); of several
        tables, in the order of their first message (a transaction's tables as the row
        assembler meets them)."""
        found = []
        for k, (marks, starts, ends, changes, g) in enumerate(runs):
            p = next_run[k]
            if p < len(marks) and marks[p] == j:
                found.append((int(g.messages[starts[p]]), g, starts[p], ends[p], changes[p]))
                next_run[k] = p + 1
        if len(found) > 1:
            found.sort(key=lambda f: f[0])
        for _, g, a, b, n in found:
            self._append(g, a, b, n)
        if self.bound and self.buffered >= self.bound and self.begin is not None:
            self._spill()

    def finish(self) -> tuple[list[Transaction], int]:
        """The committed transactions (an incomplete tail dropped) and the skipped messages."""
        return self.txs, self.skipped

    # -- steps --------------------------------------------------------------------------------
    def _begin(self, index: int, event: Begin) -> None:
        self.begin, self.start = event, index
        self.tables, self.spill, self.buffered = {}, None, 0
        self.skipping = event.final_lsn < self.after  # returned by an earlier poll

    def _commit(self, index: int, commit: Commit) -> None:
        if self.skipping:
            self.skipping = False
            self.skipped += index - self.start + 1
        else:
            assert self.begin is not None
            tables = {o: (acc.rel, acc.batch(), acc.truncated) for o, acc in self.tables.items()}
            tx = self.reader._transaction(self.begin, commit, tables)
            if self.spill is not None:
                tx.spilled = self.spill
                self.spill = None
                self.reader.spilled_transactions += 1
            self.txs.append(tx)
        self.buffered = 0
        self.begin = None

    def _control(self, event: object, relations: tuple[Relation | None, ...]) -> None:
        """A Relation, Truncate (Type, Origin, Message: nothing to gather)."""
        if isinstance(event, Relation):
            self.reader._ancestors.pop(event.oid, None)  # re-read: attached/detached?
            acc = self.tables.get(event.oid)
            if not self.skipping and acc is not None and acc.rel is not event:
                acc.reshape(event)  # schema change inside the transaction
        elif isinstance(event, Truncate) and not self.skipping:
            for oid, rel in zip(event.oids, relations, strict=True):
                acc = self._table(oid, rel)
                acc.clear()
                acc.truncated = True
                if self.spill is not None:
                    self.spill.truncate(acc.rel.qualified_name)

    def _table(self, oid: int, rel: Relation | None) -> _Table:
        acc = self.tables.get(oid)
        if acc is None:
            if rel is None:
                raise self.reader.decoder._unknown_relation(oid)
            acc = self.tables[oid] = _Table(rel)
        return acc

    def _append(self, g: DecodedChanges, a: int, b: int, changes: int) -> None:
        """Diffs ``a`` to ``b`` of group ``g`` (of ``changes`` messages) to the open
        transaction."""
        if self.begin is None or self.skipping:
            return
        acc = self.tables.get(g.rel.oid)
        if acc is None:
            acc = self.tables[g.rel.oid] = _Table(g.rel)
        acc.add(g, a, b)
        self.buffered += changes

    def _old_row_missing(self, message: bytes, rel: Relation, what: str) -> None:
        if self.begin is None or self.skipping:
            return
        if what == "an UPDATE":
            self.reader.decoder.decode(message)  # as the row path: unchanged TOAST fails first
        acc = self._table(rel.oid, rel)
        self.reader._old_row_missing(acc.rel, rel.oid, what)
        acc.clear()
        acc.truncated = True

    def _spill(self) -> None:
        """Move the open transaction's diffs so far to disk, as rows of each table's shape now."""
        reader = self.reader
        if self.spill is None:
            self.spill = SpilledChanges()
        for oid, acc in self.tables.items():
            if not acc.parts:
                continue
            names = (acc.rel.qualified_name, *reader.ancestors_of(oid))
            rows: list[tuple] = []
            weights: list[int] = []
            for chunk_rows, chunk_weights in acc.chunks():
                rows += chunk_rows
                weights += chunk_weights.tolist()
            for name in names:
                self.spill.append(name, acc.rel.column_names, rows, weights)
            acc.clear()
            reader.spilled_chunks += 1
        self.buffered = 0
