"""Join arrangements: both inputs of a join kept by key in one collection's RocksDB column family.

This is the state layout and the delta algebra shared by the join family (inner, cross, outer,
semi, anti). A join key's rows are read with one point lookup, and a key holding 100k rows still
costs a bounded read and one write when a single row of it changes. The layout:

* ``KEYS | len(k) | k -> pickle((left part, right part))`` (``k = encode_key(join key)``, ``len``
  a fixed 4 bytes, so no key's entry is a prefix of another's): one entry per key holding both
  sides. A side's part is either the list of its rows, ``(row, weight[, match_count])`` per
  distinct row (a *small* side, at most ``HOT_ROWS`` rows), or the number of its distinct rows
  when they are too many and live in entries of their own (a *hot* side):
* ``ROWS | len(k) | k | side | encode_key(row) -> pickle((row, weight[, match_count]))`` for the
  rows of a hot side (``side`` is ``LEFT`` or ``RIGHT``), read by prefix scan (all of a side) or
  point lookups (the delta's own rows). A side moves to row entries when it grows past
  ``HOT_ROWS`` rows and back into the key's entry when it shrinks to ``COLD_ROWS``.
* ``tag | len(name) | name -> weight`` for counters: per-key weight totals of a side (when
  "has a match" only depends on the key) and global counters (null-aware anti join).

A row's identity is its equality class (``encode_key``), not its spelling (``encode_exact``):
``DiffBatch`` consolidates Python-equal rows, so ``-(1.5,) +(1.50,)`` cancels within a time and a
row may be retracted in another spelling than it was stored in; keyed by spelling, the state would
keep a +1 and a -1 entry for one row forever. The stored row is the first spelling seen.

``DeltaJoin.step`` applies one time's consolidated deltas: one ``get_many`` (sorted keys) reads
the entries of every key of both deltas, then it emits ``ΔA⋈B' + A⋈ΔB`` (which equals
``A'⋈B' - A⋈B``), evaluates the residual over all candidate pairs in one batch call, maintains
match counts when asked, and stages the new state. Keys whose two sides are small take a fused
path without per-row objects (``_small_pairs``); the rest (hot sides, match tracking) go through
``RowState`` objects. ``KeyMatch`` is the cheaper form for semi/anti joins without a residual:
left rows and per-key weight totals of the right side only. Neither decides what to output for
unmatched rows (each collection's job), and neither keeps anything in memory between times: all
state is in the table, so a reopened dataflow resumes exactly.
"""

from __future__ import annotations

import datetime as dt
import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import chain, repeat
from operator import itemgetter, ne

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.errs import BatchFn, evaluate
from engine.dataflow.nan import loads as nan_loads
from engine.dataflow.state.keycodec import encode_key
from engine.dataflow.state.store import StateTable

ROWS = b"\x01"
KEYS = b"\x02"
LEFT_TOTALS = b"\x03"
RIGHT_TOTALS = b"\x04"
COUNTERS = b"\x05"
LEFT = b"\x01"
RIGHT = b"\x02"

#: a side with more distinct rows than this under one key moves to row entries of its own
HOT_ROWS = 32
#: ... and back into the key's entry once it holds this many or fewer
COLD_ROWS = 8

_dumps = pickle.dumps
_loads = nan_loads  # pickle.loads, with the engine's one NaN put back (engine.dataflow.nan)
_PROTOCOL = 5
_NONE_TYPE = type(None)
_EMPTY: list = []
_row_of = itemgetter(0)
_weight_of = itemgetter(1)

#: a key's delta rows: (row, weight)
Groups = dict[bytes, list[tuple[Row, int]]]
#: value types whose Python equality is ``encode_key`` equality (within a typed column), so that
#: rows made of them are matched with their stored copies by ``==`` and hashing, not encodings
_PLAIN_TYPES = frozenset(
    (int, bool, str, bytes, _NONE_TYPE, dt.date, dt.datetime, dt.time, dt.timedelta)
)
#: ... and with numbers that ``encode_key`` normalizes (1 = 1.0 = Decimal('1.00')): as plain
#: unless a value is NaN (never equal to itself, yet one equality class for ``encode_key``)
_NUMERIC_TYPES = _PLAIN_TYPES | {float, Decimal}


def key_prefix(tag: bytes, name: bytes) -> bytes:
    """``tag | len(name) (4 bytes) | name``: prefix-free across names of any length."""
    return tag + len(name).to_bytes(4, "big") + name


def key_entry(kb: bytes) -> bytes:
    """The entry holding both sides of the encoded key ``kb``."""
    return KEYS + len(kb).to_bytes(4, "big") + kb


def side_prefix(kb: bytes, side: bytes) -> bytes:
    """The common prefix of one hot side's row entries under one encoded key."""
    return ROWS + len(kb).to_bytes(4, "big") + kb + side


def group_deltas(
    batch: DiffBatch, indices: Sequence[int], keep_nulls: bool = False
) -> tuple[Groups, DiffBatch, bool]:
    """Diffs grouped by ``encode_key`` of their key columns, the diffs whose key has a NULL (with
    ``keep_nulls`` those are grouped too), and whether the rows are *plain*: made of value types
    whose Python equality is ``encode_key`` equality, so that they can be matched with stored
    rows by ``==`` (``merge_plain``) rather than by their encodings."""
    nulls = DiffBatch()
    rows, weights = batch.rows, batch.weights
    if len(rows) != len(weights):
        raise ValueError("rows and weights differ in length")
    values = list(chain.from_iterable(rows))
    types = set(map(type, values))
    no_numerics = types <= _PLAIN_TYPES
    if no_numerics or (types <= _NUMERIC_TYPES and not any(map(ne, values, values))):
        # group by the key values themselves (Python equality is SQL equality here: no NaN),
        # and encode each distinct key once
        by_value: defaultdict = defaultdict(list)
        if len(indices) == 1:
            keys = map(itemgetter(indices[0]), rows)
        elif indices:
            keys = map(itemgetter(*indices), rows)
        else:
            keys = repeat(())
        for r, w, v in zip(rows, weights, keys, strict=False):
            by_value[v].append((r, w))
        groups: Groups = {}
        encode = _encode_plain if no_numerics else encode_key
        for v, g in by_value.items():
            key = (v,) if len(indices) == 1 else v
            if not keep_nulls and (v is None if len(indices) == 1 else None in key):
                for r, w in g:
                    nulls.rows.append(r)
                    nulls.weights.append(w)
                continue
            groups[encode(key)] = g
        return groups, nulls, True
    groups = {}
    get = groups.get
    for r, w in zip(rows, weights, strict=True):
        key = tuple([r[j] for j in indices])
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
    return groups, nulls, False


def _encode_plain(key: tuple) -> bytes:
    """``encode_key`` of a key without numbers to normalize."""
    return repr(key).encode()


def merge_plain(stored: list[tuple], delta: list[tuple[Row, int]]) -> list[tuple]:
    """A small, uncounted side's ``(row, weight)`` list plus plain ``delta`` rows, zeros dropped
    (a stored row keeps its spelling)."""
    if not stored and len(delta) == 1:
        return delta
    acc = dict(stored)
    if len(acc) != len(stored):  # Python-equal rows stored apart (e.g. 1.5 and Decimal('1.5'))
        acc = {}
        for r, w in stored:
            acc[r] = acc.get(r, 0) + w
    get = acc.get
    for r, w in delta:
        acc[r] = get(r, 0) + w
    return list(filter(_weight_of, acc.items()))


def merge_encoded(stored: list[tuple], delta: list[tuple[Row, int]]) -> list[tuple]:
    """``merge_plain`` for any rows: matched by ``encode_key``."""
    acc = dict(zip(map(encode_key, map(_row_of, stored)), stored, strict=True))
    get = acc.get
    for r, w in delta:
        eb = encode_key(r)
        e = get(eb)
        acc[eb] = (r, w) if e is None else (e[0], e[1] + w)
    return [e for e in acc.values() if e[1]]


class RowState:
    """One stored row around a time: weights and match counts before (``old``) and after (``new``).

    ``entry`` is the row's identity (``encode_key(row)``). ``matched_old``/``matched_new`` are set
    by the arrangement when the collection asked for match tracking: whether the row had at least
    one match before and after the time.
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


class SideStates:
    """One key's side during a time: its row states and how it is stored.

    ``rows`` holds every stored row of the side when ``full`` (always for a small side), else
    only the delta's rows; ``changed`` the states the delta touched. ``part`` is the side's part
    of the key's entry as read (a list of rows, or the row count of a hot side).
    """

    __slots__ = ("part", "rows", "changed", "full")

    def __init__(self, part: list | int, rows: list[RowState], changed: list[RowState], full: bool):
        self.part = part
        self.rows = rows
        self.changed = changed
        self.full = full


class KeyArrangement:
    """The storage of a join arrangement in ``table``: key entries and hot sides' row entries.

    ``counted`` says per side (``LEFT``, ``RIGHT``) whether rows keep a match count.
    """

    def __init__(self, table: StateTable, counted_left: bool, counted_right: bool) -> None:
        self.table = table
        self.counted = {LEFT: counted_left, RIGHT: counted_right}

    def read_raw(self, kbs: Iterable[bytes]) -> tuple[list[bytes], list[bytes | None]]:
        """The entry keys of the encoded keys ``kbs``, sorted (``kb`` is ``head[5:]``), and their
        stored values, read with one ``get_many``."""
        heads = sorted([KEYS + len(kb).to_bytes(4, "big") + kb for kb in kbs])
        return heads, self.table.get_many(heads)

    def read(self, kbs: Iterable[bytes]) -> list[tuple[bytes, bytes, tuple]]:
        """``(kb, entry key, (left part, right part))`` for the encoded keys, in entry-key order."""
        heads, values = self.read_raw(kbs)
        return [
            (h[5:], h, (_EMPTY, _EMPTY) if v is None else _loads(v))
            for h, v in zip(heads, values, strict=True)
        ]

    def read_all(self) -> list[tuple[bytes, bytes, tuple]]:
        """Every key entry, as ``read`` returns them."""
        return [(h[5:], h, _loads(v)) for h, v in self.table.scan_prefix(KEYS)]

    def states(
        self,
        kb: bytes,
        side: bytes,
        part: list | int,
        delta: list[tuple[Row, int]] | None,
        full: bool,
        unresolved: list[tuple[bytes, bytes, RowState]],
    ) -> SideStates:
        """The states of one key's side with ``delta`` applied (``new`` = stored + delta weight).

        A hot side is read in full only when ``full``; otherwise its delta rows are appended to
        ``unresolved`` for ``resolve`` to read their stored weights in one batch.
        """
        counted = self.counted[side]
        by_id: dict[bytes, RowState] = {}
        if type(part) is list:
            full = True
            for t in part:
                r = t[0]
                by_id[encode_key(r)] = RowState(r, b"", t[1], t[1], t[2] if counted else 0)
        elif full:
            prefix = side_prefix(kb, side)
            cut = len(prefix)
            for entry, v in self.table.scan_prefix(prefix):
                t = _loads(v)
                by_id[entry[cut:]] = RowState(t[0], b"", t[1], t[1], t[2] if counted else 0)
        for eb, s in by_id.items():
            s.entry = eb
        changed: dict[bytes, RowState] = {}
        if delta:
            for r, w in delta:
                eb = encode_key(r)
                s = by_id.get(eb)
                if s is None:
                    s = by_id[eb] = RowState(r, eb, 0, w)
                    if not full:
                        unresolved.append((kb, side, s))
                else:
                    s.new += w
                changed[eb] = s
        return SideStates(part, list(by_id.values()), list(changed.values()), full)

    def resolve(self, unresolved: list[tuple[bytes, bytes, RowState]]) -> None:
        """Read the stored weight (and count) of hot sides' delta rows with one ``get_many``."""
        if not unresolved:
            return
        values = self.table.get_many(
            [side_prefix(kb, side) + s.entry for kb, side, s in unresolved]
        )
        for (_, side, s), v in zip(unresolved, values, strict=True):
            if v is not None:
                t = _loads(v)
                s.old = t[1]
                s.new += t[1]
                if self.counted[side]:
                    s.count_old = s.count_new = t[2]

    def stage_side(self, kb: bytes, side: bytes, st: SideStates) -> tuple[list | int, bool]:
        """Stage one side's changed rows; returns its new part of the key entry and whether the
        part changed."""
        counted = self.counted[side]
        part = st.part
        if type(part) is list:
            if not any(s.new != s.old or (counted and s.count_new != s.count_old) for s in st.rows):
                return part, False
            live = [s for s in st.rows if s.new]
            if len(live) <= HOT_ROWS:
                if counted:
                    return [(s.row, s.new, s.count_new) for s in live], True
                return [(s.row, s.new) for s in live], True
            prefix = side_prefix(kb, side)
            put = self.table.put
            for s in live:
                put(prefix + s.entry, self._value(s, counted))
            return len(live), True
        n = part + sum((s.new != 0) - (s.old != 0) for s in st.rows)
        prefix = side_prefix(kb, side)
        if n <= COLD_ROWS:  # back into the key's entry
            if st.full:
                live = [s for s in st.rows if s.new]
            else:
                own = {s.entry: s for s in st.rows}
                live = [s for s in own.values() if s.new]
                for entry, v in self.table.scan_prefix(prefix):
                    if entry[len(prefix) :] not in own:
                        t = _loads(v)
                        live.append(RowState(t[0], b"", t[1], t[1], t[2] if counted else 0))
            self.table.delete_prefix(prefix)
            if counted:
                return [(s.row, s.new, s.count_new) for s in live], True
            return [(s.row, s.new) for s in live], True
        put, delete = self.table.put, self.table.delete
        for s in st.rows:
            if s.new == 0:
                if s.old != 0:
                    delete(prefix + s.entry)
            elif s.new != s.old or (counted and s.count_new != s.count_old):
                put(prefix + s.entry, self._value(s, counted))
        return n, n != part

    @staticmethod
    def _value(s: RowState, counted: bool) -> bytes:
        if counted:
            return _dumps((s.row, s.new, s.count_new), _PROTOCOL)
        return _dumps((s.row, s.new), _PROTOCOL)

    def stage_entry(self, head: bytes, left: list | int, right: list | int) -> None:
        """Stage a key entry (deleted when both sides are empty)."""
        if left or right:
            self.table.put(head, _dumps((left, right), _PROTOCOL))
        else:
            self.table.delete(head)


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
    (outer, semi and anti joins): with a residual, from a match count kept with each row (sum of
    the weights of the other side's rows that match it); without, from a per-key total of the
    other side's weights. ``pairs=False`` skips building the output pairs (the residual is still
    evaluated on every candidate pair to count matches).
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
        self.store = KeyArrangement(table, track_left and per_row, track_right and per_row)
        # per-key totals of the *other* side decide "matched" when there is no residual
        self.right_totals = (
            WeightCounters(table, RIGHT_TOTALS) if track_left and not per_row else None
        )
        self.left_totals = (
            WeightCounters(table, LEFT_TOTALS) if track_right and not per_row else None
        )

    def step(self, d_left: DiffBatch, d_right: DiffBatch) -> JoinStep:
        out = JoinStep()
        gl, out.left_nulls, plain_l = group_deltas(d_left, self.left_key)
        gr, out.right_nulls, plain_r = group_deltas(d_right, self.right_key)
        tracking = self.track_left or self.track_right
        counting = tracking and self.residual is not None
        heads, values = self.store.read_raw(gl.keys() | gr.keys())

        p_rows: list[Row] = []
        p_w: list[int] = []
        if tracking:
            keys = [
                (h[5:], h, (_EMPTY, _EMPTY) if v is None else _loads(v))
                for h, v in zip(heads, values, strict=True)
            ]
        else:
            merge_l = merge_plain if plain_l else merge_encoded
            merge_r = merge_plain if plain_r else merge_encoded
            keys = self._small_pairs(heads, values, gl, gr, merge_l, merge_r, p_rows, p_w)

        # the rest: row states per key and side, every stored row where the other side changed
        store = self.store
        unresolved: list[tuple[bytes, bytes, RowState]] = []
        lefts: dict[bytes, SideStates] = {}
        rights: dict[bytes, SideStates] = {}
        for kb, _, (lp, rp) in keys:
            dl, dr = gl.get(kb), gr.get(kb)
            lefts[kb] = store.states(kb, LEFT, lp, dl, dr is not None, unresolved)
            rights[kb] = store.states(kb, RIGHT, rp, dr, dl is not None, unresolved)
        store.resolve(unresolved)

        # candidate pairs: ΔA ⋈ B' (delta-left weight * new right weight) and A ⋈ ΔB
        p_l: list[RowState] = []
        p_r: list[RowState] = []
        p_lc: list[int] = []  # what a passing pair adds to the left row's match count
        p_rc: list[int] = []  # ... and to the right row's
        append_row = p_rows.append
        append_w = p_w.append
        for kb, ls_ in lefts.items():
            rs_ = rights[kb]
            if ls_.changed:
                rnew = [r for r in rs_.rows if r.new]
                for ls in ls_.changed:
                    lrow = ls.row
                    dlw = ls.new - ls.old
                    is_new = ls.old == 0
                    for rs in rnew:
                        append_row(lrow + rs.row)
                        append_w(dlw * rs.new)
                        if counting:
                            p_l.append(ls)
                            p_r.append(rs)
                            p_lc.append(rs.new if is_new else 0)
                            p_rc.append(dlw)
            if rs_.changed:
                lold = [s for s in ls_.rows if s.old]
                for ls in lold:
                    lrow = ls.row
                    lw = ls.old
                    for rs in rs_.changed:
                        drw = rs.new - rs.old
                        append_row(lrow + rs.row)
                        append_w(lw * drw)
                        if counting:
                            p_l.append(ls)
                            p_r.append(rs)
                            p_lc.append(drw)
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
            out.left_rows = self._matches(lefts, rights, self.right_totals)
        if self.track_right:
            out.right_rows = self._matches(rights, lefts, self.left_totals)
        for kb, head, _ in keys:
            left, l_changed = store.stage_side(kb, LEFT, lefts[kb])
            right, r_changed = store.stage_side(kb, RIGHT, rights[kb])
            if l_changed or r_changed:
                store.stage_entry(head, left, right)
        return out

    def _small_pairs(
        self,
        heads: list[bytes],
        values: list[bytes | None],
        gl: Groups,
        gr: Groups,
        merge_l: Callable[[list, list], list],
        merge_r: Callable[[list, list], list],
        p_rows: list[Row],
        p_w: list[int],
    ) -> list[tuple[bytes, bytes, tuple]]:
        """The keys whose two sides stay small, for joins that track no matches: pairs and new
        entries straight from the stored lists, no per-row objects. Returns the other keys as
        ``(kb, entry key, (left part, right part))``."""
        rest = []
        append_row = p_rows.append
        append_w = p_w.append
        get_left, get_right = gl.get, gr.get
        loads, dumps = _loads, _dumps
        hot = HOT_ROWS
        plain_l, plain_r = merge_l is merge_plain, merge_r is merge_plain
        weight_of = _weight_of
        put_heads: list[bytes] = []
        put_values: list[bytes] = []
        deletes: list[bytes] = []
        for h, v in zip(heads, values, strict=True):
            kb = h[5:]
            if v is None:
                lp = rp = _EMPTY
            else:
                lp, rp = loads(v)
                if lp.__class__ is int or rp.__class__ is int:
                    rest.append((kb, h, (lp, rp)))
                    continue
            dl, dr = get_left(kb), get_right(kb)
            # merge_plain inlined for its common case (stored rows, no duplicate among them)
            if dr is None:
                rnew = rp
            elif plain_r and rp and len(acc := dict(rp)) == len(rp):
                get = acc.get
                for r, w in dr:
                    acc[r] = get(r, 0) + w
                rnew = list(filter(weight_of, acc.items()))
            else:
                rnew = merge_r(rp, dr)
            if dl is None:
                lnew = lp
            elif plain_l and lp and len(acc := dict(lp)) == len(lp):
                get = acc.get
                for r, w in dl:
                    acc[r] = get(r, 0) + w
                lnew = list(filter(weight_of, acc.items()))
            else:
                lnew = merge_l(lp, dl)
            if len(lnew) > hot or len(rnew) > hot:
                rest.append((kb, h, (lp, rp)))  # a side grows hot: the general path moves it
                continue
            if dr is not None and lp:  # A ⋈ ΔB
                for lrow, lw in lp:
                    for rrow, w in dr:
                        append_row(lrow + rrow)
                        append_w(lw * w)
            if dl is not None and rnew:  # ΔA ⋈ B'
                for lrow, w in dl:
                    for rrow, rw in rnew:
                        append_row(lrow + rrow)
                        append_w(w * rw)
            if lnew or rnew:
                put_heads.append(h)
                put_values.append(dumps((lnew, rnew), 5))
            elif v is not None:
                deletes.append(h)
        self.table.put_many(put_heads, put_values)
        for h in deletes:
            self.table.delete(h)
        return rest

    def _matches(
        self,
        sides: dict[bytes, SideStates],
        others: dict[bytes, SideStates],
        other_totals: WeightCounters | None,
    ) -> list[RowState]:
        """Set matched_old/new on the rows of ``sides`` (which covers every changed key)."""
        flat: list[RowState] = []
        if other_totals is None:  # per-row match counts
            for st in sides.values():
                for s in st.rows:
                    s.matched_old = s.count_old > 0
                    s.matched_new = s.count_new > 0
                flat.extend(st.rows)
            return flat
        kbs = list(sides)
        for kb, old in zip(kbs, other_totals.read(kbs), strict=True):
            new = old + weight_delta(others[kb].changed)
            other_totals.stage(kb, old, new)
            m_old, m_new = old > 0, new > 0
            lst = sides[kb].rows
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

    For semi and anti joins without a residual: the right rows themselves are never stored (the
    right part of every key entry stays empty), and a key's left rows are returned only when that
    key's left rows changed or its right total crossed zero. With ``keep_null_left`` the left rows
    with a NULL key are stored too (under the NULL key, which never has a right total), for the
    null-aware anti join that must emit them later.
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
        self.store = KeyArrangement(table, False, False)
        self.totals = WeightCounters(table, RIGHT_TOTALS)

    def step(self, d_left: DiffBatch, d_right: DiffBatch, rescan_all: bool = False) -> MatchStep:
        """Apply the deltas; with ``rescan_all`` every stored left row is returned, not only the
        rows whose weight or match state changed."""
        out = MatchStep()
        gl, out.left_nulls, _ = group_deltas(d_left, self.left_key, self.keep_null_left)
        gr, out.right_nulls, _ = group_deltas(d_right, self.right_key)
        d_totals = {kb: sum(w for _, w in items) for kb, items in gr.items()}
        d_totals = {kb: d for kb, d in d_totals.items() if d}
        kbs = list(gl.keys() | d_totals.keys())
        totals = {}
        for kb, old in zip(kbs, self.totals.read(kbs), strict=True):
            new = old + d_totals.get(kb, 0)
            totals[kb] = (old, new)
            self.totals.stage(kb, old, new)
        out.right_totals = {kb: totals[kb] for kb in d_totals}
        store = self.store
        crossing = {kb for kb, (old, new) in totals.items() if (old > 0) != (new > 0)}
        if rescan_all:
            stored = store.read_all()
            missing = gl.keys() - {kb for kb, _, _ in stored}
            keys = stored + (store.read(missing) if missing else [])
        else:
            keys = store.read(gl.keys() | crossing)
        unresolved: list[tuple[bytes, bytes, RowState]] = []
        sides = {}
        for kb, _, (lp, _) in keys:
            full = rescan_all or kb in crossing
            sides[kb] = store.states(kb, LEFT, lp, gl.get(kb), full, unresolved)
        store.resolve(unresolved)
        missing = [kb for kb in sides if kb not in totals]
        for kb, old in zip(missing, self.totals.read(missing), strict=True):
            totals[kb] = (old, old)
        for kb, st in sides.items():
            old, new = totals[kb]
            for s in st.rows:
                s.matched_old = old > 0
                s.matched_new = new > 0
            out.left_rows.extend(st.rows)
        for kb, head, (_, rp) in keys:
            left, changed = store.stage_side(kb, LEFT, sides[kb])
            if changed:
                store.stage_entry(head, left, rp)
        return out
