"""ReduceCollection: GROUP BY with aggregates (or a global aggregate), maintained incrementally.

Per group it keeps one record ``G|encode_key(group)`` holding the group's row count, one
accumulator per aggregate and the output row it last emitted (which starts with the group key as
first seen), so that every change is retracted exactly (``-old +new``), also for min/max.
Aggregates that are not sums keep per-group multisets in the same column family, under the
prefix-free keys ``kind|slot|len(group)|group|...``: min/max of one (argument, FILTER) share a
sorted multiset keyed with ``encode_sortable`` (value -> count ++ pickled value) whose
accumulator is the key of the first/last live entry, so only a delete of the current extreme
makes it scan, and only up to the next live entry; count(DISTINCT) keeps value -> count;
string_agg keeps its entries in ORDER BY order and re-reads a touched group's entries. A time
reads all its touched groups with one ``get_many`` and each multiset's touched entries with one
more. This collection must not hold state in memory between times (everything is in RocksDB,
so a restart resumes it) and must not emit an output row that it does not store as the group's
last output.
"""

from __future__ import annotations

import decimal
import functools
import pickle
from collections.abc import Sequence
from itertools import compress, repeat
from operator import itemgetter
from typing import Any

from engine.dataflow import aggregates as A
from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.nan import loads
from engine.dataflow.state.keycodec import encode_key, encode_sortable, encode_sortable_value

_GROUP = b"G"
_dumps = pickle.dumps
_loads = loads  # NaN values come back as the shared NaN objects (engine.dataflow.nan)
_SUM_KINDS = frozenset({"sum", "avg"})
_COUNT_KINDS = frozenset({"count_star", "count"})
_BOOL_KINDS = frozenset({"bool_and", "bool_or"})


def _count_bytes(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def _bytes_count(b: bytes) -> int:
    return int.from_bytes(b, "big", signed=True)


class ReduceCollection(StatefulCollection):
    """``group_key`` column indices (empty: one global row) and the aggregates, in output order."""

    updates_output = True

    tuning = "point"

    def __init__(self, group_key: Sequence[int], aggregates: Sequence[Aggregate]) -> None:
        super().__init__()
        self.group_key = tuple(group_key)
        self.aggregates = tuple(aggregates)
        # a global aggregate has a row from the first time on, even over an empty input
        self.always_process = not self.group_key  # type: ignore[misc]
        if len(self.group_key) == 1:
            (i,) = self.group_key
            get = itemgetter(i)
            self._key_of = get
            self._key_tuple = lambda k: (k,)
        elif self.group_key:
            self._key_of = itemgetter(*self.group_key)
            self._key_tuple = lambda k: k
        # multisets ("slots"): min/max of one (arg, filter) share a slot
        self._slots: list[tuple] = []
        self._agg_slot: list[int | None] = []
        for agg in self.aggregates:
            if agg.kind in ("min", "max"):
                spec: tuple | None = (b"M", agg.arg, agg.filter)
            elif agg.kind == "count_distinct":
                spec = (b"D", agg.arg, agg.filter)
            elif agg.kind in A.ORDERED_KINDS:  # string_agg, array_agg (separator None)
                desc = agg.descending or (False,) * len(agg.order_by)
                nulls = agg.nulls_first or (None,) * len(agg.order_by)
                spec = (b"S", agg.arg, agg.filter, agg.order_by, desc, agg.separator, nulls)
            else:
                spec = None
            if spec is None:
                self._agg_slot.append(None)
            else:
                if spec not in self._slots:
                    self._slots.append(spec)
                self._agg_slot.append(self._slots.index(spec))
        if len(self._slots) > 0xFFFF:
            raise ValueError("ReduceCollection supports at most 65535 multiset aggregates")
        self._slot_heads = [spec[0] + i.to_bytes(2, "big") for i, spec in enumerate(self._slots)]

    def describe(self) -> str:
        group = ",".join(map(str, self.group_key))
        aggs = ", ".join(a.describe() for a in self.aggregates)
        return f"Reduce: group=[{group}] aggs=[{aggs}]"

    # -- layout --------------------------------------------------------------------------------
    def _slot_prefix(self, slot: int, group: bytes) -> bytes:
        """Prefix of a group's entries in a multiset slot; prefix-free across groups and slots."""
        return self._slot_heads[slot] + len(group).to_bytes(4, "big") + group

    @staticmethod
    def _initial(kind: str) -> Any:
        if kind in _COUNT_KINDS or kind == "count_distinct":
            return 0
        if kind in _BOOL_KINDS:
            return (0, 0)
        return None  # sum/avg (no value yet), min/max (no entry), string_agg (unused)

    # -- the time's work -----------------------------------------------------------------------
    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        with decimal.localcontext(A.EXACT):
            return self._process(deltas[0])

    def _group(self, rows: list[Row]) -> tuple[list[bytes], list[tuple], list[int]]:
        """(encoded group keys, representatives, group index of each row)."""
        if not self.group_key:
            return [encode_key(())], [()], [0] * len(rows)
        raw = list(map(self._key_of, rows))
        uniq = list(dict.fromkeys(raw))  # Python equality is SQL equality, except for NaN
        tuples = list(map(self._key_tuple, uniq))
        encoded = list(map(encode_key, tuples))
        index = dict(zip(uniq, range(len(uniq)), strict=True))
        if len(set(encoded)) == len(encoded):
            return encoded, tuples, list(map(index.__getitem__, raw))
        slot_of: dict[bytes, int] = {}  # NaN keys: merge groups whose encodings coincide
        for e in encoded:
            slot_of.setdefault(e, len(slot_of))
        remap = [slot_of[e] for e in encoded]
        keys = list(slot_of)
        reps: list[tuple] = [()] * len(keys)
        for e, t in zip(reversed(encoded), reversed(tuples), strict=True):
            reps[slot_of[e]] = t
        return keys, reps, [remap[index[k]] for k in raw]

    def _process(self, delta: DiffBatch) -> DiffBatch:
        rows, weights = delta.rows, delta.weights
        keys, reps, gidx = self._group(rows)
        ngroups = len(keys)
        table = self.table
        assert table is not None
        gkeys = [_GROUP + k for k in keys]
        raw_recs = table.get_many(gkeys)
        if not rows and (not raw_recs or raw_recs[0] is not None):
            return DiffBatch()  # nothing changed (a global aggregate's row already exists)

        # records: (row count, accumulators, last output row); the output starts with the key
        aggs = self.aggregates
        nagg = len(aggs)
        nkey = len(self.group_key)
        initial = [self._initial(a.kind) for a in aggs]
        counts = [0] * ngroups
        accs: list[list] = [None] * ngroups  # type: ignore[list-item]
        old_out: list[Row | None] = [None] * ngroups
        for g, raw in enumerate(raw_recs):
            if raw is None:
                accs[g] = list(initial)
            else:
                counts[g], accs[g], old = _loads(raw)
                old_out[g] = old
                reps[g] = old[:nkey]
        for g, w in zip(gidx, weights, strict=True):
            counts[g] += w

        inputs = _Inputs(rows, weights, gidx)
        # values of min/max/string_agg that changed: ai -> {group: value}; others are as last output
        new_values: dict[int, dict[int, Any]] = {}
        if self._slots:
            gprefix = [len(k).to_bytes(4, "big") + k for k in keys]
        for slot, spec in enumerate(self._slots):
            ais = [ai for ai in range(nagg) if self._agg_slot[ai] == slot]
            arrays = spec[0] == b"S" and spec[5] is None  # array_agg keeps NULL elements
            G, V, W = inputs.values(spec[1], spec[2], with_nulls=arrays)
            if not G:
                continue
            if spec[0] == b"M":
                self._update_minmax(slot, ais, gprefix, accs, G, V, W, new_values)
            elif spec[0] == b"D":
                self._update_distinct(slot, ais, gprefix, accs, G, V, W)
            else:
                ordered = inputs.columns(spec[3]) if spec[3] else None
                values = self._update_string_agg(slot, gprefix, G, V, W, inputs, ordered)
                for ai in ais:
                    new_values[ai] = values

        for ai, agg in enumerate(aggs):
            kind = agg.kind
            if kind == "count_star":
                G, W = inputs.rows(agg.filter)
                for g, w in zip(G, W, strict=True):
                    accs[g][ai] += w
            elif kind == "count":
                G, _, W = inputs.values(agg.arg, agg.filter)
                for g, w in zip(G, W, strict=True):
                    accs[g][ai] += w
            elif kind in _SUM_KINDS:
                G, V, W = inputs.values(agg.arg, agg.filter)
                merge = A.sum_merge
                for g, d in _sum_deltas(G, V, W, ngroups).items():
                    acc = accs[g]
                    acc[ai] = merge(acc[ai], d)
            elif kind in A.MOMENT_KINDS:
                G, V, W = inputs.values(agg.arg, agg.filter)
                squares = A.square_deltas(G, V, W)
                for g, d in _sum_deltas(G, V, W, ngroups).items():
                    acc = accs[g]
                    acc[ai] = A.moments_merge(acc[ai], d, squares.get(g, 0))
            elif kind in _BOOL_KINDS:
                G, V, W = inputs.values(agg.arg, agg.filter)
                dt: dict[int, int] = {}
                df: dict[int, int] = {}
                for g, v, w in zip(G, V, W, strict=True):
                    if v:
                        dt[g] = dt.get(g, 0) + w
                    else:
                        df[g] = df.get(g, 0) + w
                for g in dt.keys() | df.keys():
                    t, f = accs[g][ai]
                    accs[g][ai] = (t + dt.get(g, 0), f + df.get(g, 0))

        # the aggregates' values, column by column
        columns: list[list] = []
        for ai, agg in enumerate(aggs):
            final = _FINAL[agg.kind]
            if final is None:  # min/max/string_agg: as last emitted unless changed
                changed = new_values.get(ai, {})
                pos = nkey + ai
                columns.append(
                    [
                        changed[g] if g in changed else (o[pos] if o is not None else None)
                        for g, o in enumerate(old_out)
                    ]
                )
            elif final is _identity:
                columns.append([acc[ai] for acc in accs])
            else:
                columns.append([final(acc[ai]) for acc in accs])
        values_of = zip(*columns, strict=True) if columns else repeat((), ngroups)

        # -old +new per changed group; stage the records
        out_rows: list[Row] = []
        out_weights: list[int] = []
        put = table.put
        vanish = bool(self.group_key)
        for g, values in enumerate(values_of):
            old = old_out[g]
            if vanish and counts[g] <= 0:
                if old is not None:
                    out_rows.append(old)
                    out_weights.append(-1)
                    table.delete(gkeys[g])
                continue
            new = reps[g] + values
            if old != new:
                if old is not None:
                    out_rows.append(old)
                    out_weights.append(-1)
                out_rows.append(new)
                out_weights.append(1)
            else:
                new = old  # equal under SQL equality: keep the row downstream already holds
            put(gkeys[g], _dumps((counts[g], accs[g], new), 5))
        return DiffBatch(out_rows, out_weights)

    # -- multisets -----------------------------------------------------------------------------
    def _update_minmax(
        self,
        slot: int,
        ais: list[int],
        gprefix: list[bytes],
        accs: list[list],
        G: list[int],
        V: list[Any],
        W: list[int],
        new_values: dict[int, dict[int, Any]],
    ) -> None:
        """Entries ``key -> count ++ pickle(value)``; a min/max accumulator is the key of the
        group's first/last live entry (its value is in the last output row, or in ``new_values``
        for the groups whose extreme moved)."""
        table = self.table
        assert table is not None
        head = self._slot_heads[slot]
        hp = [head + p for p in gprefix]
        ks = list(map(bytes.__add__, map(hp.__getitem__, G), map(encode_sortable_value, V)))
        position = dict(zip(ks, range(len(ks)), strict=True))  # entry -> a row of that value
        if len(position) == len(ks):
            dws = dict(zip(ks, W, strict=True))
        else:
            dws = {}
            for k, w in zip(ks, W, strict=True):
                dws[k] = dws.get(k, 0) + w
        entry_keys = sorted(dws)  # locality, and each group's entries in ascending order
        first_live: dict[int, bytes] = {}
        last_live: dict[int, bytes] = {}
        killed: dict[int, set[bytes]] = {}
        put = table.put
        delete = table.delete
        from_bytes = int.from_bytes
        for k, old in zip(entry_keys, table.get_many(entry_keys), strict=True):
            dw = dws[k]
            if old is not None:
                if dw:
                    n = from_bytes(old[:8], "big", signed=True) + dw
                    if n > 0:
                        put(k, n.to_bytes(8, "big", signed=True) + old[8:])
                    else:
                        delete(k)
                        g = G[position[k]]
                        if g in killed:
                            killed[g].add(k)
                        else:
                            killed[g] = {k}
                        continue
            elif dw > 0:
                put(k, dw.to_bytes(8, "big", signed=True) + _dumps(V[position[k]], 5))
            else:
                continue
            g = G[position[k]]
            if g not in first_live:
                first_live[g] = k
            last_live[g] = k
        for kind, live, reverse in (("min", first_live, False), ("max", last_live, True)):
            group_ais = [ai for ai in ais if self.aggregates[ai].kind == kind]
            if not group_ais:
                continue
            first = group_ais[0]
            moved: dict[int, Any] = {}
            for g in live.keys() | killed.keys():  # other groups keep their extreme
                acc = accs[g]
                old = acc[first]
                candidate = live.get(g)
                kills = killed.get(g)
                scanned = None
                if old is not None and kills is not None and old in kills:
                    old = None
                    for k, raw in table.scan_prefix(hp[g], reverse=reverse):
                        if k not in kills:
                            old = k
                            scanned = raw
                            break
                if old is None or (
                    candidate is not None and (candidate > old if reverse else candidate < old)
                ):
                    new = candidate
                else:
                    new = old
                if new != acc[first]:
                    if new is None:
                        moved[g] = None
                    elif new in position:
                        moved[g] = V[position[new]]
                    else:
                        moved[g] = _loads(scanned[8:])  # type: ignore[index]
                    for ai in group_ais:
                        acc[ai] = new
            for ai in group_ais:
                new_values[ai] = moved

    def _update_distinct(
        self,
        slot: int,
        ais: list[int],
        gprefix: list[bytes],
        accs: list[list],
        G: list[int],
        V: list[Any],
        W: list[int],
    ) -> None:
        table = self.table
        assert table is not None
        prefixes: dict[int, bytes] = {}
        touched: dict[bytes, list] = {}
        for g, v, w in zip(G, V, W, strict=True):
            p = prefixes.get(g)
            if p is None:
                p = prefixes[g] = self._slot_heads[slot] + gprefix[g]
            k = p + encode_key((v,))
            e = touched.get(k)
            if e is None:
                touched[k] = [g, w]
            else:
                e[1] += w
        entry_keys = list(touched)
        change: dict[int, int] = {}
        for k, old, (g, dw) in zip(
            entry_keys, table.get_many(entry_keys), touched.values(), strict=True
        ):
            if not dw:
                continue
            before = _bytes_count(old) if old is not None else 0
            after = before + dw
            if after > 0:
                table.put(k, _count_bytes(after))
            elif old is not None:
                table.delete(k)
            step = (after > 0) - (before > 0)
            if step:
                change[g] = change.get(g, 0) + step
        for g, step in change.items():
            for ai in ais:
                accs[g][ai] += step

    def _update_string_agg(
        self,
        slot: int,
        gprefix: list[bytes],
        G: list[int],
        V: list[Any],
        W: list[int],
        inputs: _Inputs,
        ordered: list[tuple] | None,
    ) -> dict[int, Any]:
        """Apply the entries' changes; returns the new string of every touched group."""
        table = self.table
        assert table is not None
        spec = self._slots[slot]
        desc = (*spec[4], False)
        agg = self.aggregates[self._agg_slot.index(slot)]
        arrays = spec[5] is None
        if ordered is not None:
            keep = inputs.keep(spec[1], spec[2], with_nulls=arrays)
            order_values = list(compress(ordered, keep))
            sort_keys = [
                encode_sortable(o, desc[:-1], spec[6]) + _tiebreak(v)
                for o, v in zip(order_values, V, strict=True)
            ]
        else:
            sort_keys = list(map(_tiebreak, V))
        per_group: dict[int, dict[bytes, list]] = {}
        for g, v, w, sk in zip(G, V, W, sort_keys, strict=True):
            t = per_group.setdefault(g, {})
            e = t.get(sk)
            if e is None:
                t[sk] = [v, w]
            else:
                e[1] += w
        result: dict[int, Any] = {}
        for g, changes in per_group.items():
            prefix = self._slot_heads[slot] + gprefix[g]
            cut = len(prefix)
            entries = {k[cut:]: _loads(raw) for k, raw in table.scan_prefix(prefix)}
            for sk, (v, dw) in changes.items():
                if not dw:
                    continue
                old = entries.get(sk)
                if old is not None:
                    v, n = old
                    n += dw
                else:
                    n = dw
                if n > 0:
                    entries[sk] = (v, n)
                    table.put(prefix + sk, _dumps((v, n), 5))
                elif old is not None:
                    del entries[sk]
                    table.delete(prefix + sk)
            if not entries:
                result[g] = None
                continue
            parts: list[Any] = []
            for sk in sorted(entries):
                v, n = entries[sk]
                parts.extend([v] * n)
            if arrays:
                result[g] = tuple(parts)
                continue
            sep: Any = agg.separator
            if isinstance(parts[0], bytes):
                sep = sep.encode()
            result[g] = sep.join(parts)
        return result


def _tiebreak(v: Any) -> bytes:
    """A value's bytes in an ordered aggregate's entry key after its ORDER BY values: its sort
    encoding where it has one (string_agg without ORDER BY orders by value), else a pickle
    (uuid, arrays: only their identity matters)."""
    try:
        return encode_sortable_value(v)
    except TypeError:
        return b"\xff" + _dumps(v, 5)


class _Inputs:
    """Columns of one time's delta, filtered per (argument, FILTER), computed once each."""

    def __init__(self, rows: list[Row], weights: list[int], gidx: list[int]) -> None:
        self._rows = rows
        self._weights = weights
        self._gidx = gidx
        self._masks: dict[int, list[bool]] = {}
        self._keep: dict[tuple, list[bool] | None] = {}
        self._values: dict[tuple, tuple[list, list, list]] = {}

    def _mask(self, filt: int) -> list[bool]:
        m = self._masks.get(filt)
        if m is None:
            m = self._masks[filt] = [r[filt] is True for r in self._rows]
        return m

    def rows(self, filt: int | None) -> tuple[list[int], list[int]]:
        """(group index, weight) of the rows passing ``filt`` (count(*))."""
        if filt is None:
            return self._gidx, self._weights
        m = self._mask(filt)
        return list(compress(self._gidx, m)), list(compress(self._weights, m))

    def keep(self, arg: int, filt: int | None, with_nulls: bool = False) -> list[bool]:
        """Which rows count for an aggregate of column ``arg``: non-NULL (unless
        ``with_nulls``: array_agg) and passing ``filt``."""
        k = (arg, filt, with_nulls)
        if k not in self._keep:
            col = [r[arg] for r in self._rows]
            if with_nulls:
                self._keep[k] = [True] * len(col) if filt is None else self._mask(filt)
            elif filt is None:
                self._keep[k] = [v is not None for v in col]
            else:
                self._keep[k] = [
                    v is not None and f for v, f in zip(col, self._mask(filt), strict=True)
                ]
        return self._keep[k]  # type: ignore[return-value]

    def values(
        self, arg: int, filt: int | None, with_nulls: bool = False
    ) -> tuple[list[int], list[Any], list[int]]:
        """(group index, value, weight) of the rows with a non-NULL ``arg`` (any, ``with_nulls``)
        passing ``filt``."""
        k = (arg, filt, with_nulls)
        got = self._values.get(k)
        if got is None:
            col = [r[arg] for r in self._rows]
            keep = self.keep(arg, filt, with_nulls)
            if all(keep):
                got = (self._gidx, col, self._weights)
            else:
                got = (
                    list(compress(self._gidx, keep)),
                    list(compress(col, keep)),
                    list(compress(self._weights, keep)),
                )
            self._values[k] = got
        return got

    def columns(self, cols: tuple[int, ...]) -> list[tuple]:
        """The tuples of columns ``cols`` of every row (string_agg's ORDER BY values)."""
        return [tuple(r[c] for c in cols) for r in self._rows]


def _sum_deltas(G: list[int], V: list[Any], W: list[int], ngroups: int) -> dict[int, list]:
    """Per group the delta of a sum accumulator (see ``aggregates``) from non-NULL values."""
    if set(map(type, V)) <= {int}:
        dn = [0] * ngroups
        ds = [0] * ngroups
        for g, v, w in zip(G, V, W, strict=True):
            dn[g] += w
            ds[g] += v * w
        return {g: [dn[g], ds[g], 0, 0, None, None] for g in set(G)}
    deltas: dict[int, list] = {}
    add = A.sum_add_value
    for g, v, w in zip(G, V, W, strict=True):
        d = deltas.get(g)
        if d is None:
            d = deltas[g] = A.new_sum_acc()
        add(d, v, w)
    return deltas


def _identity(acc: Any) -> Any:
    return acc


_FINAL = {
    "count_star": _identity,
    "count": _identity,
    "count_distinct": _identity,
    "sum": A.sum_result,
    "avg": A.avg_result,
    "min": None,
    "max": None,
    "bool_and": A.bool_and_result,
    "bool_or": A.bool_or_result,
    "string_agg": None,
    "array_agg": None,
    **{kind: functools.partial(A.moments_result, kind) for kind in A.MOMENT_KINDS},
}
