"""Compaction of the columnar top-k's tails: which windows to read, and reading them in arrays.

A change past a partition's head is written blind (``partition_tails``), so a delete leaves two
entries that sum to zero. ``TailCompaction.run`` picks, each time, the partitions that got blind
deletes by chance (a hash of partition and time decides, so a replay picks alike) and
``compact_windows`` reads a window of each of their tails: up to ``window`` entries from the
first of those deletes, wrapping from the tail's first row when the partition ends (so windows
cover a tail evenly), with RocksDB's own iteration (``StateTable.items_after``: an upper bound at
the partition's end, no Python per entry). Rows are grouped and summed in arrays; a row read
from several entries becomes one entry under its oldest key (a zero-sum row is deleted), and
the time's changes inside a window are merged there instead of being written blind. Only the
rewritten rows get Python. This module must not know about heads or selections.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import islice

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar.partition_tails import AFTER_ROW, TailChanges
from engine.dataflow.columnar.row_block import run_starts
from engine.dataflow.state.store import StateTable


class TailCompaction:
    """The compaction windows of one collection's tails, and their pace.

    The chance of a window for a partition is ``4 * pace * deletes / R`` (R: the entries a
    window reads, on average: fewer than ``window`` near a partition's end) with ``pace = 2 * G``
    (at most 1; G: the share of garbage the windows find, on average): each blind delete leaves
    two garbage entries and a window removes R * G of them, so the windows remove ``8 * G**2``
    per delete below half garbage (it grows) and at least ``4 * G`` above (it shrinks): the
    garbage settles near half the entries, and a tail with little of it is read seldom."""

    #: entries a window reads
    window = 256

    def __init__(self, table: StateTable) -> None:
        self.table = table
        #: windows compacted (observability, tests)
        self.windows = 0
        #: the share of garbage the windows found and the entries a window read (moving
        #: averages; None: ``window``)
        self.garbage = 0.5
        self.window_reads: float | None = None

    def run(
        self,
        prefixes: list[bytes],
        ends: list[bytes | None],
        tail: TailChanges,
        suffix: bytes,
        time: int,
    ) -> None:
        """Compact windows of the tails that got blind deletes this time, by chance; the changes
        a window merges are marked done in ``tail`` (``ends``: each partition's head end)."""
        parts, first, negs = tail.deletes()
        if not len(parts):
            return
        data, offsets = _bytes_of([prefixes[j] for j in parts.tolist()])
        h = K.mix64(K.string_hashes(data, offsets) ^ np.uint64(time % (1 << 64)))
        pace = min(1.0, max(0.05, 2 * self.garbage))
        reads = self.window if self.window_reads is None else self.window_reads
        chance = np.minimum(1.0, 4.0 * pace * negs / max(1.0, reads))
        hit = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) < chance
        windows, owners = [], []
        for j, start in zip(parts[hit].tolist(), tail.rks(first[hit]), strict=True):
            if ends[j] is None:  # a refill took the whole partition into its head
                continue
            items, idx = tail.of(j)
            windows.append((prefixes[j], ends[j], start, items))
            owners.append(idx)
        self.windows += len(windows)
        merged, read, garbage = compact_windows(self.table, windows, suffix, self.window)
        if read:
            weight = min(1.0, read / 4096)
            self.garbage += (garbage / read - self.garbage) * weight
            self.window_reads = reads + (read / len(windows) - reads) * weight
        for idx, took in zip(owners, merged, strict=True):
            tail.consume(idx, took)


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


def _bytes_of(values: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(data, n+1 offsets) of byte strings, for ``kernels.string_hashes``."""
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    return np.frombuffer(b"".join(values), np.uint8), offsets
