"""ReduceCollection: GROUP BY with aggregates (or a global aggregate), maintained incrementally.

Per group it keeps one record ``G|encode_key(group)`` holding the group's row count, one
accumulator per aggregate and the output row it last emitted (which starts with the group key as
first seen), so that every change is retracted exactly (``-old +new``), also for min/max.
Aggregates that are not sums keep per-group multisets in the same column family
(``reduce_multisets``: min/max, count(DISTINCT), string_agg). A time reads all its touched groups
with one ``get_many`` and each multiset's touched entries with one more. This collection must not hold state in memory between times (everything is in RocksDB,
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
from engine.dataflow.collections.reduce_multisets import MultisetAggregates
from engine.dataflow.nan import loads
from engine.dataflow.state.keycodec import encode_key

_GROUP = b"G"
_dumps = pickle.dumps
_loads = loads  # NaN values come back as the shared NaN objects (engine.dataflow.nan)
_SUM_KINDS = frozenset({"sum", "avg"})
_COUNT_KINDS = frozenset({"count_star", "count"})
_BOOL_KINDS = frozenset({"bool_and", "bool_or"})


class ReduceCollection(MultisetAggregates, StatefulCollection):
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
