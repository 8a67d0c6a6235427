"""Join arrangements: both inputs of a join kept by key in one collection's RocksDB column family.

This is the state layout and the delta algebra shared by the join family (inner, cross, outer,
semi, anti). Rows are stored one entry per distinct row, so a key holding 100k rows still costs
a bounded read and one write when a single row of it changes. The layout:

* ``ROWS | len(k) | k | side | encode_key(row) -> pickle((row, weight[, match_count]))``
  (``k = encode_key(join key)``, ``len`` a fixed 4 bytes, so the prefix ``ROWS | len(k) | k`` of
  one key is never a prefix of another key's entries; ``side`` is ``LEFT`` or ``RIGHT``). Both
  sides of a key are adjacent, so one seek reads a key's left rows and then its right rows.
  A row's identity is its equality class (``encode_key``), not its spelling (``encode_exact``):
  ``DiffBatch`` consolidates Python-equal rows, so ``-(1.5,) +(1.50,)`` cancels within a time and
  a row may be retracted in another spelling than it was stored in; keyed by spelling, the state
  would keep a +1 and a -1 entry for one row forever. The stored row is one representative;
* ``tag | len(name) | name -> weight`` for counters: per-key weight totals of a side (when
  "has a match" only depends on the key) and global counters (null-aware anti join).

``DeltaJoin.step`` applies one time's consolidated deltas: it visits the distinct keys of both
deltas in key order with one iterator over the *committed* state, reading in full the side whose
rows pair with the other side's delta and, for the delta's own rows, their stored weights (a
bounded read; a hot key's own side falls back to one ``get_many``). It emits ``ΔA⋈B' + A⋈ΔB``
(which equals ``A'⋈B' - A⋈B``), evaluates the residual over all candidate pairs in one batch
call, maintains match counts when asked, and stages the new state. ``KeyMatch`` is the cheaper
form for semi/anti joins without a residual: left rows and per-key weight totals of the right
side only. Neither decides what to output for unmatched rows (each collection's job), and neither
keeps anything in memory between times: all state is in the table, so a reopened dataflow
resumes exactly.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.errs import BatchFn, evaluate
from engine.dataflow.state.keycodec import _NEEDS_NORMALIZING, encode_key
from engine.dataflow.state.store import StateTable

ROWS = b"\x01"
LEFT_TOTALS = b"\x03"
RIGHT_TOTALS = b"\x04"
COUNTERS = b"\x05"
LEFT = b"\x01"
RIGHT = b"\x02"

#: own-side entries read past before a key counts as hot and its delta rows are point-read
OWN_SCAN_LIMIT = 16

_dumps = pickle.dumps
_loads = pickle.loads
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_NONE_TYPE = type(None)


def key_prefix(tag: bytes, name: bytes) -> bytes:
    """``tag | len(name) (4 bytes) | name``: prefix-free across names of any length."""
    return tag + len(name).to_bytes(4, "big") + name


def side_prefix(kb: bytes, side: bytes) -> bytes:
    """The common prefix of one side's rows under one encoded key."""
    return ROWS + len(kb).to_bytes(4, "big") + kb + side


def split_entry_key(entry: bytes) -> tuple[bytes, bytes, bytes]:
    """(encoded join key, side, encoded row) of a row entry's RocksDB key."""
    n = int.from_bytes(entry[1:5], "big")
    return entry[5 : 5 + n], entry[5 + n : 6 + n], entry[6 + n :]


Groups = dict[bytes, list[tuple[Row, int]]]
#: a committed row read by a scan: (entry key, row, weight, match count)
Scanned = tuple[bytes, Row, int, int]


def group_by_key(
    batch: DiffBatch, indices: Sequence[int], keep_nulls: bool = False
) -> tuple[Groups, DiffBatch]:
    """Diffs grouped by ``encode_key`` of their key columns, and the diffs whose key has a NULL.

    With ``keep_nulls`` the NULL-key diffs are grouped too (and the second result is empty).
    """
    groups: Groups = {}
    nulls = DiffBatch()
    get = groups.get
    if len(indices) == 1:
        (i,) = indices
        for r, w in zip(batch.rows, batch.weights, strict=True):
            v = r[i]
            if v is None and not keep_nulls:
                nulls.rows.append(r)
                nulls.weights.append(w)
                continue
            kb = encode_key((v,))
            g = get(kb)
            if g is None:
                groups[kb] = [(r, w)]
            else:
                g.append((r, w))
        return groups, nulls
    for r, w in zip(batch.rows, batch.weights, strict=True):
        key = tuple([r[i] for i in indices])
        if not keep_nulls and any(v is None for v in key):
            nulls.rows.append(r)
            nulls.weights.append(w)
            continue
        kb = encode_key(key)
        g = get(kb)
        if g is None:
            groups[kb] = [(r, w)]
        else:
            g.append((r, w))
    return groups, nulls


def group_states(
    batch: DiffBatch, indices: Sequence[int], side: bytes
) -> tuple[dict[bytes, list[RowState]], DiffBatch]:
    """``group_by_key`` for ``DeltaJoin``: the delta rows as ``RowState`` (entry key built,
    ``old`` 0, ``new`` the delta weight) by encoded key, and the diffs whose key has a NULL."""
    groups: dict[bytes, list[RowState]] = {}
    prefixes: dict[bytes, bytes] = {}
    nulls = DiffBatch()
    get_prefix = prefixes.get
    # encode_key inlined: a value of any type but these encodes as its repr
    normalizing = _NEEDS_NORMALIZING
    isdisjoint = normalizing.isdisjoint
    rows, weights = batch.rows, batch.weights
    if len(indices) == 1:
        (i,) = indices
        keys = list(map(itemgetter(i), rows))
        key_types = set(map(type, keys))
        if (
            _NONE_TYPE not in key_types
            and isdisjoint(key_types)
            and isdisjoint(set(map(type, chain.from_iterable(rows))))
        ):
            # the common case in bulk: no NULL key, nothing to normalize, so every encode_key
            # is a repr ((v,) for a key: zip of one list gives the 1-tuples)
            if len(rows) != len(weights):
                raise ValueError("rows and weights differ in length")
            kbs = map(str.encode, map(repr, zip(keys)))
            ebs = map(str.encode, map(repr, rows))
            for r, w, kb, eb in zip(rows, weights, kbs, ebs, strict=False):
                p = get_prefix(kb)
                if p is None:
                    p = prefixes[kb] = side_prefix(kb, side)
                    groups[kb] = [RowState(r, p + eb, 0, w)]
                else:
                    groups[kb].append(RowState(r, p + eb, 0, w))
            return groups, nulls
        for r, w in zip(rows, weights, strict=True):
            v = r[i]
            if v is None:
                nulls.rows.append(r)
                nulls.weights.append(w)
                continue
            kb = encode_key((v,)) if type(v) in normalizing else repr((v,)).encode()
            eb = repr(r).encode() if isdisjoint(map(type, r)) else encode_key(r)
            p = get_prefix(kb)
            if p is None:
                p = prefixes[kb] = side_prefix(kb, side)
                groups[kb] = [RowState(r, p + eb, 0, w)]
            else:
                groups[kb].append(RowState(r, p + eb, 0, w))
        return groups, nulls
    for r, w in zip(rows, weights, strict=True):
        key = tuple([r[j] for j in indices])
        if any(v is None for v in key):
            nulls.rows.append(r)
            nulls.weights.append(w)
            continue
        kb = encode_key(key)
        eb = repr(r).encode() if isdisjoint(map(type, r)) else encode_key(r)
        p = get_prefix(kb)
        if p is None:
            p = prefixes[kb] = side_prefix(kb, side)
            groups[kb] = [RowState(r, p + eb, 0, w)]
        else:
            groups[kb].append(RowState(r, p + eb, 0, w))
    return groups, nulls


class RowState:
    """One stored row around a time: weights and match counts before (``old``) and after (``new``).

    ``matched_old``/``matched_new`` are set by the arrangement when the collection asked for match
    tracking: whether the row had at least one match before and after the time.
    """

    __slots__ = (
        "row",
        "entry",
        "old",
        "new",
        "count_old",
        "count_new",
        "matched_old",
        "matched_new",
    )

    def __init__(self, row: Row, entry: bytes, old: int, new: int, count_old: int = 0) -> None:
        self.row = row
        self.entry = entry
        self.old = old
        self.new = new
        self.count_old = count_old
        self.count_new = count_old if old else 0
        self.matched_old = False
        self.matched_new = False

    def __repr__(self) -> str:
        return f"RowState({self.row!r}, {self.old}->{self.new}, count {self.count_old}->{self.count_new})"


class SideArrangement:
    """One input's rows in ``table`` (``side`` is ``LEFT`` or ``RIGHT``), one entry per distinct row.

    With ``counted`` each entry also keeps the row's match count (residual joins that track
    matches per row).
    """

    def __init__(self, table: StateTable, side: bytes, counted: bool = False) -> None:
        self.table = table
        self.side = side
        self.counted = counted

    def delta_states(self, kb: bytes, items: list[tuple[Row, int]]) -> list[RowState]:
        """States for one key's delta rows, not yet read: ``old`` 0 and ``new`` the delta weight."""
        prefix = side_prefix(kb, self.side)
        return [RowState(r, prefix + encode_key(r), 0, w) for r, w in items]

    def resolve(self, states: list[RowState]) -> None:
        """Read the stored weight (and count) of ``states`` with one ``get_many``."""
        values = self.table.get_many([s.entry for s in states])
        counted = self.counted
        for s, v in zip(states, values, strict=True):
            if v is not None:
                t = _loads(v)
                s.old = t[1]
                s.new += t[1]
                if counted:
                    s.count_old = s.count_new = t[2]

    def lookup(self, groups: Groups) -> dict[bytes, list[RowState]]:
        """The stored state of every delta row (one ``get_many``); ``new`` = old + delta weight."""
        out = {kb: self.delta_states(kb, items) for kb, items in groups.items()}
        self.resolve([s for lst in out.values() for s in lst])
        return out

    def read_all(self, it, prefix: bytes, own: dict[bytes, RowState] | None) -> list[Scanned]:
        """Every row under ``prefix`` as ``(entry, row, weight, count)``, from the iterator ``it``
        (already seeked to ``prefix``), filling in the stored weight of the ``own`` delta rows met
        on the way. Leaves ``it`` on the first key past the prefix."""
        out = []
        counted = self.counted
        valid, key, value, advance = it.valid, it.key, it.value, it.next
        while valid():
            entry = key()
            if not entry.startswith(prefix):
                break
            t = _loads(value())
            w = t[1]
            c = t[2] if counted else 0
            out.append((entry, t[0], w, c))
            if own is not None:
                d = own.get(entry)
                if d is not None:
                    d.old = w
                    d.new += w
                    d.count_old = d.count_new = c
            advance()
        return out

    def read_own(
        self, it, prefix: bytes, own: list[RowState], limit: int, stop_when_found: bool
    ) -> list[RowState]:
        """Fill in the stored weight of the ``own`` delta rows (all under ``prefix``) by reading at
        most ``limit`` entries from ``it`` (already seeked to ``prefix``); returns the rows still
        unresolved when the key holds more entries than that. Unless ``stop_when_found``, goes on
        to the end of the prefix (within ``limit``), where the next side's rows begin."""
        if len(own) == 1:
            (d,) = own
            pending = {d.entry: d}
        else:
            pending = {s.entry: s for s in own}
        n = 0
        counted = self.counted
        valid, key, advance = it.valid, it.key, it.next
        while valid():
            entry = key()
            if n == limit or not entry.startswith(prefix):
                break
            d = pending.pop(entry, None)
            if d is not None:
                t = _loads(it.value())
                d.old = t[1]
                d.new += t[1]
                if counted:
                    d.count_old = d.count_new = t[2]
                if stop_when_found and not pending:
                    return []
            n += 1
            advance()
        return list(pending.values()) if n == limit else []

    def scan(self, kb: bytes) -> list[RowState]:
        """The committed rows of one key (``old`` = ``new`` = stored weight)."""
        out = []
        counted = self.counted
        for entry, v in self.table.scan_prefix(side_prefix(kb, self.side)):
            t = _loads(v)
            out.append(RowState(t[0], entry, t[1], t[1], t[2] if counted else 0))
        return out

    def scan_all(self) -> dict[bytes, list[RowState]]:
        """Every committed row of this side, by encoded key (for whole-side recomputations)."""
        out: dict[bytes, list[RowState]] = {}
        counted = self.counted
        for entry, v in self.table.scan_prefix(ROWS):
            kb, side, _ = split_entry_key(entry)
            if side != self.side:
                continue
            t = _loads(v)
            s = RowState(t[0], entry, t[1], t[1], t[2] if counted else 0)
            lst = out.get(kb)
            if lst is None:
                out[kb] = [s]
            else:
                lst.append(s)
        return out

    def stage(self, states: Iterable[RowState]) -> None:
        """Stage the new weight (and count) of every row whose stored value changed."""
        table = self.table
        counted = self.counted
        for s in states:
            if s.new == 0:
                if s.old != 0:
                    table.delete(s.entry)
            elif counted:
                if s.new != s.old or s.count_new != s.count_old:
                    table.put(s.entry, _dumps((s.row, s.new, s.count_new), _PROTOCOL))
            elif s.new != s.old:
                table.put(s.entry, _dumps((s.row, s.new), _PROTOCOL))


class WeightCounters:
    """Named integer counters under ``tag`` (per-key weight totals, global row counts)."""

    def __init__(self, table: StateTable, tag: bytes) -> None:
        self.table = table
        self.tag = tag

    def read(self, names: list[bytes]) -> list[int]:
        tag = self.tag
        values = self.table.get_many([key_prefix(tag, n) for n in names])
        return [0 if v is None else int(v) for v in values]

    def stage(self, name: bytes, old: int, new: int) -> None:
        if new == old:
            return
        if new == 0:
            self.table.delete(key_prefix(self.tag, name))
        else:
            self.table.put(key_prefix(self.tag, name), str(new).encode())


def merge_states(scanned: list[RowState] | None, changed: list[RowState] | None) -> list[RowState]:
    """A key's committed rows with the delta rows' states replacing theirs (by row identity)."""
    if not scanned:
        return changed or []
    if not changed:
        return scanned
    by_entry = {s.entry: s for s in scanned}
    for s in changed:
        by_entry[s.entry] = s
    return list(by_entry.values())


def merge_scanned(scanned: list[Scanned] | None, changed: list[RowState] | None) -> list[RowState]:
    """``merge_states`` for rows read by ``SideArrangement.read_all``."""
    if not scanned:
        return changed or []
    if not changed:
        return [RowState(row, e, w, w, c) for e, row, w, c in scanned]
    own = {s.entry: s for s in changed}
    out = [RowState(row, e, w, w, c) for e, row, w, c in scanned if e not in own]
    out.extend(changed)
    return out


def weight_delta(states: list[RowState] | None) -> int:
    return sum(s.new - s.old for s in states) if states else 0


@dataclass
class JoinStep:
    """What one time did to a ``DeltaJoin``: the pair diffs, errors, and the tracked rows."""

    pairs: DiffBatch = field(default_factory=DiffBatch)
    errs: DiffBatch = field(default_factory=DiffBatch)
    #: rows whose weight or match state may have changed (only for tracked sides)
    left_rows: list[RowState] = field(default_factory=list)
    right_rows: list[RowState] = field(default_factory=list)
    #: delta rows with a NULL in a key column: they never match and are not stored
    left_nulls: DiffBatch = field(default_factory=DiffBatch)
    right_nulls: DiffBatch = field(default_factory=DiffBatch)


class DeltaJoin:
    """Both sides of an equi-join arranged by key, with the delta join over them.

    ``track_left``/``track_right`` ask for ``matched_old``/``matched_new`` on the rows of that side
    (outer, semi and anti joins): with a residual, from a match count kept in each row's entry
    (sum of the weights of the other side's rows that match it); without, from a per-key total
    of the other side's weights. ``pairs=False`` skips building the output pairs (the residual is
    still evaluated on every candidate pair to count matches).
    """

    def __init__(
        self,
        table: StateTable,
        left_key: Sequence[int],
        right_key: Sequence[int],
        residual: BatchFn | None = None,
        track_left: bool = False,
        track_right: bool = False,
        pairs: bool = True,
    ) -> None:
        self.left_key = tuple(left_key)
        self.right_key = tuple(right_key)
        self.residual = residual
        self.track_left = track_left
        self.track_right = track_right
        self.want_pairs = pairs
        per_row = residual is not None
        self.table = table
        self.left = SideArrangement(table, LEFT, counted=track_left and per_row)
        self.right = SideArrangement(table, RIGHT, counted=track_right and per_row)
        # per-key totals of the *other* side decide "matched" when there is no residual
        self.right_totals = (
            WeightCounters(table, RIGHT_TOTALS) if track_left and not per_row else None
        )
        self.left_totals = (
            WeightCounters(table, LEFT_TOTALS) if track_right and not per_row else None
        )

    def step(self, d_left: DiffBatch, d_right: DiffBatch) -> JoinStep:
        out = JoinStep()
        ch_left, out.left_nulls = group_states(d_left, self.left_key, LEFT)
        ch_right, out.right_nulls = group_states(d_right, self.right_key, RIGHT)
        tracking = self.track_left or self.track_right
        counting = tracking and self.residual is not None
        if tracking:
            left_scan, right_scan = self._read(ch_left, ch_right)

        # the rows of interest per key: committed rows that pair with a delta, merged with it
        left_rows: dict[bytes, list[RowState]] = {}
        right_rows: dict[bytes, list[RowState]] = {}
        if tracking:
            for kb in ch_left.keys() | ch_right.keys():
                left_rows[kb] = merge_scanned(left_scan.get(kb), ch_left.get(kb))
                right_rows[kb] = merge_scanned(right_scan.get(kb), ch_right.get(kb))

        # candidate pairs: ΔA ⋈ B' (delta-left weight * new right weight) and A ⋈ ΔB
        p_rows: list[Row] = []
        p_w: list[int] = []
        p_l: list[RowState] = []
        p_r: list[RowState] = []
        p_lc: list[int] = []  # what a passing pair adds to the left row's match count
        p_rc: list[int] = []  # ... and to the right row's
        append_row = p_rows.append
        append_w = p_w.append
        if not tracking:
            p_rows, p_w = self._read_pairs(ch_left, ch_right)
        elif not counting:
            for kb, lefts in ch_left.items():
                changed = ch_right.get(kb)
                if changed is None:
                    rights = [(row, w) for _, row, w, _ in right_scan[kb]]
                else:
                    by_entry = {e: (row, w) for e, row, w, _ in right_scan[kb]}
                    for r in changed:
                        by_entry[r.entry] = (r.row, r.new)
                    rights = [rw for rw in by_entry.values() if rw[1]]
                if not rights:
                    continue
                for ls in lefts:
                    lrow = ls.row
                    dl = ls.new - ls.old
                    for rrow, rw in rights:
                        append_row(lrow + rrow)
                        append_w(dl * rw)
            for kb, changed in ch_right.items():
                lefts_old = left_scan[kb]
                if not lefts_old:
                    continue
                rights = [(r.row, r.new - r.old) for r in changed]
                for _, lrow, lw, _ in lefts_old:
                    for rrow, dr in rights:
                        append_row(lrow + rrow)
                        append_w(lw * dr)
        else:
            for kb, lefts in ch_left.items():
                rights = [r for r in right_rows[kb] if r.new]
                for ls in lefts:
                    lrow = ls.row
                    dl = ls.new - ls.old
                    is_new = ls.old == 0
                    for rs in rights:
                        append_row(lrow + rs.row)
                        append_w(dl * rs.new)
                        p_l.append(ls)
                        p_r.append(rs)
                        p_lc.append(rs.new if is_new else 0)
                        p_rc.append(dl)
            for kb, changed in ch_right.items():
                # the merged states, so that counts land on the object that gets staged
                for ls in [s for s in left_rows[kb] if s.old]:
                    lrow = ls.row
                    lw = ls.old
                    for rs in changed:
                        append_row(lrow + rs.row)
                        append_w(lw * (rs.new - rs.old))
                        p_l.append(ls)
                        p_r.append(rs)
                        p_lc.append(rs.new - rs.old)
                        p_rc.append(lw if rs.old == 0 else 0)

        # the residual over every candidate pair in one call; errors carry the pair's weight
        if self.residual is not None and p_rows:
            results, ok, errs = evaluate(self.residual, DiffBatch(p_rows, list(range(len(p_rows)))))
            if errs:
                out.errs = DiffBatch(errs.rows, [p_w[i] for i in errs.weights])
            passing = [i for i, m in zip(ok.weights, results, strict=True) if m is True]
            if counting:
                for i in passing:
                    p_l[i].count_new += p_lc[i]
                    p_r[i].count_new += p_rc[i]
            if self.want_pairs:
                out.pairs = DiffBatch([p_rows[i] for i in passing], [p_w[i] for i in passing])
        elif self.want_pairs:
            out.pairs = DiffBatch(p_rows, p_w)

        # matched before/after, then the new state
        if self.track_left:
            out.left_rows = self._matches(left_rows, ch_right, self.right_totals)
        if self.track_right:
            out.right_rows = self._matches(right_rows, ch_left, self.left_totals)
        if tracking:
            self.left.stage(s for lst in left_rows.values() for s in lst)
            self.right.stage(s for lst in right_rows.values() for s in lst)
        else:
            self.left.stage(s for lst in ch_left.values() for s in lst)
            self.right.stage(s for lst in ch_right.values() for s in lst)
        return out

    def _read_pairs(
        self, ch_left: dict[bytes, list[RowState]], ch_right: dict[bytes, list[RowState]]
    ) -> tuple[list[Row], list[int]]:
        """``_read`` fused with the candidate pairs, for joins that track no matches.

        The same single pass over the distinct keys of both deltas, in key order, with one
        iterator: fills in the stored weight of every delta row and emits, key by key,
        ``ΔA ⋈ B'`` and ``A ⋈ ΔB`` without keeping the committed rows read. A delta row left
        unresolved (hot key, own side only) never takes part in a pair: its weight in a pair is
        its delta weight, and its stored weight only matters for staging.
        """
        left, right = self.left, self.right
        p_rows: list[Row] = []
        p_w: list[int] = []
        append_row = p_rows.append
        append_w = p_w.append
        unresolved_left: list[RowState] = []
        unresolved_right: list[RowState] = []
        loads = _loads
        limit = OWN_SCAN_LIMIT
        it = self.table.iterator()
        seek, valid, key, value, advance = it.seek, it.valid, it.key, it.value, it.next
        get_left, get_right = ch_left.get, ch_right.get
        # side_prefix without the side, sorted: the iterator only moves forward
        keys = sorted(
            [
                (ROWS + len(kb).to_bytes(4, "big") + kb, kb)
                for kb in ch_left.keys() | ch_right.keys()
            ]
        )
        for p, kb in keys:
            dl, dr = get_left(kb), get_right(kb)
            pl, pr = p + LEFT, p + RIGHT
            seek(pl)
            if dr is not None:
                # the right delta pairs with all of A_k: read it, resolving the left delta rows
                own = {s.entry: s for s in dl} if dl is not None else None
                lefts = []
                while valid():
                    entry = key()
                    if not entry.startswith(pl):
                        break
                    t = loads(value())  # (row, weight): uncounted entries
                    lefts.append(t)
                    if own is not None:
                        lw = t[1]
                        d = own.get(entry)
                        if d is not None:
                            d.old = lw
                            d.new += lw
                    advance()
            else:
                # own rows only; a hot key stops after OWN_SCAN_LIMIT rows: point-read, skip ahead
                if len(dl) == 1:
                    (d,) = dl
                    pending = {d.entry: d}
                else:
                    pending = {s.entry: s for s in dl}
                pop = pending.pop
                n = 0
                while valid():
                    entry = key()
                    if n == limit or not entry.startswith(pl):
                        break
                    d = pop(entry, None)
                    if d is not None:
                        lw = loads(value())[1]
                        d.old = lw
                        d.new += lw
                    n += 1
                    advance()
                if n == limit:
                    unresolved_left.extend(pending.values())
                if valid() and key() < pr:
                    seek(pr)
            if dl is not None:
                # the left delta pairs with all of B'_k: read B_k, resolving the right delta rows
                if dr is None:
                    rights = []
                    while valid():
                        entry = key()
                        if not entry.startswith(pr):
                            break
                        rights.append(loads(value()))  # (row, weight): uncounted entries
                        advance()
                else:
                    by_entry = {}
                    own = {s.entry: s for s in dr}
                    while valid():
                        entry = key()
                        if not entry.startswith(pr):
                            break
                        t = loads(value())
                        rw = t[1]
                        by_entry[entry] = (t[0], rw)
                        d = own.get(entry)
                        if d is not None:
                            d.old = rw
                            d.new += rw
                        advance()
                    for r in dr:
                        by_entry[r.entry] = (r.row, r.new)
                    rights = [rw for rw in by_entry.values() if rw[1]]
                if rights:
                    for ls in dl:
                        lrow = ls.row
                        w = ls.new - ls.old
                        for rrow, rw in rights:
                            append_row(lrow + rrow)
                            append_w(w * rw)
            else:
                if len(dr) == 1:
                    (d,) = dr
                    pending = {d.entry: d}
                else:
                    pending = {s.entry: s for s in dr}
                pop = pending.pop
                n = 0
                while valid():
                    entry = key()
                    if n == limit or not entry.startswith(pr):
                        break
                    d = pop(entry, None)
                    if d is not None:
                        rw = loads(value())[1]
                        d.old = rw
                        d.new += rw
                        if not pending:
                            break
                    n += 1
                    advance()
                if n == limit:
                    unresolved_right.extend(pending.values())
            if dr is not None and lefts:
                deltas = [(r.row, r.new - r.old) for r in dr]
                for lrow, lw in lefts:
                    for rrow, w in deltas:
                        append_row(lrow + rrow)
                        append_w(lw * w)
        if unresolved_left:
            left.resolve(unresolved_left)
        if unresolved_right:
            right.resolve(unresolved_right)
        return p_rows, p_w

    def _read(
        self, ch_left: dict[bytes, list[RowState]], ch_right: dict[bytes, list[RowState]]
    ) -> tuple[dict[bytes, list[Scanned]], dict[bytes, list[Scanned]]]:
        """One pass over the distinct keys of both deltas, in key order, with one iterator.

        Fills in the stored weight of every delta row and returns, per key, all the committed
        rows of a side whose other side has a delta there.
        """
        left, right = self.left, self.right
        left_scan: dict[bytes, list[Scanned]] = {}
        right_scan: dict[bytes, list[Scanned]] = {}
        unresolved_left: list[RowState] = []
        unresolved_right: list[RowState] = []
        it = self.table.iterator()
        seek, valid, key = it.seek, it.valid, it.key
        # side_prefix without the side, sorted: the iterator only moves forward
        keys = sorted(
            [
                (ROWS + len(kb).to_bytes(4, "big") + kb, kb)
                for kb in ch_left.keys() | ch_right.keys()
            ]
        )
        for p, kb in keys:
            dl, dr = ch_left.get(kb), ch_right.get(kb)
            pl, pr = p + LEFT, p + RIGHT
            seek(pl)
            if dr is not None:  # the right delta pairs with all of A_k
                own = {s.entry: s for s in dl} if dl is not None else None
                left_scan[kb] = left.read_all(it, pl, own)  # stops at the first key >= pr
            else:
                # a hot key stops after OWN_SCAN_LIMIT rows: point-read its delta rows, skip ahead
                unresolved_left.extend(left.read_own(it, pl, dl, OWN_SCAN_LIMIT, False))
                if valid() and key() < pr:
                    seek(pr)
            if dl is not None:  # the left delta pairs with all of B_k
                own = {s.entry: s for s in dr} if dr is not None else None
                right_scan[kb] = right.read_all(it, pr, own)
            else:
                unresolved_right.extend(right.read_own(it, pr, dr, OWN_SCAN_LIMIT, True))
        if unresolved_left:
            left.resolve(unresolved_left)
        if unresolved_right:
            right.resolve(unresolved_right)
        return left_scan, right_scan

    def _matches(
        self,
        rows: dict[bytes, list[RowState]],
        other_changes: dict[bytes, list[RowState]],
        other_totals: WeightCounters | None,
    ) -> list[RowState]:
        """Set matched_old/new on ``rows`` (which covers every key of ``other_changes``)."""
        flat: list[RowState] = []
        if other_totals is None:  # per-row match counts
            for lst in rows.values():
                for s in lst:
                    s.matched_old = s.count_old > 0
                    s.matched_new = s.count_new > 0
                flat.extend(lst)
            return flat
        kbs = list(rows)
        for kb, old in zip(kbs, other_totals.read(kbs), strict=True):
            new = old + weight_delta(other_changes.get(kb))
            other_totals.stage(kb, old, new)
            m_old, m_new = old > 0, new > 0
            lst = rows[kb]
            for s in lst:
                s.matched_old = m_old
                s.matched_new = m_new
            flat.extend(lst)
        return flat


@dataclass
class MatchStep:
    """What one time did to a ``KeyMatch``."""

    left_rows: list[RowState] = field(default_factory=list)
    left_nulls: DiffBatch = field(default_factory=DiffBatch)
    errs: DiffBatch = field(default_factory=DiffBatch)  # always empty: no residual here
    #: the right delta's rows with a NULL key (never counted in the per-key totals)
    right_nulls: DiffBatch = field(default_factory=DiffBatch)
    #: per key of the right delta: (total weight before, after)
    right_totals: dict[bytes, tuple[int, int]] = field(default_factory=dict)


class KeyMatch:
    """Left rows by key and per-key weight totals of the right side: "has a match" by key only.

    For semi and anti joins without a residual: the right rows themselves are never stored, and
    a left key's rows are read only when that key's right total crosses zero. With
    ``keep_null_left`` the left rows with a NULL key are stored too (under the NULL key, which
    never has a right total), for the null-aware anti join that must emit them later.
    """

    def __init__(
        self,
        table: StateTable,
        left_key: Sequence[int],
        right_key: Sequence[int],
        keep_null_left: bool = False,
    ) -> None:
        self.left_key = tuple(left_key)
        self.right_key = tuple(right_key)
        self.keep_null_left = keep_null_left
        self.left = SideArrangement(table, LEFT)
        self.totals = WeightCounters(table, RIGHT_TOTALS)

    def step(self, d_left: DiffBatch, d_right: DiffBatch, rescan_all: bool = False) -> MatchStep:
        """Apply the deltas; with ``rescan_all`` every stored left row is returned, not only the
        rows whose weight or match state changed."""
        out = MatchStep()
        g_left, out.left_nulls = group_by_key(d_left, self.left_key, keep_nulls=self.keep_null_left)
        g_right, out.right_nulls = group_by_key(d_right, self.right_key)
        ch_left = self.left.lookup(g_left)
        d_totals = {kb: sum(w for _, w in items) for kb, items in g_right.items()}
        d_totals = {kb: d for kb, d in d_totals.items() if d}
        if rescan_all:
            rows = self.left.scan_all()
            for kb, lst in ch_left.items():
                rows[kb] = merge_states(rows.get(kb), lst)
        else:
            rows = dict(ch_left)
        kbs = list(rows.keys() | d_totals.keys())
        totals = {}
        for kb, old in zip(kbs, self.totals.read(kbs), strict=True):
            new = old + d_totals.get(kb, 0)
            totals[kb] = (old, new)
            self.totals.stage(kb, old, new)
            if kb in d_totals and (old > 0) != (new > 0) and not rescan_all:
                rows[kb] = merge_states(self.left.scan(kb), ch_left.get(kb))
        out.right_totals = {kb: totals[kb] for kb in d_totals}
        for kb, lst in rows.items():
            old, new = totals[kb]
            for s in lst:
                s.matched_old = old > 0
                s.matched_new = new > 0
            out.left_rows.extend(lst)
        self.left.stage(s for lst in ch_left.values() for s in lst)
        return out
