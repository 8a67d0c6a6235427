"""ColumnarReduceCollection: GROUP BY with count/sum/avg/min/max, a time's delta at once in arrays.

The same contract and output as ``ReduceCollection`` (one row per group: the group key, then the
aggregates; ``-old +new`` when a group's row changes) for the aggregates that decompose into
fixed-width sums: ``count(*)``, ``count(x)``, ``sum(x)`` and ``avg(x)`` over integers and
numerics of a known scale, each with an optional FILTER column; and ``min(x)``, ``max(x)`` and
``count(DISTINCT x)`` over integers, numerics of a known scale, dates and timestamps, whose
per-group value multisets live in ``columnar.value_counts`` (the record keeps the current
extreme, or the number of distinct values). A time's delta is turned into
Arrow columns once; ``kernels.group_index`` finds its groups, per-group sums are numpy
reductions, the groups' records (row count; per aggregate a count, or a non-NULL count, an exact
128-bit sum of the unscaled values and a numeric-NaN count) come from ``GroupTable`` in one
batch read and go back in one write batch. No pickle, no Decimal arithmetic per row; Python
runs per *group* only to turn changed records into output rows (avg's Postgres division scale).

``supports(...)`` says whether a GROUP BY can run here; the physical planner falls back to
``ReduceCollection`` otherwise (string_agg, bool_*, floats, min/max/count DISTINCT of text,
numeric of unknown scale, group keys without an exact Arrow type). This collection must not emit a row it
could not rebuild from the group's record and key: the key values of the output come from the
time's input rows, which is exact because every supported key type has one representation per
value (-0.0 is emitted as 0.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.aggregates import EXACT, Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar import key_columns, value_counts
from engine.dataflow.columnar.arrow_types import (
    NUMERIC_TEXT,
    ColumnConversionError,
    decimals,
    to_arrow_column,
    to_python,
    unscaled_int64,
)
from engine.dataflow.columnar.group_table import GroupTable
from engine.dataflow.columnar.time_columns import TimeColumns
from engine.dataflow.nan import NUMERIC_NAN
from engine.dataflow.state.store import StateStore
from engine.numeric import (
    pg_numeric_div_many,
    pg_numeric_div_text_array,
    pg_numeric_div_texts,
)

_KINDS = frozenset({"count_star", "count", "sum", "avg", "min", "max", "count_distinct"})
#: aggregates computed from a per-group multiset of their argument's values (value_counts)
_MULTISET_KINDS = frozenset({"min", "max", "count_distinct"})
_GLOBAL_KEY = b"\x00global"


def supports(
    group_types: Sequence[pa.DataType | None],
    aggregates: Sequence[Aggregate],
    column_types: Sequence[pa.DataType | None],
) -> bool:
    """Whether ``ColumnarReduceCollection`` computes this GROUP BY (``column_types``: the Arrow
    type of each input column, None where it has none)."""
    if any(t is None for t in group_types):
        return False
    for a in aggregates:
        if a.kind not in _KINDS:
            return False
        if a.kind in ("sum", "avg"):
            t = column_types[a.arg]
            if t is None or not (pa.types.is_integer(t) or pa.types.is_decimal(t)):
                return False
        if a.kind in _MULTISET_KINDS and not value_counts.supports(column_types[a.arg]):
            return False
    return True


def sum_arrow_type(arg: pa.DataType | None) -> pa.DataType | None:
    """The Arrow type of every sum this reduce outputs over an argument of type ``arg``:
    ``decimal128(38, s)`` for a decimal of scale s (the 128-bit sum at the argument's scale),
    None otherwise (an integer sum is int64 while it fits, Python ints past it).

    >>> sum_arrow_type(pa.decimal128(31, 4)), sum_arrow_type(pa.int64())
    (Decimal128Type(decimal128(38, 4)), None)
    """
    return pa.decimal128(38, arg.scale) if arg is not None and pa.types.is_decimal(arg) else None


class ColumnarReduceCollection(StatefulCollection):
    """``group_key`` column indices, the aggregates, and the Arrow type of every input column."""

    updates_output = True

    takes_columns = True

    tuning = "point"

    def __init__(
        self,
        group_key: Sequence[int],
        aggregates: Sequence[Aggregate],
        column_types: Sequence[pa.DataType | None],
        cache_bytes: int = 64 << 20,
    ) -> None:
        super().__init__()
        self.group_key = tuple(group_key)
        self.aggregates = tuple(aggregates)
        self.column_types = tuple(column_types)
        if not supports([column_types[i] for i in self.group_key], aggregates, column_types):
            raise ValueError(f"ColumnarReduceCollection cannot compute {self.describe()}")
        self.always_process = not self.group_key  # type: ignore[misc]
        self.cache_bytes = cache_bytes
        fields = [("rows", "<i8")]
        for i, a in enumerate(self.aggregates):
            if a.kind in ("min", "max"):  # the current extreme as a 128-bit integer
                fields += [(f"n{i}", "<i8"), (f"lo{i}", "<u8"), (f"hi{i}", "<i8")]
            elif a.kind in ("sum", "avg"):
                fields += [
                    (f"n{i}", "<i8"),
                    (f"lo{i}", "<u8"),
                    (f"hi{i}", "<i8"),
                    (f"nan{i}", "<i8"),
                ]
            else:
                fields.append((f"n{i}", "<i8"))
        self.dtype = np.dtype(fields)
        self.groups: GroupTable | None = None
        #: (argument, FILTER) of the min/max/count(DISTINCT) aggregates -> their indices (one value
        #: multiset each)
        self.slots: dict[tuple[int, int | None], list[int]] = {}
        for i, a in enumerate(self.aggregates):
            if a.kind in _MULTISET_KINDS:
                self.slots.setdefault((a.arg, a.filter), []).append(i)
        self.multisets: list[value_counts.ValueCounts] = []

    #: the partial-aggregate query population may run instead of feeding the input rows
    #: (``engine.sql.population_aggregate``; set by the physical planner)
    population_query = None
    _preloaded: tuple[list[pa.Array], np.ndarray] | None = None

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        self.groups = GroupTable(self.table, self.dtype, self.cache_bytes)
        self.multisets = [value_counts.ValueCounts(self.table, j) for j in range(len(self.slots))]

    def describe(self) -> str:
        group = ",".join(map(str, self.group_key))
        aggs = ", ".join(a.describe() for a in self.aggregates)
        return f"Reduce (columnar): group=[{group}] aggs=[{aggs}]"

    # -- the time's work -------------------------------------------------------------------------
    def on_time_end(self, time: int) -> DiffBatch:
        """The time's input as it came (sums are linear: no consolidation needed)."""
        delta = DiffBatch.concat(self._pending[0])
        self._pending = [[]]
        if self._preloaded is not None:
            if delta:
                raise RuntimeError(f"{self.describe()}: input rows beside preloaded groups")
            key_cols, records = self._preloaded
            self._preloaded = None
            return self._load(key_cols, records)
        if not delta and not self.always_process:
            return DiffBatch()
        return self.process(time, [delta])

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        inp = TimeColumns(deltas[0], self.column_types)
        n, w = inp.n, inp.weights
        key_cols = [self._key_column(inp, i) for i in self.group_key]
        if key_cols:
            ids, first = K.group_index(key_cols)
            firsts = [K.normalize_floats(c.take(pa.array(first))) for c in key_cols]
            keys, firsts, ids = _in_key_order(firsts, ids)
        else:
            ids, first = np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64)
            keys, firsts = [_GLOBAL_KEY], []
        ngroups = len(keys)

        old, present = self.groups.fetch(keys)
        if not n and present.all():
            self.groups.store(keys, old, present)
            return DiffBatch()  # a global aggregate's row already exists
        new = old.copy()
        new["rows"] += K.group_sums(ids, ngroups, w)
        for i, a in enumerate(self.aggregates):
            self._accumulate(i, a, inp, ids, ngroups, new)
        for j, ((arg, filt), members) in enumerate(self.slots.items()):
            self._multiset_aggregates(j, arg, filt, members, inp, keys, ids, old, new)

        return self._finish(keys, firsts, old, present, new)

    def _finish(self, keys, firsts, old, present, new) -> DiffBatch:
        """Store the groups' new records; the output rows of those that changed."""
        if self.group_key:
            was, alive = present & (old["rows"] > 0), new["rows"] > 0
        else:
            was, alive = present, np.ones(1, dtype=bool)
        same = was & alive & (old == new)
        retract, insert = was & ~same, alive & ~same
        self.groups.store(keys, new, alive)
        try:
            return self._output_columns(firsts, old, retract, new, insert)
        except _NotColumnar:  # numeric NaN, an int sum past 64 bits: Python values
            reps = list(zip(*map(key_columns.key_values, firsts), strict=True)) if firsts else [()]
            return self._output_rows(reps, old, retract, new, insert)

    # -- population from partial aggregates ---------------------------------------------------------
    def preload(self, key_cols: list[pa.Array], parts: list[pa.Array]) -> None:
        """Take the result of ``population_query`` (key columns of the group key's Arrow types;
        the row count, then per aggregate its count and, for sum and avg, its sum as text):
        at the next time, these groups enter the state and the output as if their rows had
        come. Raises (ValueError, ArrowInvalid) when a sum does not fit the record (NaN,
        Infinity, digits past the argument's scale, 38 digits): then nothing was taken."""
        n = len(parts[0])
        rec = np.zeros(n, dtype=self.dtype)
        rec["rows"] = _int64s(parts[0])
        at = 1
        for i, a in enumerate(self.aggregates):
            rec[f"n{i}"] = _int64s(parts[at])
            at += 1
            if a.kind in ("sum", "avg"):
                typ = self.column_types[a.arg]  # type: ignore[index]
                scale = typ.scale if pa.types.is_decimal(typ) else 0
                rec[f"lo{i}"], rec[f"hi{i}"] = _int128s(parts[at], scale)
                at += 1
        if at != len(parts) or any(len(c) != n for c in key_cols):
            raise ValueError("the partial aggregates do not match the reduce")
        # the keys in the reduce's own types: the CDC's rows must find these groups
        wanted = [self.column_types[i] for i in self.group_key]
        key_cols = [c if c.type == t else c.cast(t) for c, t in zip(key_cols, wanted, strict=True)]
        self._preloaded = (key_cols, rec)

    def clear_preload(self) -> None:
        """Forget groups taken by ``preload`` and not applied yet (a population that failed)."""
        self._preloaded = None

    def _load(self, key_cols: list[pa.Array], records: np.ndarray) -> DiffBatch:
        if self.group_key:
            firsts = [K.normalize_floats(c) for c in key_cols]
            keys = K.key_bytes(firsts)
        else:
            firsts, keys = [], [_GLOBAL_KEY]
        old, present = self.groups.fetch(keys)
        if present.any() or len(set(keys)) != len(keys):
            raise RuntimeError(f"{self.describe()}: preloaded groups must be new and distinct")
        return self._finish(keys, firsts, old, present, records)

    def _output_columns(self, firsts, old, retract, new, insert) -> DiffBatch:
        """-old +new rows of the changed groups as one columnar batch."""
        out_old, out_new = np.flatnonzero(retract), np.flatnonzero(insert)
        rec = np.concatenate([old[out_old], new[out_new]])
        take = pa.array(np.concatenate([out_old, out_new]))
        columns = [f.take(take) for f in firsts]
        if any(key_columns.has_specials(c) for c in columns):
            raise _NotColumnar
        columns += [self._final_column(i, a, rec) for i, a in enumerate(self.aggregates)]
        weights = np.concatenate(
            [np.full(len(out_old), -1, dtype=np.int64), np.ones(len(out_new), dtype=np.int64)]
        )
        return DiffBatch.from_columns(columns, weights)

    def _output_rows(self, reps, old, retract, new, insert) -> DiffBatch:
        """The same rows as ``_output_columns``, as tuples."""
        rows: list[tuple] = []
        weights: list[int] = []
        for rec, which, weight in ((old, retract, -1), (new, insert, 1)):
            idx = np.flatnonzero(which)
            sub = rec[idx]
            columns = [
                self._final(i, a, sub, idx, weight > 0) for i, a in enumerate(self.aggregates)
            ]
            values = zip(*columns, strict=True) if columns else [()] * len(idx)
            rows += [reps[j] + v for j, v in zip(idx.tolist(), values, strict=True)]
            weights += [weight] * len(idx)
        return DiffBatch(rows, weights)

    def _key_column(self, inp: TimeColumns, i: int) -> pa.Array:
        col = inp.arrow(i)
        if col is None:  # e.g. a numeric NaN
            col = key_columns.key_column(inp.values(i), self.column_types[i])
        return col

    def _multiset_aggregates(self, j, arg, filt, members, inp, keys, ids, old, new) -> None:
        """Min/max/count(DISTINCT) aggregates ``members`` over (``arg``, ``filt``): the value
        multiset of slot ``j`` takes the time's diffs and gives each group's new extremes and
        distinct counts."""
        col = inp.arrow(arg)
        if col is not None:
            hi, lo, valid = value_counts.wide_column(col)
        else:
            hi, lo, valid = value_counts.wide_exact(inp.values(arg), self.column_types[arg])
        keep = inp.mask(filt)
        if keep is not None:
            valid &= keep
        w = inp.weights
        counted = w * valid
        extremes: dict[int, value_counts.Extreme] = {}
        for i in members:
            kind = self.aggregates[i].kind
            if kind == "count_distinct":
                continue
            new[f"n{i}"] += K.group_sums(ids, len(keys), counted)
            extremes[i] = value_counts.Extreme(
                kind == "max", old[f"hi{i}"], old[f"lo{i}"], old[f"n{i}"] > 0
            )
        sel = np.flatnonzero(counted)
        distinct = self.multisets[j].step(
            keys, ids[sel], hi[sel], lo[sel], w[sel], list(extremes.values())
        )
        for i in members:
            e = extremes.get(i)
            if e is None:  # count(DISTINCT): values whose count rose from 0, minus those that fell
                new[f"n{i}"] += distinct
            else:
                new[f"hi{i}"] = np.where(e.valid, e.hi, 0)
                new[f"lo{i}"] = np.where(e.valid, e.lo, 0)

    def _accumulate(self, i, a, inp: TimeColumns, ids, ngroups, rec) -> None:
        """Add aggregate ``i``'s per-group deltas of this time to the records ``rec``."""
        if a.kind in _MULTISET_KINDS:
            return  # _multiset_aggregates
        keep, w = inp.mask(a.filter), inp.weights
        if a.kind == "count_star":
            rec[f"n{i}"] += K.group_sums(ids, ngroups, w if keep is None else w * keep)
            return
        if a.kind == "count":
            valid = inp.valid(a.arg)
            rec[f"n{i}"] += K.group_sums(
                ids, ngroups, w * (valid if keep is None else valid & keep)
            )
            return
        typ = self.column_types[a.arg]
        col = inp.arrow(a.arg)
        values: list = []
        if col is not None:
            nan = np.zeros(inp.n, dtype=bool)
        else:
            values = inp.values(a.arg)
            col, nan = _sum_input(values, typ)
        if col is not None:
            valid = np.asarray(pc.is_valid(col), dtype=bool)
        else:
            valid = np.fromiter((v is not None for v in values), bool, len(values)) & ~nan
        if keep is not None:
            valid &= keep
            nan &= keep
        counted = w * valid
        rec[f"n{i}"] += K.group_sums(ids, ngroups, counted + w * nan)
        if nan.any():
            rec[f"nan{i}"] += K.group_sums(ids, ngroups, w * nan)
        lo, hi = rec[f"lo{i}"], rec[f"hi{i}"]
        try:
            if col is None:
                raise OverflowError
            unscaled = (
                unscaled_int64(col)
                if pa.types.is_decimal(col.type)
                else np.asarray(pc.fill_null(col, 0), dtype=np.int64)
            )
            big = float(np.abs(unscaled).max(initial=0)) * float(np.abs(w).max(initial=0))
            if big >= 2.0**62:
                raise OverflowError
            sums = K.group_sums(ids, ngroups, unscaled * counted)
            rec[f"lo{i}"], rec[f"hi{i}"] = K.add_int128(lo, hi, sums)
        except (OverflowError, ColumnConversionError):  # exact, in Python ints
            values = values or inp.values(a.arg)
            weighted = [
                _unscaled(v, typ) * c if c else 0
                for v, c in zip(values, counted.tolist(), strict=True)
            ]
            rec[f"lo{i}"], rec[f"hi{i}"] = K.add_int128_ints(
                lo, hi, K.group_sums_exact(ids, ngroups, weighted)
            )

    # -- records -> rows --------------------------------------------------------------------------
    def _final_column(self, i: int, a: Aggregate, rec: np.ndarray) -> pa.Array:
        """The values of aggregate ``i`` from records ``rec`` as an Arrow column."""
        count = rec[f"n{i}"]
        if a.kind in ("count_star", "count", "count_distinct"):
            return pa.array(count, pa.int64())
        if a.kind in ("min", "max"):
            live = count > 0
            if (value_counts.is_special(rec[f"hi{i}"], rec[f"lo{i}"]) & live).any():
                raise _NotColumnar
            return self._extreme_column(i, rec, live)
        nan = rec[f"nan{i}"]
        if (nan[count > 0] > 0).any():
            raise _NotColumnar
        typ = self.column_types[a.arg]
        lo, hi = rec[f"lo{i}"], rec[f"hi{i}"]
        empty = pa.py_buffer(np.packbits(count > 0, bitorder="little"))
        if a.kind == "sum":
            out_type = sum_arrow_type(typ)  # what the planner types this sum as
            if out_type is not None:
                return _decimal_column(lo, hi, out_type.scale, empty)
            if not K.int128_fits_int64(lo, hi):
                raise _NotColumnar
            return pa.Array.from_buffers(
                pa.int64(), len(lo), [empty, pa.py_buffer(np.ascontiguousarray(lo))]
            )
        scale = typ.scale if pa.types.is_decimal(typ) else 0
        live = count > 0
        if K.int128_fits_int64(lo, hi):
            texts = pg_numeric_div_text_array(lo.view(np.int64), scale, np.where(live, count, 1))
            texts = pc.if_else(pa.array(live), texts, pa.scalar(None, pa.string()))
        else:
            idx = np.flatnonzero(live)
            quotients = pg_numeric_div_texts(
                K.int128_to_ints(lo[idx], hi[idx]), scale, count[idx].tolist()
            )
            values: list[str | None] = [None] * len(rec)
            for j, t in zip(idx.tolist(), quotients, strict=True):
                values[j] = t
            texts = pa.array(values, pa.string())
        return pa.ExtensionArray.from_storage(NUMERIC_TEXT, texts)

    def _final(self, i: int, a: Aggregate, rec: np.ndarray, groups, after: bool) -> list:
        """The values of aggregate ``i`` from records ``rec`` (of the time's ``groups``, before or
        ``after`` it)."""
        count = rec[f"n{i}"]
        if a.kind in ("count_star", "count", "count_distinct"):
            return count.tolist()
        if a.kind in ("min", "max"):
            hi, lo = rec[f"hi{i}"], rec[f"lo{i}"]
            special = value_counts.is_special(hi, lo) & (count > 0)
            values = to_python(self._extreme_column(i, rec, (count > 0) & ~special))
            for j in np.flatnonzero(special).tolist():
                values[j] = value_counts.special_value(int(hi[j]), int(lo[j]))
            return values
        typ = self.column_types[a.arg]
        scale = typ.scale if pa.types.is_decimal(typ) else 0
        lo, hi = rec[f"lo{i}"], rec[f"hi{i}"]
        nan = rec[f"nan{i}"]
        out: list = [None] * len(rec)
        ok = (count > 0) & (nan == 0)
        for j in np.flatnonzero((count > 0) & (nan > 0)).tolist():
            out[j] = NUMERIC_NAN
        idx = np.flatnonzero(ok)
        if not len(idx):
            return out
        lo, hi = lo[idx], hi[idx]
        if a.kind == "sum" and pa.types.is_decimal(typ):
            values = _as_decimals(lo, hi, scale)
        else:
            ints = (
                lo.view(np.int64).tolist()
                if K.int128_fits_int64(lo, hi)
                else K.int128_to_ints(lo, hi)
            )
            values = (
                ints if a.kind == "sum" else pg_numeric_div_many(ints, scale, count[idx].tolist())
            )
        for j, v in zip(idx.tolist(), values, strict=True):
            out[j] = v
        return out

    def _extreme_column(self, i: int, rec: np.ndarray, live: np.ndarray) -> pa.Array:
        """Min/max ``i`` of records ``rec`` as a column of its argument's type (NULL where not
        ``live``)."""
        typ = self.column_types[self.aggregates[i].arg]
        lo, hi, n = rec[f"lo{i}"], rec[f"hi{i}"], len(rec)
        validity = pa.py_buffer(np.packbits(live, bitorder="little"))
        if pa.types.is_decimal(typ):
            return _decimal_column(lo, hi, typ.scale, validity)
        v = np.ascontiguousarray(lo.view(np.int64))
        if pa.types.is_date32(typ):
            return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(v.astype(np.int32))])
        out_type = typ if pa.types.is_timestamp(typ) else pa.int64()
        return pa.Array.from_buffers(out_type, n, [validity, pa.py_buffer(v)])


class _NotColumnar(Exception):
    """A value an Arrow column of the output cannot hold (the time's output goes as tuples)."""


def _decimal_column(lo: np.ndarray, hi: np.ndarray, scale: int, validity=None) -> pa.Array:
    """128-bit unscaled integers as a decimal128(38, scale) column (exact)."""
    words = np.empty((len(lo), 2), dtype="<i8")
    words[:, 0], words[:, 1] = lo.view(np.int64), hi
    return pa.Array.from_buffers(pa.decimal128(38, scale), len(lo), [validity, pa.py_buffer(words)])


def _as_decimals(lo: np.ndarray, hi: np.ndarray, scale: int) -> list[Decimal]:
    """128-bit unscaled integers as Decimals with ``scale`` decimals (exact)."""
    return decimals(_decimal_column(lo, hi, scale))


def _sum_input(values: list, typ: pa.DataType) -> tuple[pa.Array | None, np.ndarray]:
    """(the values as an Arrow column, or None if one exceeds decimal128; the numeric-NaN mask).

    No numeric of a known scale holds +-Infinity (Postgres refuses them in numeric(p,s))."""
    nan = np.zeros(len(values), dtype=bool)
    try:
        return to_arrow_column(values, typ), nan
    except ColumnConversionError:
        pass
    nan = np.fromiter((v is not None and v != v for v in values), bool, len(values))
    try:
        return to_arrow_column([None if v != v else v for v in values], typ), nan
    except ColumnConversionError:
        return None, nan


def _unscaled(v: object, typ: pa.DataType) -> int | None:
    """A value as the integer of its column's scale (exact; the slow path of big sums)."""
    if v is None or v != v:  # NULL, numeric NaN (counted apart)
        return None
    if isinstance(v, Decimal):
        return int(v.scaleb(typ.scale, context=EXACT))
    return int(v)  # type: ignore[call-overload]


def _int64s(col: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(col, 0), dtype=np.int64)


def _int128s(text: pa.Array, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of the unscaled 128-bit values of decimal texts at ``scale`` (NULL: 0)."""
    hi, lo, _ = value_counts.wide_column(pc.cast(text, pa.decimal128(38, scale)))
    return lo, hi


def _in_key_order(
    firsts: list[pa.Array], ids: np.ndarray
) -> tuple[list[bytes], list[pa.Array], np.ndarray]:
    """The groups' keys, key columns and the rows' group ids, renumbered in the byte order of
    the keys (``kernels.byte_order``): the group records, and the value entries under them (the
    group's key, then the value's), are then read and written in RocksDB's order."""
    raw = K.key_bytes_array(firsts)
    order, rank = K.byte_order(raw)
    return raw.take(order).to_pylist(), [c.take(order) for c in firsts], rank[ids]
