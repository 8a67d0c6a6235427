"""A partition's state entries read in key order and merged with a time's changes, and the
changes past the heads written with one point read each: the columnar top-k's entries.

The top-k keeps one RocksDB entry per row: key ``P | rk`` (P the partition's key bytes, rk the
row's ORDER BY bytes + identity bytes), value = ``row_block.pack_rows`` of the row with its count
in ``rec["w"]``; an entry whose count reaches zero is deleted. Its record is the row's
representative: the record of the change that created the entry (the row TopK keeps the row
that created its entry until the count returns to zero).

``PartitionTails.scan`` reads one partition from a start key and, row by row, merges the given
changes of the time (a changed row is rewritten with its new count, or deleted at zero; a
changed row without an entry gets one). It stops before a row past ``until`` (reading a head),
after the row that brings the live positions to ``live_target`` (refilling a head).
``TailChanges`` holds the time's changes past the heads until a scan merges them or
``TailChanges.stage`` writes them: their ``Entries`` come from one ``get_many`` the caller started
in the background when the time's changes were known (``StateTable.get_many_ahead``: RocksDB
reads while the heads are merged), the new counts in arrays. Reads see committed state; writes
are staged.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import pyarrow as pa

from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar.row_block import binary_over, run_starts
from engine.dataflow.state.store import StateTable

#: ``prefix + rk + AFTER_ROW`` is the first key after the row ``rk``
AFTER_ROW = b"\x00"


@dataclass
class Scan:
    """What ``PartitionTails.scan`` read: the rows with a non-zero count (``rk``, count, value
    with that count), which of the given changes it merged, the last rk it took (zero-count rows
    included), and whether it reached the partition's end."""

    rows: list[tuple[bytes, int, bytes]] = field(default_factory=list)
    consumed: list[int] = field(default_factory=list)
    last: bytes | None = None
    ended: bool = False
    entries: int = 0
    live: int = 0


class PartitionTails:
    def __init__(self, table: StateTable) -> None:
        self.table = table
        #: entries read by scans since creation (observability and tests)
        self.entries_read = 0

    def scan(
        self,
        prefix: bytes,
        start: bytes,
        changes: Sequence[tuple[bytes, int, bytes]] = (),
        until: bytes | None = None,
        live_target: int | None = None,
        live_before: int = 0,
    ) -> Scan:
        """Rows of partition ``prefix`` from key ``prefix + start`` on (see the module docstring).

        ``changes``: the time's (rk, weight, value) in rk order, none before ``start``. ``until``
        goes only with no changes."""
        out = Scan(live=live_before)
        lp = len(prefix)
        ci, nc = 0, len(changes)
        for key, value in self.table.items_from(prefix + start, prefix):
            rk = key[lp:]
            if until is not None and rk > until:
                return out
            while ci < nc and changes[ci][0] < rk:
                self._row(out, prefix, changes[ci][0], None, changes[ci], ci)
                ci += 1
                if _done(out, live_target):
                    return out
            change = None
            if ci < nc and changes[ci][0] == rk:
                change = changes[ci]
                ci += 1
            self._row(out, prefix, rk, value, change, ci - 1)
            if _done(out, live_target):
                return out
        while ci < nc:
            self._row(out, prefix, changes[ci][0], None, changes[ci], ci)
            ci += 1
            if _done(out, live_target):
                return out
        out.ended = True
        return out

    def _row(self, out: Scan, prefix: bytes, rk: bytes, stored, change, ci: int) -> None:
        """One row: its entry's value (None: no entry) and the time's change of it (or None)."""
        if stored is not None:
            out.entries += 1
            self.entries_read += 1
            value = stored
        if change is not None:
            out.consumed.append(ci)
            if stored is None:
                value = change[2]  # its weight is the new count
            else:
                count = int.from_bytes(stored[:8], "little", signed=True) + change[1]
                value = count.to_bytes(8, "little", signed=True) + stored[8:]
            if int.from_bytes(value[:8], "little", signed=True):
                self.table.put(prefix + rk, value)
            else:
                self.table.delete(prefix + rk)
        out.last = rk
        count = int.from_bytes(value[:8], "little", signed=True)
        if count:
            out.rows.append((rk, count, value))
            if count > 0:
                out.live += count


def _done(out: Scan, live_target: int | None) -> bool:
    return live_target is not None and out.live >= live_target


class Entries:
    """Entry keys (``P | rk``) of rows and their pending read (``StateTable.get_many_ahead``);
    ``at[i]`` is the position of change i's row among them."""

    def __init__(
        self, keys: list[bytes], read: Callable[[], list[bytes | None]] | None, at: np.ndarray
    ) -> None:
        #: ``read`` None: the rows are unique (a count is 0 or 1), nothing was read
        self.keys, self.read, self.at = keys, read, at

    def of(self, idx: np.ndarray) -> Entries:
        """The entries of changes ``idx`` (the same keys and read)."""
        return Entries(self.keys, self.read, self.at[idx])

    def keys_of(self, idx: np.ndarray) -> list[bytes]:
        """The keys of the entries of changes ``idx`` (no read waited for)."""
        return K.pick(self.keys, self.at[idx])

    def pick(self, idx: np.ndarray) -> tuple[list[bytes], list[bytes | None]]:
        """The keys and committed values of the entries of changes ``idx``."""
        return self.keys_of(idx), K.pick(self.read(), self.at[idx])


class TailChanges:
    """The time's changes that lie past their partition's head, ordered by (partition, rk): the
    scans merge some of them (``of``/``consume``), ``stage`` writes the rest.

    Per change: its partition (sorted), rk (a binary Arrow array), weight, value
    (``row_block.pack_rows``, its weight as the record's count); and its row's entry."""

    def __init__(
        self,
        part: np.ndarray,
        rk: pa.Array,
        weights: np.ndarray,
        values: list[bytes],
        entries: Entries,
    ) -> None:
        self.part = part
        self.rk_array = rk
        self.weights = weights
        self.values = values
        self.entries = entries
        self.done = np.zeros(len(part), dtype=bool)

    def _range(self, j: int) -> tuple[int, int]:
        return int(np.searchsorted(self.part, j)), int(np.searchsorted(self.part, j, "right"))

    def of(self, j: int, start: bytes = b"") -> tuple[list[tuple[bytes, int, bytes]], list[int]]:
        """Partition ``j``'s changes not merged yet with rk >= ``start``, as (rk, weight, value),
        and their indices here (for ``consume``)."""
        a, b = self._range(j)
        rks = self.rk_array.slice(a, b - a).to_pylist()
        done = self.done[a:b].tolist()
        weights = self.weights[a:b].tolist()
        keep = [i for i in range(b - a) if not done[i] and rks[i] >= start]
        items = [(rks[i], weights[i], self.values[a + i]) for i in keep]
        return items, [a + i for i in keep]

    def consume(self, idx: list[int], consumed: list[int]) -> None:
        """Mark ``idx[c]`` for c in ``consumed`` as merged by a scan (written by it)."""
        for c in consumed:
            self.done[idx[c]] = True

    def stage(self, table: StateTable) -> None:
        """Write every change no scan merged: its row's entry rewritten with the new count,
        deleted at zero, or created with the change's record."""
        left = np.flatnonzero(~self.done)
        n = len(left)
        if not n:
            return
        if self.entries.read is None:
            self._stage_unique(table, left)
            return
        keys, stored = self.entries.pick(left)
        present = np.fromiter(map(operator.is_not, stored, repeat(None)), bool, n)
        new = self.weights[left].astype(np.int64)
        at = np.flatnonzero(present)
        rewritten: list[bytes] = []
        if len(at):
            found = K.pick(stored, at)
            lengths = np.fromiter(map(len, found), np.int64, len(found))
            starts = run_starts(lengths)
            blob = np.frombuffer(b"".join(found), np.uint8).copy()
            head = starts[:-1, None] + np.arange(8)
            new[at] += blob[head].view("<i8").ravel()
            blob[head] = new[at].astype("<i8").view(np.uint8).reshape(-1, 8)
            rewritten = binary_over(starts, blob.tobytes()).to_pylist()
        gone = np.zeros(n, bool)
        gone[at] = new[at] == 0
        table.delete_many(K.pick(keys, np.flatnonzero(gone)))
        # the puts in key order: rewritten entries and created ones (the change's own value)
        pool = rewritten + K.pick(self.values, left[~present])
        slot = np.where(present, np.cumsum(present), len(rewritten) + np.cumsum(~present)) - 1
        live = np.flatnonzero(~gone)
        table.put_many(K.pick(keys, live), K.pick(pool, slot[live]))

    def _stage_unique(self, table: StateTable, left: np.ndarray) -> None:
        """``stage`` for rows known to be unique: an entry's count is 1, so a change of -1
        deletes it and one of +1 creates it with the change's record, unread."""
        weights = self.weights[left]
        if (np.abs(weights) != 1).any():
            raise AssertionError(
                "the top-k's input was planned as unique rows, but a time changed a row's "
                f"count by {int(weights[np.abs(weights) != 1][0])}"
            )
        keys = self.entries.keys_of(left)
        table.delete_many(K.pick(keys, np.flatnonzero(weights < 0)))
        put = np.flatnonzero(weights > 0)
        table.put_many(K.pick(keys, put), K.pick(self.values, left[put]))
