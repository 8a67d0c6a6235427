"""ColumnarInnerJoinCollection: the inner equi-join computed on Arrow columns, a time at a time.

The same answer as ``InnerJoinCollection`` (``left_row + right_row`` with weight ``wl * wr`` for
every pair whose key columns are equal under SQL equality, a NULL key never matching, and whose
residual is exactly True), without a Python object per row on the common path:

1. each side's delta becomes Arrow columns (converted once if it came as rows) and records of
   ``row_block.RowCodec`` with a 64-bit hash of each row's values; rows with a NULL key go;
2. key columns are normalized to one Arrow type per key column (int4 = int8, 1.0 = 1.00: numerics
   rescaled to a common scale, floats with one NaN and one zero), numbered with a vectorized
   group-by, and their state entries (one per join key, both sides' rows in one row block, as
   ``state.arrangement.key_entry`` names them) are read with one ``get_many``;
3. per side, the stored rows and the delta rows are grouped by hash (values compared where rows
   meet; a hash collision falls back to an exact group-by), giving each distinct row its old,
   delta and new weight;
4. the output ``ΔA⋈B' + A⋈ΔB`` (= ``ΔA⋈B + A⋈ΔB + ΔA⋈ΔB``) is two vectorized hash joins of key
   ids, taken from the records as Arrow columns; a residual runs over those pairs as rows (its
   errors become errs diffs weighted like the pair);
5. the changed keys' new row blocks are staged in the store's write batch.

``supports`` says when the column and key types allow it; the physical planner falls back to the
row join otherwise. A key whose entry would hold more than ``hot_rows`` rows becomes hot: its
rows move to entries of their own, one per row, column-wise (``columnar.hot_rows``); a side of a
hot key is read where the other side changed and joins as any key's stored rows. The outer and
semi joins, which track matches, hand hot keys to the row join's arrangement instead
(``columnar.hot_join_keys``), where an inner join's state from before ``hot_rows`` also has them.
It keeps nothing in memory between times (state is only the tables), and reads only committed
state.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.join import KeyedJoinCollection, describe_join
from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar.codec_columns import codec_columns, python_rows
from engine.dataflow.columnar.hot_join_keys import HOT, HotKeys
from engine.dataflow.columnar.hot_rows import ROW_ENTRIES, HotRows
from engine.dataflow.columnar.row_block import (
    ENTRY_HEADER,
    RowCodec,
    Rows,
    column_kind,
    pack_entries,
    unpack_entries,
)
from engine.dataflow.errs import BatchFn, evaluate
from engine.dataflow.state.arrangement import KEYS
from engine.dataflow.state.entry_cache import EntryCache
from engine.dataflow.state.store import StateStore

_NUMBERS = frozenset({"i8", "n8", "n16"})


def key_type(a: pa.DataType | None, b: pa.DataType | None) -> pa.DataType | None:
    """The one Arrow type both sides' values of a key column are compared in, or None.

    >>> key_type(pa.int64(), pa.decimal128(15, 2))
    Decimal128Type(decimal128(38, 2))
    >>> key_type(pa.float64(), pa.int64()) is None
    True
    """
    ka = column_kind(a) if a is not None else None
    kb = column_kind(b) if b is not None else None
    if ka is None or kb is None:
        return None
    if ka in _NUMBERS and kb in _NUMBERS:
        if ka == kb == "i8":
            return pa.int64()
        scale = max(getattr(a, "scale", 0), getattr(b, "scale", 0))
        digits = max(19 if k == "i8" else t.precision - t.scale for k, t in ((ka, a), (kb, b)))
        return pa.decimal128(38, scale) if digits + scale <= 38 else None
    if ka != kb:
        return None
    if ka == "f8":
        return pa.float64()
    if ka == "s":
        return pa.string()
    return a if a == b else None


def supports(
    left_types: Sequence[pa.DataType | None],
    right_types: Sequence[pa.DataType | None],
    left_key: Sequence[int],
    right_key: Sequence[int],
) -> bool:
    """Whether ``ColumnarInnerJoinCollection`` joins inputs of these Arrow column types (None:
    no Arrow type) on these key columns."""
    if not left_key or len(left_key) != len(right_key):
        return False
    if any(t is None or column_kind(t) is None for t in [*left_types, *right_types]):
        return False
    return all(
        key_type(left_types[i], right_types[j]) is not None
        for i, j in zip(left_key, right_key, strict=True)
    )


class Unkeyed:
    """The rows ``at`` of a delta's columns (numeric NaN masks, weights): its rows with a NULL in
    a key column, which never match."""

    __slots__ = ("columns", "nans", "weights")

    def __init__(
        self, columns: list[pa.Array], nans: list[np.ndarray | None], weights: np.ndarray, at
    ) -> None:
        sel = pa.array(at)
        self.columns = [c.take(sel) for c in columns]
        masks = {i: m[at] for i, m in enumerate(nans) if m is not None}
        self.nans = {i: m for i, m in masks.items() if m.any()}
        self.weights = weights[at]


class Side:
    """One side's rows around a time and their old/delta/new weights: distinct rows, or for an
    insert-only delta the stored and the new rows as they are (``_merge``)."""

    __slots__ = ("rows", "kid", "old", "delta", "new")

    def __init__(self, rows: Rows, kid: np.ndarray, old: np.ndarray, delta: np.ndarray) -> None:
        self.rows, self.kid, self.old, self.delta = rows, kid, old, delta
        self.new = old + delta


class ColumnarInnerJoinCollection(KeyedJoinCollection):
    """Key column indices per side, the Arrow type of every column of each side, a residual."""

    takes_columns = True

    #: a key whose entry would hold more rows (both sides) moves to the row arrangement
    hot_rows = 128

    def __init__(
        self,
        left_key: Sequence[int],
        right_key: Sequence[int],
        left_types: Sequence[pa.DataType],
        right_types: Sequence[pa.DataType],
        residual: BatchFn | None = None,
        description: str = "",
        cache_bytes: int = 64 << 20,
    ) -> None:
        super().__init__(left_key, right_key, residual, description)
        self.cache_bytes = cache_bytes
        if not supports(left_types, right_types, self.left_key, self.right_key):
            raise ValueError(f"ColumnarInnerJoinCollection cannot compute {self.describe()}")
        self.codecs = (RowCodec(left_types), RowCodec(right_types))
        self.key_types = [
            key_type(left_types[i], right_types[j])
            for i, j in zip(self.left_key, self.right_key, strict=True)
        ]

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        self.entries = EntryCache(self.table, self.cache_bytes)
        hot = store.table(f"{self.name}.hot", self.tuning)  # type: ignore[union-attr]
        self.hot = HotKeys(
            hot,
            self.codecs,
            self.left_key,
            self.right_key,
            self.residual,
            *self.tracked_sides,
            pairs=self.hot_pairs,
        )
        self.hot_entries = HotRows(hot, self.codecs)

    #: whether the output pads unmatched left rows, and unmatched right rows (an outer join's)
    padded_sides: tuple[bool, bool] = (False, False)
    #: whether the hot keys' arrangement builds the time's pairs (a semi join outputs none)
    hot_pairs = True

    @property
    def tracked_sides(self) -> tuple[bool, bool]:
        """The sides whose rows' match state the hot keys' arrangement tracks."""
        return self.padded_sides

    @property
    def keeps_hot_rows(self) -> bool:
        """Whether keys that become hot keep their rows here, column-wise (``columnar.hot_rows``:
        an inner join's), rather than in the row join's arrangement (``columnar.hot_join_keys``:
        the outer and semi joins', which track matches there)."""
        return self.hot_pairs and not any(self.tracked_sides)

    def describe(self) -> str:
        return describe_join(
            "InnerJoin (columnar)", self.left_key, self.right_key, self.residual, self.description
        )

    # -- the time's work ----------------------------------------------------------------------------
    def on_time_end(self, time: int) -> DiffBatch:
        """The time's input as it came: consolidation happens on the records (step 3)."""
        deltas = [DiffBatch.concat(p) for p in self._pending]
        self._pending = [[], []]
        if not any(deltas):
            return DiffBatch()
        return self.process(time, deltas)

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        lc, rc = self.codecs
        lrows, lkeys, lnulls = self._delta(deltas[0], lc, self.left_key)
        rrows, rkeys, rnulls = self._delta(deltas[1], rc, self.right_key)
        parts = self._null_keys(lnulls, rnulls)
        nl = len(lrows)
        if not nl and not len(rrows):
            return DiffBatch.concat(parts)
        keycols = [pa.concat_arrays([a, b]) for a, b in zip(lkeys, rkeys, strict=True)]
        ids, rank, heads = entry_keys(keycols)
        nk = len(heads)
        at, packed, hot, rowwise = _entry_kinds(self.entries.get_many(heads))
        lkid, rkid = rank[ids[:nl]], rank[ids[nl:]]
        if hot.any():  # the changes to hot keys go the row join's way
            lh, rh = hot[lkid], hot[rkid]
            parts.append(
                self._hot_step(lrows.take(np.flatnonzero(lh)), rrows.take(np.flatnonzero(rh)))
            )
            lrows, lkid = lrows.take(np.flatnonzero(~lh)), lkid[~lh]
            rrows, rkid = rrows.take(np.flatnonzero(~rh)), rkid[~rh]
        sl, sle, sr, sre = unpack_entries(lc, rc, packed)
        slk, srk = at[sle], at[sre]
        if rowwise.any():
            sl, slk, sr, srk = self._rowwise_keys(
                heads, rowwise, (sl, slk, sr, srk), (lrows, lkid, rrows, rkid)
            )
        left = _merge(lc, sl, slk, lrows, lkid)
        right = self._right_side(sr, srk, rrows, rkid, nk)
        parts[:0] = [self._pairs(left, right, nk), *self._unmatched(left, right, nk)]
        present = np.zeros(nk, bool)
        present[at] = True
        self._stage(heads, present, left, right, nk, rowwise)
        return DiffBatch.concat(parts)

    # -- what an outer join adds (``ColumnarOuterJoinCollection``) ----------------------------------
    def _null_keys(self, left: Unkeyed | None, right: Unkeyed | None) -> list[DiffBatch]:
        """The output of the delta rows with a NULL key (an inner join has none)."""
        return []

    def _unmatched(self, left: Side, right: Side, nk: int) -> list[DiffBatch]:
        """The change of the rows without a match (an inner join outputs none)."""
        return []

    def _right_side(
        self, stored: Rows, skid: np.ndarray, delta: Rows, dkid: np.ndarray, nk: int
    ) -> Side:
        """The right side's distinct rows around the time (a semi join needs one per key)."""
        return _merge(self.codecs[1], stored, skid, delta, dkid)

    def _rowwise_keys(
        self,
        heads: list[bytes],
        rowwise: np.ndarray,
        stored: tuple[Rows, np.ndarray, Rows, np.ndarray],
        delta: tuple[Rows, np.ndarray, Rows, np.ndarray],
    ) -> tuple[Rows, np.ndarray, Rows, np.ndarray]:
        """The keys ``rowwise`` keep their rows as entries of their own (``columnar.hot_rows``):
        the committed rows of a side where the other side changed join as any key's stored rows
        (added to ``stored``: left rows and key ids, right rows and key ids); the delta rows
        (``delta``, the same four) are staged into their row entries."""
        sl, slk, sr, srk = stored
        lrows, lkid, rrows, rkid = delta
        dl, dr = rowwise[lkid], rowwise[rkid]
        hl, hlk = self.hot_entries.read(heads, 0, np.unique(rkid[dr]))
        hr, hrk = self.hot_entries.read(heads, 1, np.unique(lkid[dl]))
        self.hot_entries.stage(heads, 0, lrows.take(np.flatnonzero(dl)), lkid[dl])
        self.hot_entries.stage(heads, 1, rrows.take(np.flatnonzero(dr)), rkid[dr])
        return (
            Rows.concat([sl, hl]),
            np.concatenate([slk, hlk]),
            Rows.concat([sr, hr]),
            np.concatenate([srk, hrk]),
        )

    def _hot_step(self, left: Rows, right: Rows) -> DiffBatch:
        """The output of the changes to hot keys (weights in the records)."""
        pairs, errs = self.hot.pairs(left, right)
        self.report_errors(errs)
        return pairs

    def _delta(self, batch: DiffBatch, codec: RowCodec, key: tuple[int, ...]):
        """The batch's rows with a NULL-free key as records, their normalized key columns, and
        the rows with a NULL key (None when there is none)."""
        columns, nans = codec_columns(batch, codec.types)
        weights = batch.column_weights
        valid = None
        for i in key:
            col = columns[i]
            if col.null_count:
                ok = np.asarray(pc.is_valid(col), dtype=bool)
                if nans[i] is not None:
                    ok |= nans[i]
                valid = ok if valid is None else valid & ok
        nulls = None
        if valid is not None and not valid.all():
            nulls = Unkeyed(columns, nans, weights, np.flatnonzero(~valid))
            idx = np.flatnonzero(valid)
            sel = pa.array(idx)
            columns = [c.take(sel) for c in columns]
            nans = [None if m is None else m[idx] for m in nans]
            weights = weights[idx]
        rows = codec.encode(columns, nans, weights)
        # NULL keys are gone: a NULL left in a key column is a numeric NaN (equal to NaN)
        keys = [columns[i].cast(t) for i, t in zip(key, self.key_types, strict=True)]
        return rows, keys, nulls

    def _pairs(self, left: Side, right: Side, nk: int) -> DiffBatch:
        """``ΔA⋈B' + A⋈ΔB`` of the time as a columnar batch (as rows when a numeric NaN is in it)."""
        parts = []
        for a, aw, b, bw in (
            (left, left.delta, right, right.new),
            (left, left.old, right, right.delta),
        ):
            ia, ib = np.flatnonzero(aw), np.flatnonzero(bw)
            if len(ia) and len(ib):
                pa_, pb = K.join_pairs(a.kid[ia], b.kid[ib], nk)
                parts.append((ia[pa_], ib[pb], aw[ia[pa_]] * bw[ib[pb]]))
        if not parts:
            return DiffBatch()
        li = np.concatenate([p[0] for p in parts])
        ri = np.concatenate([p[1] for p in parts])
        w = np.concatenate([p[2] for p in parts])
        lcols, lnans = self.codecs[0].arrays(left.rows.take(li))
        rcols, rnans = self.codecs[1].arrays(right.rows.take(ri))
        columns = lcols + rcols
        nans = {**lnans, **{len(lcols) + i: m for i, m in rnans.items()}}
        if self.residual is None and not nans:
            return DiffBatch.from_columns(columns, w)
        rows = python_rows(columns, nans)
        if self.residual is None:
            return DiffBatch(rows, w.tolist())
        results, ok, errs = evaluate(self.residual, DiffBatch(rows, list(range(len(rows)))))
        if errs:
            self.report_errors(DiffBatch(errs.rows, [int(w[i]) for i in errs.weights]))
        keep = np.asarray(
            [i for i, m in zip(ok.weights, results, strict=True) if m is True], np.int64
        )
        if nans:
            return DiffBatch([rows[i] for i in keep.tolist()], w[keep].tolist())
        sel = pa.array(keep)
        return DiffBatch.from_columns([c.take(sel) for c in columns], w[keep])

    def _stage(
        self,
        heads: list[bytes],
        present: np.ndarray,
        left: Side,
        right: Side,
        nk: int,
        rowwise: np.ndarray,
    ) -> None:
        """Stage the new row blocks of the keys whose rows changed (deletes for emptied keys),
        but for the keys ``rowwise`` (already staged); keys that grow past ``hot_rows`` rows
        become hot instead."""
        changed = np.zeros(nk, bool)
        changed[left.kid[left.delta != 0]] = True
        changed[right.kid[right.delta != 0]] = True
        changed &= ~rowwise
        lives = [np.flatnonzero(side.new != 0) for side in (left, right)]
        total = np.bincount(left.kid[lives[0]], minlength=nk)
        total += np.bincount(right.kid[lives[1]], minlength=nk)
        promote = changed & (total > self.hot_rows)
        if promote.any():
            moved = [v[promote[s.kid[v]]] for s, v in zip((left, right), lives, strict=True)]
            if self.keeps_hot_rows:
                for i, (s, v) in enumerate(zip((left, right), moved, strict=True)):
                    self.hot_entries.load(heads, i, s.rows.take(v), s.kid[v], s.new[v])
                mark = ROW_ENTRIES
            else:
                self.hot.promote(
                    left.rows.take(moved[0]), left.new[moved[0]],
                    right.rows.take(moved[1]), right.new[moved[1]],
                )  # fmt: skip
                mark = HOT
            for i in np.flatnonzero(promote).tolist():
                self.entries.put(heads[i], mark)
            changed &= ~promote
        blocks = []
        counts = []
        for side, live in zip((left, right), lives, strict=True):
            live = live[changed[side.kid[live]]]
            live = live[K.stable_order(side.kid[live], nk)]
            rows = side.rows.take(live)
            rows.rec["w"] = side.new[live]
            blocks.append(rows)
            counts.append(np.bincount(side.kid[live], minlength=nk))
        nonempty = (counts[0] + counts[1]) > 0
        put = np.flatnonzero(changed & nonempty)
        if len(put):
            values = pack_entries(
                self.codecs[0], blocks[0], counts[0][put], self.codecs[1], blocks[1], counts[1][put]
            )
            keys = heads if len(put) == nk else [heads[i] for i in put.tolist()]
            self.entries.put_many(keys, values)
        gone = np.flatnonzero(changed & ~nonempty & present).tolist()
        if gone:
            self.entries.delete_many([heads[i] for i in gone])


def entry_keys(keycols: list[pa.Array]) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """The state keys of the distinct join keys among the rows of ``keycols`` (normalized key
    columns): each row's key id, each id's rank in byte order, and the keys in that order (=
    ``key_entry(key bytes)``; sorted keys read faster)."""
    ids, first = K.group_index(keycols)
    sel = pa.array(first)
    entries = K.length_prefixed(KEYS, K.key_bytes_array([c.take(sel) for c in keycols]))
    order, rank = K.byte_order(entries)
    return ids, rank, entries.take(order).to_pylist()


def _entry_kinds(
    raws: list[bytes | None],
) -> tuple[np.ndarray, list[bytes], np.ndarray, np.ndarray]:
    """The keys holding a packed entry (their indices, and the entries), and the masks of the
    hot keys: in the row arrangement (``HOT``) and kept row-wise (``ROW_ENTRIES``). A marker is
    shorter than a packed entry's header: two C loops over the keys (``is not None``, ``len``)."""
    nk = len(raws)
    at = np.flatnonzero(np.fromiter(map(operator.is_not, raws, repeat(None)), bool, nk))
    packed = list(map(raws.__getitem__, at.tolist()))
    hot, rowwise = np.zeros(nk, bool), np.zeros(nk, bool)
    short = np.flatnonzero(np.fromiter(map(len, packed), np.int64, len(packed)) < ENTRY_HEADER)
    if not len(short):
        return at, packed, hot, rowwise
    for j in short.tolist():
        mark = packed[j]
        if mark == HOT:
            hot[at[j]] = True
        elif mark == ROW_ENTRIES:
            rowwise[at[j]] = True
        else:
            raise ValueError(f"a join key's state entry holds {mark!r}")
    keep = np.ones(len(packed), bool)
    keep[short] = False
    return at[keep], [packed[j] for j in np.flatnonzero(keep).tolist()], hot, rowwise


def key_totals(kid: np.ndarray, weights: np.ndarray, nk: int) -> np.ndarray:
    """The sum of ``weights`` per key id (exact integers)."""
    out = np.zeros(nk, np.int64)
    np.add.at(out, kid, weights)
    return out


def _merge(codec: RowCodec, stored: Rows, skid: np.ndarray, delta: Rows, dkid: np.ndarray) -> Side:
    """The rows of ``stored`` (the keys' committed rows) and ``delta`` (any rows), each with its
    key id, old weight (stored) and delta weight: grouped into distinct rows (``_grouped``),
    except for an insert-only delta, whose rows are taken as they come, each its own record.
    Equal rows then stay separate records in a key's entry (copies in a table without a primary
    key, a row inserted again): the same multiset, as every use of a side sums the weights of
    its rows, and the next time that retracts rows at the key groups them all. Sorting 100k
    rows' hashes to find the equal ones was most of a population's merge (TPC-H SF 1: Q5
    ~1.1 s, Q3 ~0.8 s)."""
    w = np.ascontiguousarray(delta.rec["w"])
    if not len(delta) or w.min() <= 0:
        return _grouped(codec, stored, skid, delta, dkid)
    ns = len(stored)
    if not ns:
        return Side(delta, dkid, np.zeros(len(delta), np.int64), w)
    return Side(
        Rows.concat([stored, delta]),
        np.concatenate([skid, dkid]),
        np.concatenate([np.ascontiguousarray(stored.rec["w"]), np.zeros(len(delta), np.int64)]),
        np.concatenate([np.zeros(ns, np.int64), w]),
    )


def _grouped(
    codec: RowCodec, stored: Rows, skid: np.ndarray, delta: Rows, dkid: np.ndarray
) -> Side:
    """The distinct rows of ``stored`` and ``delta``, each with its key id, old weight (stored)
    and delta weight (summed)."""
    ns = len(stored)
    rows = Rows.concat([stored, delta]) if ns else delta
    kid = np.concatenate([skid, dkid]) if ns else dkid
    n = len(rows)
    h = np.ascontiguousarray(rows.rec["h"])
    o = np.argsort(h)  # numpy's SIMD sort, ~5x a stable one; equal hashes in any order
    hs = h[o]
    start = np.ones(n, bool)
    start[1:] = hs[1:] != hs[:-1]
    g = np.cumsum(start) - 1
    gid = np.empty(n, np.int64)
    gid[o] = g
    # a group's representative is its first row: a stored row when it has one
    reps = np.minimum.reduceat(o, np.flatnonzero(start)) if n else o
    member = np.flatnonzero(o != reps[g])
    if len(member):
        a, b = o[member], reps[g[member]]
        same = _same_rows(rows, a, b) & (kid[a] == kid[b])
        if not same.all():  # a hash collision (or -0.0 / NaN spellings): group those exactly
            gid, reps = _exact_groups(codec, rows, kid, gid, np.unique(g[member[~same]]))
    ng = len(reps)
    w = np.ascontiguousarray(rows.rec["w"])  # aligned: ufunc.at is ~8x slower on the packed field
    old = np.zeros(ng, np.int64)
    np.add.at(old, gid[:ns], w[:ns])
    dw = np.zeros(ng, np.int64)
    np.add.at(dw, gid[ns:], w[ns:])
    return Side(rows.take(reps), kid[reps], old, dw)


def _same_rows(rows: Rows, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether rows ``a[i]`` and ``b[i]`` hold the same values (records past the weight, text)."""
    raw = rows.rec.view(np.uint8).reshape(len(rows.rec), -1)[:, 8:]
    same = (raw[a] == raw[b]).all(axis=1)
    if rows.strs:
        ia, ib = pa.array(a), pa.array(b)
        for s in rows.strs:
            same &= np.asarray(pc.equal(s.take(ia), s.take(ib)), dtype=bool)
    return same


def _exact_groups(
    codec: RowCodec, rows: Rows, kid: np.ndarray, gid: np.ndarray, bad: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``gid`` with the hash groups ``bad`` split by value (SQL equality: ``group_index``);
    returns the group of each row and each group's first row, groups renumbered."""
    sel = np.flatnonzero(np.isin(gid, bad))
    cols, nans = codec.arrays(rows.take(sel))
    flags = [pa.array(rows.rec["f"][sel, i]) for i in range(len(codec.types))]
    exact, _ = K.group_index([*cols, *flags, pa.array(kid[sel])])
    labels = gid.copy()
    labels[sel] = int(gid.max(initial=-1)) + 1 + exact
    return K.group_index([pa.array(labels)])
