"""ColumnarTopKCollection: ``row_number`` top-k computed a time at a time in arrays.

The same output as ``TopKCollection(rank_kind="row_number", limit=...)``: per partition the rows
at positions offset .. offset+limit-1 in ORDER BY order (Postgres' NULL placement, NaN above
every number, text in the C collation), duplicates counted by multiplicity, ties among peers
broken by the row's ``encode_key`` bytes as in the row collection (``sort_keys.identity_bytes`` of
the columns that are neither partition nor ORDER BY columns: it orders peers alike),
``emit_rank`` appending the row_number; it emits exactly the difference between the old and new
selections. ``supports`` says which plans it takes (the physical planner falls back to the row
top-k otherwise).

State, in the collection's column family: one entry per row, key ``P | rk`` (P the partition's
key bytes, rk = ORDER BY bytes + identity bytes), value the row as a fixed-width record holding
its count (``partition_tails``). Per partition a *head*: every row up to ``head_end``, at least
offset+limit live positions (or the whole partition); ``head_end`` is kept in ``<name>.heads``
and, with the packed head rows, in a bounded memory cache (``partition_heads``).

A time (``process``):

1. the delta becomes Arrow columns and records once; P, rk for every row (vectorized), then one
   sort consolidates it by ``P | rk``;
2. the touched partitions' head ends come from the cache, the misses from one ``get_many``;
3. a change past its partition's head end can neither enter the selection nor move a selected
   row: it only rewrites its row's entry (one ``get_many`` for all of them, started in the
   background at step 1 and taken at the end of the time; the new counts in arrays). When the
   input never holds a row twice (``unique_rows``, derived by the planner from the sources'
   keys: ``engine.sql.unique_rows``) a count is 0 or 1, so nothing is read: a change of -1
   deletes its row's entry, one of +1 creates it. A partition whose changes all lie there is
   done;
4. the other partitions' heads (cache, or one bounded scan) and their in-head changes are merged
   in one sort; a head left below offset+limit live positions is refilled by a scan of the tail;
   old and new selections come from segmented sums; their difference is the output;
5. heads longer than offset+limit+2*slack are cut back to offset+limit+slack (the rest stays in
   state as the tail); changed head ends are staged; the new heads go to the cache.

Reads see committed state only, writes are staged; the cache may hold the time in progress and
is emptied by a rollback. It must not keep more than the cache's budget in memory between times.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar import top_k_select as sel
from engine.dataflow.columnar.codec_columns import codec_columns, python_rows
from engine.dataflow.columnar.partition_heads import (
    HeadCache,
    KeyedRows,
    decode_meta,
    encode_meta,
    pack_heads,
    unpack_heads,
)
from engine.dataflow.columnar.partition_tails import (
    AFTER_ROW,
    Entries,
    PartitionTails,
    Scan,
    TailChanges,
)
from engine.dataflow.columnar.row_block import (
    RowCodec,
    Rows,
    column_kind,
    pack_row_values,
    unpack_rows,
)
from engine.dataflow.columnar.sort_keys import identity_bytes, partition_bytes, sortable_bytes
from engine.dataflow.state.sorted_partitions import order_description, order_spec
from engine.dataflow.state.store import StateStore


def supports(
    column_types: Sequence[pa.DataType | None],
    rank_kind: str = "row_number",
    limit: int | None = 1,
) -> bool:
    """Whether ``ColumnarTopKCollection`` computes a top-k over rows of these Arrow column types
    (None: no Arrow type): ``row_number`` with a limit of at least 1, every column of a record
    codec type (ints, floats, bools, dates, timestamps, numerics of a known scale, text).

    >>> supports([pa.int64(), pa.string()]), supports([pa.int64(), None])
    (True, False)
    >>> supports([pa.int64()], "rank"), supports([pa.int64()], limit=None)
    (False, False)
    """
    return (
        rank_kind == "row_number"
        and limit is not None
        and limit >= 1
        and bool(column_types)
        and all(t is not None and column_kind(t) is not None for t in column_types)
    )


class ColumnarTopKCollection(StatefulCollection):
    """Positions offset .. offset+limit-1 of each partition (see the module docstring)."""

    updates_output = True

    takes_columns = True

    #: the changes past the heads read their rows' entries by key (bloom filters; the head and
    #: refill scans read through the same tables' iterators)
    tuning = "point"

    def __init__(
        self,
        column_types: Sequence[pa.DataType],
        partition_key: Sequence[int],
        order_by: Sequence[int],
        descending: Sequence[bool],
        nulls_first: Sequence[bool | None] | None = None,
        limit: int = 1,
        offset: int = 0,
        emit_rank: bool = False,
        cache_bytes: int = 64 << 20,
        slack: int | None = None,
        unique_rows: bool = False,
    ) -> None:
        super().__init__()
        if not supports(column_types, "row_number", limit):
            raise ValueError(f"ColumnarTopKCollection cannot hold {list(column_types)}, {limit=}")
        if offset < 0:
            raise ValueError(f"TopK offset must be >= 0, got {offset}")
        self.codec = RowCodec(column_types, hashed=False)
        self.partition_key = tuple(partition_key)
        self.order_by, self.descending, self.nulls_first = order_spec(
            "TopK", order_by, descending, nulls_first
        )
        self.limit, self.offset, self.emit_rank = limit, offset, emit_rank
        keyed = set(self.partition_key) | set(self.order_by)
        #: the columns whose repr tells peers apart (the others are equal among peers)
        self.payload = [i for i in range(len(column_types)) if i not in keyed]
        self.hi = offset + limit
        self.slack = max(2, limit // 4) if slack is None else slack
        self.cache_bytes = cache_bytes
        #: the input never holds a row twice (the planner derived a key of it): a change past
        #: the heads creates or deletes its row's entry unread
        self.unique_rows = unique_rows
        #: partitions whose changes all lay past their heads, heads refilled from their tails,
        #: heads cut back (observability, tests)
        self.skipped = self.refills = self.cuts = 0

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        assert store is not None and self.table is not None
        self.heads = store.table(f"{self.name}.heads", "point")
        self.cache = HeadCache(store, self.cache_bytes)
        self.tails = PartitionTails(self.table)

    def describe(self) -> str:
        s = (
            f"TopK (columnar): partition={list(self.partition_key)} "
            f"order={order_description(self.order_by, self.descending, self.nulls_first)}"
            f" limit={self.limit}"
        )
        if self.offset:
            s += f" offset={self.offset}"
        s += " emit_rank" if self.emit_rank else ""
        return s + (" unique_rows" if self.unique_rows else "")

    # -- the time's work ----------------------------------------------------------------------------
    def on_time_end(self, time: int) -> DiffBatch:
        """The time's input as it came: ``_changes`` consolidates it in arrays."""
        delta = DiffBatch.concat(self._pending[0])
        self._pending = [[]]
        if not delta:
            return DiffBatch()
        return self.process(time, [delta])

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        changes, prefixes, entries = self._changes(deltas[0])
        if not len(changes):
            return DiffBatch()
        ends, blobs, counts = self._lookup(prefixes)
        complete = np.fromiter(map(operator.is_, ends, repeat(None)), bool, len(ends))
        end_of = pc.fill_null(pa.array(ends, pa.large_binary()), b"")
        past = np.asarray(pc.greater(changes.rk, end_of.take(pa.array(changes.part))), bool)
        past &= ~complete[changes.part]
        active = np.zeros(len(prefixes), bool)
        active[changes.part[~past]] = True
        self.skipped += len(prefixes) - int(active.sum())
        pi = np.flatnonzero(past)
        beyond = changes.take(pi)
        tail = TailChanges(
            beyond.part, beyond.rk, beyond.counts.copy(), pack_row_values(self.codec, beyond.rows),
            entries.of(pi),
        )  # fmt: skip
        out = DiffBatch()
        act = np.flatnonzero(active)
        if len(act):
            heads = self._heads(act, prefixes, ends, blobs, counts)
            at = np.flatnonzero(~past)
            out = self._merge(act, heads, changes.take(at), entries.of(at), tail, prefixes, ends)
        tail.stage(self.table)
        unread = np.fromiter(map(operator.is_, blobs, repeat(None)), bool, len(blobs))
        misses = np.flatnonzero(~active & unread).tolist()
        self.cache.put_many(
            [prefixes[j] for j in misses], [ends[j] for j in misses], [None] * len(misses),
            [0] * len(misses),
        )  # fmt: skip
        return out

    def _changes(self, delta: DiffBatch) -> tuple[KeyedRows, list[bytes], Entries]:
        """The delta consolidated by ``P | rk``, ordered so, as records; the partition prefixes;
        the changed rows' entries, read in the background from the moment their keys are known
        (those of the changes past the heads are read while the heads are merged; those of the
        others too, which are few)."""
        cols, nans = codec_columns(delta, self.codec.types)
        n = len(delta)

        def pick(idx):
            return [cols[i] for i in idx], [nans[i] for i in idx]

        pcols, pnans = pick(self.partition_key)
        flags = [pa.array(m) for m in pnans if m is not None]  # numeric NaN apart from NULL
        code, first_row = K.group_index(pcols + flags, n)
        # partitions numbered in the byte order of their prefixes: heads read, and tails
        # written, in RocksDB's order
        at = pa.array(first_row, pa.int64())
        all_prefixes = partition_bytes(
            [c.take(at) for c in pcols], [None if m is None else m[first_row] for m in pnans],
            len(first_row),
        )  # fmt: skip
        by_prefix, rank = K.byte_order(all_prefixes)
        code = rank[code]
        all_prefixes = all_prefixes.take(by_prefix)
        sortable = sortable_bytes(*pick(self.order_by), self.descending, self.nulls_first)
        identity = identity_bytes(*pick(self.payload), n)
        rk = pc.binary_join_element_wise(sortable, identity, b"")
        order = np.asarray(
            pc.sort_indices(
                pa.table({"p": code, "k": rk}), [("p", "ascending"), ("k", "ascending")]
            ),
            np.int64,
        )  # stable: a row's first occurrence comes first
        sorted_rk = rk.take(pa.array(order))
        sorted_keys = pc.binary_join_element_wise(
            all_prefixes.take(pa.array(code[order])), sorted_rk, b""
        ).to_pylist()
        reading = None if self.unique_rows else self.table.get_many_ahead(sorted_keys)
        new_part = np.ones(n, bool)
        new_part[1:] = code[order[1:]] != code[order[:-1]]
        starts = np.flatnonzero(_breaks(sorted_rk) | new_part)
        w = np.add.reduceat(np.asarray(delta.column_weights, np.int64)[order], starts)
        firsts = starts[w != 0]
        keep = order[firsts]
        w = w[w != 0]
        kept_code = code[keep]
        new_part = np.ones(len(keep), bool)
        new_part[1:] = kept_code[1:] != kept_code[:-1]
        part = np.cumsum(new_part) - 1
        take = pa.array(keep, pa.int64())
        rows = self.codec.encode(
            [c.take(take) for c in cols], [None if m is None else m[keep] for m in nans], w, False
        )
        prefixes = all_prefixes.take(pa.array(kept_code[new_part])).to_pylist()
        changes = KeyedRows(part, rk.take(take).cast(pa.large_binary()), rows)
        return changes, prefixes, Entries(sorted_keys, reading, firsts)

    def _lookup(self, prefixes: list[bytes]):
        """Per partition: head end, packed head (None: not in memory), rows in it."""
        cached = self.cache.get_many(prefixes)
        miss = [j for j, c in enumerate(cached) if c is None]
        if miss:
            raws = self.heads.get_many([prefixes[j] for j in miss])
            for j, raw in zip(miss, raws, strict=True):
                cached[j] = (decode_meta(raw), None, 0)
        if not cached:
            return [], [], []
        ends, blobs, counts = map(list, zip(*cached, strict=True))  # one C-level transpose
        return ends, blobs, counts

    def _heads(self, act, prefixes, ends, blobs, counts) -> KeyedRows:
        """The committed head rows of the active partitions ``act`` (partition = touched index):
        from the cache, else read from state up to the head's end."""
        have = [j for j in act.tolist() if blobs[j] is not None]
        parts = []
        if have:
            n = np.array([counts[j] for j in have], np.int64)
            h = unpack_heads(self.codec, [blobs[j] for j in have], n)
            h.part = np.asarray(have, np.int64)[h.part]
            parts.append(h)
        for j in act.tolist():
            if blobs[j] is None:
                parts.append(self._scanned(j, self.tails.scan(prefixes[j], b"", until=ends[j])))
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return _no_rows(self.codec)
        heads = KeyedRows.concat(parts)
        return heads.take(K.stable_order(heads.part, len(prefixes)))

    def _scanned(self, j: int, scan: Scan) -> KeyedRows:
        """A scan's rows as partition ``j``'s KeyedRows."""
        rows = scan.rows
        return KeyedRows(
            np.full(len(rows), j, np.int64),
            pa.array([r[0] for r in rows], pa.large_binary()),
            unpack_rows(self.codec, [r[2] for r in rows]),
        )

    def _merge(self, act, heads, inside, inside_entries, tail, prefixes, ends):
        """Merge the active partitions' heads with their in-head changes, refill short heads,
        stage the writes, cut long heads, update the cache; returns the selections' change.

        The merged rows stay indices (``src``) into the heads and changes (``both``) with
        their partition and old and new counts; rows are taken once, for what needs them.
        Returns the output."""
        nh = len(heads)
        both = KeyedRows.concat([heads, inside])
        tag = np.concatenate([np.zeros(nh, np.int8), np.ones(len(inside), np.int8)])
        table = pa.table({"p": both.part, "k": both.rk, "t": tag})
        o = np.asarray(
            pc.sort_indices(table, [("p", "ascending"), ("k", "ascending"), ("t", "ascending")]),
            np.int64,
        )
        ps = both.part[o]
        pair = ~_breaks(both.rk.take(pa.array(o)))  # a change right after the head row it changes
        pair[1:] &= ps[1:] == ps[:-1]
        lead = np.flatnonzero(~pair)
        last = np.append(lead[1:] - 1, len(o) - 1)
        h_at, c_at = o[lead], o[last]
        has_h, has_c = h_at < nh, c_at >= nh
        counts = both.counts
        old = np.where(has_h, counts[h_at], 0)
        new = old + np.where(has_c, counts[c_at], 0)
        src = np.where(has_h, h_at, c_at)
        part = ps[lead]
        keys = inside_entries.keys_of(c_at[has_c] - nh)  # a changed row's key is its change's
        self._stage_merged(both, src[has_c], keys, new[has_c], has_h[has_c])
        new_ends = list(ends)
        refills, moved = self._refill(act, part, new, tail, prefixes, new_ends)
        if refills:
            n0 = len(both)
            both = KeyedRows.concat([both, *refills])
            extra = np.arange(n0, len(both))
            src = np.concatenate([src, extra])
            part = np.concatenate([part, both.part[extra]])
            old = np.concatenate([old, np.zeros(len(extra), np.int64)])
            new = np.concatenate([new, both.counts[extra]])
            order = K.stable_order(part, len(prefixes))
            src, part, old, new = src[order], part[order], old[order], new[order]
        out, start = self._output(both.rows, src, part, old, new)
        self._cut_and_cache(act, both, src, part, new, start, prefixes, ends, new_ends, moved)
        return out

    def _stage_merged(self, both: KeyedRows, src, keys, new, had) -> None:
        """Writes of the changed head rows: each row's one entry (``keys``) rewritten with its
        new count (``src``: the rows in ``both``, ``had``: whether the row had an entry)."""
        if not len(src):
            return
        live = new != 0
        self.table.delete_many(K.pick(keys, np.flatnonzero(~live & had)))
        put = np.flatnonzero(live)
        records = both.rows.take(src[put])
        records.rec["w"] = new[put]
        self.table.put_many(K.pick(keys, put), pack_row_values(self.codec, records))

    def _refill(self, act, part, new, tail, prefixes, ends):
        """Heads left below offset+limit live positions read on into their tails; returns the
        rows read and the partitions whose head end moved."""
        live = sel.live_totals(part, new, len(prefixes))
        out: list[KeyedRows] = []
        short = act[live[act] < self.hi].tolist()
        moved = []
        for j in short:
            if ends[j] is None:
                continue
            moved.append(j)
            items, idx = tail.of(j)
            scan = self.tails.scan(
                prefixes[j], ends[j] + AFTER_ROW, items,
                live_target=self.hi + self.slack, live_before=int(live[j]),
            )  # fmt: skip
            tail.consume(idx, scan.consumed)
            self.refills += 1
            ends[j] = None if scan.ended else scan.last
            if scan.rows:
                out.append(self._scanned(j, scan))
        return out, moved

    def _output(self, rows: Rows, src, part, old, new) -> tuple[DiffBatch, np.ndarray]:
        """The change of the merged partitions' selections (rows ``rows[src]``, ordered by
        partition and position, with their old and new counts), and each row's new live start."""
        lo, hi = self.offset, self.hi
        old_start = sel.live_starts(part, old)
        new_start = sel.live_starts(part, new)
        was, now = sel.selected(old_start, old, lo, hi), sel.selected(new_start, new, lo, hi)
        if not self.emit_rank:
            diff = now - was
            idx = np.flatnonzero(diff)
            return self._rows(rows, src[idx], diff[idx], None), new_start
        ro, rank_o = sel.ranked(old_start, was, lo)
        rn, rank_n = sel.ranked(new_start, now, lo)
        code = np.concatenate([ro * (hi + 1) + rank_o, rn * (hi + 1) + rank_n])
        sign = np.concatenate([np.full(len(ro), -1, np.int64), np.ones(len(rn), np.int64)])
        uniq, inv = np.unique(code, return_inverse=True)
        total = np.bincount(inv.reshape(-1), weights=sign, minlength=len(uniq)).astype(np.int64)
        k = np.flatnonzero(total)
        out = self._rows(rows, src[uniq[k] // (hi + 1)], total[k], uniq[k] % (hi + 1))
        return out, new_start

    def _rows(self, rows: Rows, idx, weights, ranks) -> DiffBatch:
        if not len(idx):
            return DiffBatch()
        cols, nans = self.codec.arrays(rows.take(idx))
        if ranks is not None:
            cols.append(pa.array(ranks, pa.int64()))
        if nans:
            return DiffBatch(python_rows(cols, nans), np.asarray(weights).tolist())
        return DiffBatch.from_columns(cols, np.asarray(weights, np.int64))

    def _cut_and_cache(
        self, act, both, src, part, new, start, prefixes, ends, new_ends, moved
    ) -> None:
        """Cut heads past offset+limit+2*slack back to offset+limit+slack live positions, stage
        the head ends that moved, and cache the new heads."""
        live = sel.live_totals(part, new, len(prefixes))
        long_ = live > self.hi + 2 * self.slack  # only active partitions have rows here
        keep = new != 0
        if long_.any():
            keep &= ~long_[part] | (start < self.hi + self.slack)
        kept = np.flatnonzero(keep)
        heads = both.take(src[kept])
        heads.rows.rec["w"] = new[kept]
        cut = np.flatnonzero(long_).tolist()
        self.cuts += len(cut)
        if cut:
            last = np.flatnonzero(np.append(heads.part[1:] != heads.part[:-1], True))
            at = last[long_[heads.part[last]]]
            for j, rk in zip(cut, heads.rk.take(pa.array(at)).to_pylist(), strict=True):
                new_ends[j] = rk
        for j in set(moved + cut):
            if new_ends[j] != ends[j]:
                if new_ends[j] is None:
                    self.heads.delete(prefixes[j])
                else:
                    self.heads.put(prefixes[j], encode_meta(new_ends[j]))
        index = np.zeros(len(prefixes), np.int64)
        index[act] = np.arange(len(act))
        heads.part = index[heads.part]
        packed = pack_heads(self.codec, heads, len(act))
        rows_in = np.bincount(heads.part, minlength=len(act)).tolist()
        acts = act.tolist()
        self.cache.put_many(
            [prefixes[j] for j in acts], [new_ends[j] for j in acts], packed, rows_in
        )


def _breaks(values: pa.Array) -> np.ndarray:
    """Where a sorted binary array's value differs from the one before (True at 0)."""
    n = len(values)
    out = np.ones(n, bool)
    if n > 1:
        out[1:] = ~np.asarray(pc.equal(values.slice(1), values.slice(0, n - 1)), bool)
    return out


def _no_rows(codec: RowCodec) -> KeyedRows:
    return KeyedRows(np.zeros(0, np.int64), pa.array([], pa.large_binary()), codec.empty())
