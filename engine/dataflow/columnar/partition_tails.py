"""A partition's state entries read in key order, merged with a time's changes and rewritten
compactly: the columnar top-k's only per-entry Python, for the few partitions that need it.

The top-k keeps one RocksDB entry per *write*: key ``P | rk | seq`` (``seq`` = the writing time,
8 bytes big-endian), value = ``row_block.pack_rows`` of the row with its weight in ``rec["w"]``.
Changes past a partition's head are written blind (no read: a delete is an entry of weight -1),
so a row may have several entries; its count is their sum. Its representative is the record of
the entry that brought the count up from zero (the row TopK keeps the row that created its
entry until the count returns to zero).

``PartitionTails.scan`` reads one partition from a start key and, row by row (entries of one rk
are adjacent, oldest first), merges the given changes of the time, and compacts what it read:
a row read from several entries, or changed, is rewritten as one entry under its oldest key (or
deleted when its count is zero); a changed row without entries gets ``P | rk | seq of the
time``. It stops before a row past ``until`` (reading a head), after the row that brings the
live positions to ``live_target`` (refilling a head). ``TailChanges`` holds the time's changes
past the heads until a scan merges them or they are written blind (``tail_compaction`` compacts
the tails' garbage). Reads see committed state; writes are staged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.state.store import StateTable

#: after every ``seq`` suffix of one rk: ``prefix + rk + AFTER_ROW`` seeks past the row
AFTER_ROW = b"\xff" * 9


@dataclass
class Scan:
    """What ``PartitionTails.scan`` read: the rows with a non-zero count (``rk``, ``seq``
    suffix, count, value with that count), which of the given changes it merged, the last rk it
    took (zero-count rows included), and whether it reached the partition's end."""

    rows: list[tuple[bytes, bytes, int, bytes]] = field(default_factory=list)
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
        suffix: bytes,
        changes: Sequence[tuple[bytes, int, bytes]] = (),
        until: bytes | None = None,
        live_target: int | None = None,
        live_before: int = 0,
    ) -> Scan:
        """Rows of partition ``prefix`` from key ``prefix + start`` on (see the module docstring).

        ``changes``: the time's (rk, weight, value) in rk order, none before ``start``; a row
        without entries gets the key suffix ``suffix``. ``until`` goes only with no changes."""
        out = Scan(live=live_before)
        lp = len(prefix)
        ci, nc = 0, len(changes)
        for rk, group in _entry_rows(self.table.items_from(prefix + start, prefix), lp):
            if until is not None and rk > until:
                return out
            while ci < nc and changes[ci][0] < rk:
                self._row(out, prefix, changes[ci][0], (), changes[ci], ci, suffix)
                ci += 1
                if _done(out, live_target):
                    return out
            change = None
            if ci < nc and changes[ci][0] == rk:
                change = changes[ci]
                ci += 1
            self._row(out, prefix, rk, group, change, ci - 1, suffix)
            if _done(out, live_target):
                return out
        while ci < nc:
            self._row(out, prefix, changes[ci][0], (), changes[ci], ci, suffix)
            ci += 1
            if _done(out, live_target):
                return out
        out.ended = True
        return out

    def _row(self, out: Scan, prefix: bytes, rk: bytes, group, change, ci: int, suffix: bytes):
        count = 0
        rep = b""
        for _, value in group:
            if not count:
                rep = value
            count += int.from_bytes(value[:8], "little", signed=True)
        if change is not None:
            out.consumed.append(ci)
            if not count:
                rep = change[2]
            count += change[1]
        value = count.to_bytes(8, "little", signed=True) + rep[8:]
        if group:
            first = group[0][0]
            n = len(group)
            out.entries += n
            self.entries_read += n
            if n > 1 or change is not None:
                for key, _ in group[1:]:
                    self.table.delete(key)
                if count:
                    self.table.put(first, value)
                else:
                    self.table.delete(first)
            seq = first[-8:]
        else:
            seq = suffix
            if count:
                self.table.put(prefix + rk + suffix, value)
        out.last = rk
        if count:
            out.rows.append((rk, seq, count, value))
            if count > 0:
                out.live += count


def _done(out: Scan, live_target: int | None) -> bool:
    return live_target is not None and out.live >= live_target


def _entry_rows(items, lp: int):
    """(rk, [(key, value), ...]) per row of an entry iterator (``key = P | rk | seq``)."""
    current = None
    group: list[tuple[bytes, bytes]] = []
    for key, value in items:
        rk = key[lp:-8]
        if rk != current:
            if group:
                yield current, group
            current, group = rk, []
        group.append((key, value))
    if group:
        yield current, group


class TailChanges:
    """The time's changes that lie past their partition's head, ordered by (partition, rk): the
    scans merge some of them (``of``/``consume``), the rest is written blind (``stage_blind``).

    Per change: its partition (sorted), rk (a binary Arrow array), weight and value
    (``row_block.pack_rows``)."""

    def __init__(
        self, part: np.ndarray, rk: pa.Array, weights: np.ndarray, values: list[bytes]
    ) -> None:
        self.part = part
        self.rk_array = rk
        self.weights = weights
        self.values = values
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

    def deletes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Partitions with negative changes left to write: (partitions, the index of the first
        such change of each, how many there are)."""
        neg = np.flatnonzero((self.weights < 0) & ~self.done)
        parts, first, count = np.unique(self.part[neg], return_index=True, return_counts=True)
        return parts, neg[first], count

    def rks(self, idx: np.ndarray) -> list[bytes]:
        """The rk of the changes ``idx``."""
        return self.rk_array.take(pa.array(idx, pa.int64())).to_pylist()

    def stage_blind(self, table: StateTable, prefixes: list[bytes], suffix: bytes) -> None:
        """Put every change no scan merged under ``P | rk | suffix`` (its weight, no read)."""
        left = np.flatnonzero(~self.done)
        if not len(left):
            return
        sel = pa.array(left)
        keys = pc.binary_join_element_wise(
            pa.array(prefixes, pa.large_binary()).take(pa.array(self.part[left])),
            self.rk_array.take(sel),
            pa.scalar(suffix, pa.large_binary()),
            pa.scalar(b"", pa.large_binary()),
        )
        values = self.values
        table.put_many(keys.to_pylist(), [values[i] for i in left.tolist()])
