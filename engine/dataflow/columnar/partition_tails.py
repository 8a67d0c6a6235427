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
live positions to ``live_target`` (refilling a head), or after ``max_entries`` entries
(compacting a window of a tail). Reads see committed state; writes are staged.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar.row_block import run_starts
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
        max_entries: int | None = None,
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
                if _done(out, live_target, max_entries):
                    return out
            change = None
            if ci < nc and changes[ci][0] == rk:
                change = changes[ci]
                ci += 1
            self._row(out, prefix, rk, group, change, ci - 1, suffix)
            if _done(out, live_target, max_entries):
                return out
        while ci < nc:
            self._row(out, prefix, changes[ci][0], (), changes[ci], ci, suffix)
            ci += 1
            if _done(out, live_target, None):
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


def _done(out: Scan, live_target: int | None, max_entries: int | None) -> bool:
    if live_target is not None and out.live >= live_target:
        return True
    return max_entries is not None and out.entries >= max_entries


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


def compact_windows(
    table: StateTable,
    windows: Sequence[tuple[bytes, bytes, bytes, Sequence[tuple[bytes, int, bytes]]]],
    suffix: bytes,
    max_entries: int,
) -> tuple[list[list[int]], int, int]:
    """Compact a window of several partitions' entries at once; returns, per window, which of
    its changes it merged (and so wrote), and how many entries it read and found garbage
    (entries of rows whose count is zero, and all but one entry of the other rows).

    ``windows``: (prefix, the head's end rk, start rk, the partition's changes past the head,
    in rk order). Each window reads ``max_entries`` entries from ``prefix + start`` (rocksdict's
    own iteration, no Python per entry), completed to a row boundary; one that reaches the
    partition's end goes on from the tail's first row up to its start (so windows cover a tail
    evenly, circularly); rows are grouped, summed and rewritten in arrays as
    ``PartitionTails.scan`` does, only the rewritten rows get Python."""
    keys: list[bytes] = []
    values: list[bytes] = []
    sizes = []
    covered: list[list[tuple[bytes, bytes | None]]] = []  # per window: (from, to) rk ranges
    for prefix, end, start, _ in windows:
        got, ranges = _window(table, prefix, end, start, max_entries)
        if got:
            ks, vs = zip(*got, strict=True)
            keys += ks
            values += vs
        sizes.append(len(got))
        covered.append(ranges)
    n = len(keys)
    merged: list[list[int]] = [[] for _ in windows]
    if not n:
        for i, (prefix, _, _, changes) in enumerate(windows):
            merged[i] = _new_rows(table, prefix, changes, covered[i], suffix)
        return merged, 0, 0
    row_keys = pc.binary_slice(pa.array(keys, pa.binary()), 0, -8)  # P | rk
    window = np.repeat(np.arange(len(windows)), sizes)
    first = np.ones(n, dtype=bool)  # the first entry of a row
    if n > 1:
        same = np.asarray(pc.equal(row_keys.slice(1), row_keys.slice(0, n - 1)))
        first[1:] = ~same | (window[1:] != window[:-1])
    gs = np.flatnonzero(first)
    w = np.frombuffer(pc.binary_slice(pa.array(values, pa.binary()), 0, 8).buffers()[2], "<i8")
    count = np.add.reduceat(w, gs)
    group = np.cumsum(first) - 1
    before = np.cumsum(w) - w
    zero = (before - before[gs][group]) == 0  # the count was zero before this entry
    rep = np.maximum.reduceat(np.where(zero, np.arange(n), -1), gs)
    entry_start = run_starts(np.asarray(sizes, np.int64))
    change_w = np.zeros(len(gs), np.int64)
    change_rep: dict[int, bytes] = {}
    for i, (prefix, _, _, changes) in enumerate(windows):
        e0, e1 = int(entry_start[i]), int(entry_start[i + 1])
        took = merged[i]
        for c, (rk, cw, value) in enumerate(changes):
            if not _covers(covered[i], rk):
                continue
            took.append(c)
            key = prefix + rk
            e = bisect_left(keys, key, e0, e1)  # the row's first entry, if it has one
            if e < e1 and keys[e][:-8] == key:
                g = int(group[e])
                if count[g] == 0:
                    change_rep[g] = value
                change_w[g] += cw
            else:  # a row without entries in the window: its first entry
                table.put(key + suffix, value)
    sizes_g = np.diff(np.append(gs, n))
    garbage = int(sizes_g[count == 0].sum() + (sizes_g[count != 0] - 1).sum())
    need = (sizes_g > 1) | (change_w != 0)
    new = count + change_w
    drop = need[group] & (~first | (new[group] == 0))
    table.delete_many([keys[i] for i in np.flatnonzero(drop).tolist()])
    put = np.flatnonzero(need & (new != 0)).tolist()
    table.put_many(
        [keys[gs[g]] for g in put],
        [
            int(new[g]).to_bytes(8, "little", signed=True) + change_rep.get(g, values[rep[g]])[8:]
            for g in put
        ],
    )
    return merged, n, garbage


def _new_rows(table, prefix, changes, covered, suffix) -> list[int]:
    """A window without entries: its changes in the ranges it covers are new rows."""
    took = []
    for c, (rk, _, value) in enumerate(changes):
        if _covers(covered, rk):
            took.append(c)
            table.put(prefix + rk + suffix, value)
    return took


def _covers(ranges: list[tuple[bytes, bytes | None]], rk: bytes) -> bool:
    """Whether ``rk`` lies in one of the (first, last) ranges (last None: on to the end)."""
    return any(first <= rk and (last is None or rk <= last) for first, last in ranges)


def _window(table: StateTable, prefix: bytes, end: bytes, start: bytes, max_entries: int):
    """Up to ``max_entries`` entries of one partition's tail (the rows after ``end``) from
    ``start`` on, completed to a row boundary, and then from the tail's first row up to
    ``start`` if the partition ended first; the entries in key order and the rk ranges they
    cover."""
    got, last = _run(table, prefix, start, max_entries, None)
    if last is not None or len(got) >= max_entries:
        return got, [(start, last)]
    more, last2 = _run(table, prefix, end + AFTER_ROW, max_entries - len(got), prefix + start)
    if last2 is _START:
        return more + got, [(end + AFTER_ROW, None)]  # the whole tail
    return more + got, [(start, None), (end + AFTER_ROW, last2)]


_START = b""  # ``_run`` reached its stop key


def _run(table: StateTable, prefix: bytes, start: bytes, max_entries: int, stop: bytes | None):
    """Up to ``max_entries`` entries from ``prefix + start``, completed to a row boundary, not
    past the partition's end nor ``stop``; and the last rk they cover (None: they reach the
    partition's end; ``_START``: they reach ``stop``)."""
    it = table.items_after(prefix + start, prefix)
    got = list(islice(it, max_entries)) if max_entries > 0 else []
    if stop is not None and got and got[-1][0] >= stop:
        return got[: bisect_left(got, stop, key=_key)], _START
    if len(got) < max_entries or not got:  # the partition ended
        return got, (_START if stop is not None else None)
    lp = len(prefix)
    last = got[-1][0][lp:-8]
    for k, v in it:
        if (stop is not None and k >= stop) or k[lp:-8] != last:
            return got, last
        got.append((k, v))
    return got, (_START if stop is not None else None)


def _key(item: tuple[bytes, bytes]) -> bytes:
    return item[0]
