"""Per group, the multiset of an argument's values in RocksDB: min, max and count(DISTINCT).

A min or max cannot be kept as a running sum: when the current extreme is deleted, the next one
must come from the values still there. ``ValueCounts`` keeps, for one (argument, FILTER) slot of
a reduce, one state entry per (group, distinct value): key = the group's key bytes + ``0xfe`` +
the slot + 16 bytes whose byte order is the value order, value = the value's count (int64, no
pickle). Every value is a signed 128-bit integer (``wide_column``, ``wide_exact``): integers as themselves,
dates and timestamps as their integer storage, numerics as their unscaled integer at the
column's scale, and numeric ``-Infinity`` / ``Infinity`` / ``NaN`` as sentinels past every
decimal128 value, in Postgres' order (NaN above everything).

A time (``step``) consolidates the delta per (group, value) with one sort, reads the touched
entries with one ``get_many``, stages the new counts, and computes each group's new extreme from
its old one (kept by the caller in the group's record): the old extreme if it survives, or a
touched value that beats it; only a group whose extreme was deleted reads further, with one
iterator seek from the old extreme. count(DISTINCT) changes by the values whose count rose from
zero less those that fell to it. Group keys are self-delimiting (``kernels.key_bytes``), so a
group's entries never share a prefix with another group's, nor with any group's record key.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.aggregates import EXACT
from engine.dataflow.columnar import kernels as K
from engine.dataflow.nan import NUMERIC_NAN
from engine.dataflow.state.store import StateTable

_SIGN = np.uint64(1 << 63)
_MARK = b"\xfe"
_NO_COUNT = bytes(8)
#: numeric sentinels as 128-bit integers (decimal128 values stay within +-10**38 < 2**127)
NAN_INT = (1 << 127) - 1
POS_INF_INT = (1 << 127) - 2
NEG_INF_INT = -(1 << 127)
_SPECIAL = {
    NAN_INT: NUMERIC_NAN,
    POS_INF_INT: Decimal("Infinity"),
    NEG_INF_INT: Decimal("-Infinity"),
}


def supports(typ: pa.DataType | None) -> bool:
    """Whether min/max of a column of Arrow type ``typ`` runs here (ints, numerics of a known
    scale, dates, timestamps; floats and text stay in the row reduce)."""
    if typ is None:
        return False
    return (
        pa.types.is_integer(typ)
        or pa.types.is_decimal(typ)
        or pa.types.is_date32(typ)
        or pa.types.is_timestamp(typ)
    )


def wide_column(col: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hi int64, lo uint64, valid) of an Arrow column of a supported type."""
    valid = np.asarray(pc.is_valid(col), dtype=bool)
    if pa.types.is_decimal(col.type):
        words = np.frombuffer(col.buffers()[1], dtype="<i8", count=2 * (col.offset + len(col)))
        words = words[2 * col.offset :].reshape(-1, 2)
        hi, lo = words[:, 1].copy(), words[:, 0].view(np.uint64).copy()
        hi[~valid], lo[~valid] = 0, 0
        return hi, lo, valid
    if pa.types.is_temporal(col.type):
        col = col.view(pa.int32() if col.type.bit_width == 32 else pa.int64())
    v = np.asarray(pc.fill_null(col.cast(pa.int64()), 0), dtype=np.int64)
    return v >> 63, v.view(np.uint64), valid


def wide_exact(values: list, typ: pa.DataType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scale = typ.scale if pa.types.is_decimal(typ) else 0
    ints: list[int] = []
    for v in values:
        if v is None:
            ints.append(0)
        elif v != v:
            ints.append(NAN_INT)
        elif isinstance(v, Decimal):
            if v.is_infinite():
                ints.append(POS_INF_INT if v > 0 else NEG_INF_INT)
            else:
                i = int(v.scaleb(scale, context=EXACT))
                if not NEG_INF_INT < i < POS_INF_INT:
                    raise ValueError(f"min/max: numeric value {v} exceeds 38 digits")
                ints.append(i)
        else:
            ints.append(int(v))
    lo, hi = K.ints_to_int128(ints)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    return hi, lo, valid


def is_special(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Which 128-bit values are numeric NaN or +-Infinity."""
    top = np.iinfo(np.int64).max
    return (hi == top) | ((hi == np.iinfo(np.int64).min) & (lo == 0))


def special_value(hi: int, lo: int) -> Decimal | None:
    """The numeric NaN/Infinity a sentinel stands for (None for an ordinary value)."""
    return _SPECIAL.get((hi << 64) | lo)


def _sortable(hi: np.ndarray, lo: np.ndarray) -> bytes:
    """16 big-endian bytes per value whose byte order is the signed 128-bit order."""
    be = np.empty((len(hi), 2), dtype=">u8")
    be[:, 0] = hi.view(np.uint64) ^ _SIGN
    be[:, 1] = lo
    return be.tobytes()


def _unsortable(raw: bytes) -> tuple[int, int]:
    """(hi, lo) of a value's 16 sortable bytes."""
    hi = int.from_bytes(raw[:8], "big") ^ (1 << 63)
    return hi - (1 << 64) if hi >= 1 << 63 else hi, int.from_bytes(raw[8:], "big")


class Extreme:
    """One min or max over a slot: the old per-group extreme in, the new one out (arrays)."""

    def __init__(self, descending: bool, hi: np.ndarray, lo: np.ndarray, valid: np.ndarray) -> None:
        self.descending = descending
        self.hi, self.lo, self.valid = hi.copy(), lo.copy(), valid.copy()
        self.old_hi, self.old_lo = self.hi, self.lo  # before the time (set by ``_update``)


class ValueCounts:
    """The value multisets of one (argument, FILTER) slot of a reduce, in ``table``."""

    def __init__(self, table: StateTable, slot: int) -> None:
        self.table = table
        self.tag = _MARK + bytes([slot])

    def step(
        self,
        keys: list[bytes],
        gid: np.ndarray,
        hi: np.ndarray,
        lo: np.ndarray,
        w: np.ndarray,
        extremes: list[Extreme],
    ) -> np.ndarray:
        """Apply a time's (group, value, weight) diffs and update ``extremes`` in place; returns
        per group how many more distinct values it holds (count(DISTINCT)'s change)."""
        g, h, l_, dw = _consolidate(gid, hi, lo, w)
        prefixes = [k + self.tag for k in keys]
        raw = _sortable(h, l_)
        entry_keys = _entry_keys(prefixes, g, raw)
        stored = self.table.get_many(entry_keys)
        # a stored count is 8 bytes (never empty, so truthy); an absent entry (None) counts 0
        old = np.frombuffer(b"".join([v or _NO_COUNT for v in stored]), dtype="<i8")
        new = old + dw
        keep, drop = np.flatnonzero(new), np.flatnonzero(new == 0)
        counts = new[keep].astype("<i8").view("V8").tolist()
        self.table.put_many(K.pick(entry_keys, keep), counts)
        self.table.delete_many(K.pick(entry_keys, drop))
        alive, gone = new > 0, (new <= 0) & (old > 0)
        distinct = K.group_sums(g, len(keys), alive.astype(np.int64) - (old > 0))
        touched: set[bytes] | None = None
        for e in extremes:
            lost = _update(e, len(keys), g, h, l_, alive, gone)
            if len(lost):
                touched = set(entry_keys) if touched is None else touched
                self._seek_rest(e, lost, prefixes, touched)
        return distinct

    def _seek_rest(self, e: Extreme, lost: np.ndarray, prefixes: list[bytes], touched) -> None:
        """For groups whose extreme was deleted: the best untouched stored value, read in key
        order from the old extreme, against the best touched one."""
        it = self.table.iterator()
        step = it.prev if e.descending else it.next
        for x in lost.tolist():
            prefix = prefixes[x]
            start = prefix + _sortable(e.old_hi[x : x + 1], e.old_lo[x : x + 1])
            if e.descending:
                it.seek_for_prev(start)
            else:
                it.seek(start)
            while it.valid():
                k = it.key()
                if not k.startswith(prefix):
                    break
                if k not in touched and int.from_bytes(it.value(), "little", signed=True) > 0:
                    fh, fl = _unsortable(k[len(prefix) :])
                    if not e.valid[x] or _beats(fh, fl, int(e.hi[x]), int(e.lo[x]), e.descending):
                        e.hi[x], e.lo[x], e.valid[x] = fh, fl, True
                    break
                step()


def _entry_keys(prefixes: list[bytes], g: np.ndarray, raw: bytes) -> list[bytes]:
    """``prefixes[g[j]] + raw[16j : 16j + 16]`` for every j: by numpy rows when the prefixes
    have one length (fixed-width group keys), ~4x a Python loop at 10k values."""
    n = len(g)
    if not n or len(set(map(len, prefixes))) != 1:
        return [prefixes[x] + raw[16 * j : 16 * j + 16] for j, x in enumerate(g.tolist())]
    width = len(prefixes[0])
    heads = np.frombuffer(b"".join(prefixes), np.uint8).reshape(len(prefixes), width)
    rows = np.empty((n, width + 16), np.uint8)
    rows[:, :width] = heads[g]
    rows[:, width:] = np.frombuffer(raw, np.uint8).reshape(n, 16)
    return rows.view(f"V{width + 16}").ravel().tolist()


def _consolidate(gid, hi, lo, w):
    """The diffs summed per (group, value), sorted by group then value; zero sums dropped."""
    order = np.lexsort((lo, hi, gid))
    g, h, l_, ww = gid[order], hi[order], lo[order], w[order]
    if not len(g):
        return g, h, l_, ww
    brk = np.ones(len(g), dtype=bool)
    brk[1:] = (g[1:] != g[:-1]) | (h[1:] != h[:-1]) | (l_[1:] != l_[:-1])
    starts = np.flatnonzero(brk)
    dw = np.add.reduceat(ww, starts)
    keep = starts[dw != 0]
    return g[keep], h[keep], l_[keep], dw[dw != 0]


def _update(e: Extreme, ngroups, g, h, l_, alive, gone) -> np.ndarray:
    """New extremes from the old ones and the touched values; returns the groups whose old
    extreme was deleted (they need the untouched rest)."""
    e.old_hi, e.old_lo = e.hi.copy(), e.lo.copy()
    best_has = np.zeros(ngroups, dtype=bool)
    bhi = np.zeros(ngroups, dtype=np.int64)
    blo = np.zeros(ngroups, dtype=np.uint64)
    idx = np.flatnonzero(alive)
    if len(idx):
        pg = g[idx]  # sorted by group, then value
        if e.descending:
            u, first = np.unique(pg[::-1], return_index=True)
            sel = idx[len(pg) - 1 - first]
        else:
            u, sel = np.unique(pg, return_index=True)
            sel = idx[sel]
        best_has[u], bhi[u], blo[u] = True, h[sel], l_[sel]
    lost = np.zeros(ngroups, dtype=bool)
    ridx = np.flatnonzero(gone)
    if len(ridx):
        rg = g[ridx]
        hit = e.valid[rg] & (h[ridx] == e.hi[rg]) & (l_[ridx] == e.lo[rg])
        lost[rg[hit]] = True
    keep = e.valid & ~lost
    if e.descending:
        beats = (bhi > e.hi) | ((bhi == e.hi) & (blo > e.lo))
    else:
        beats = (bhi < e.hi) | ((bhi == e.hi) & (blo < e.lo))
    take = best_has & (~keep | beats)
    e.hi = np.where(take, bhi, e.hi)
    e.lo = np.where(take, blo, e.lo)
    e.valid = keep | best_has
    return np.flatnonzero(lost)


def _beats(hi: int, lo: int, ohi: int, olo: int, descending: bool) -> bool:
    return (hi, lo) > (ohi, olo) if descending else (hi, lo) < (ohi, olo)
