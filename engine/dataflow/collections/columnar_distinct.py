"""ColumnarDistinctCollection: SELECT DISTINCT / UNION, a whole time's delta at once in arrays.

The same contract and output as ``DistinctCollection``: ``+row`` when a row's net count rises
from zero, ``-row`` when it falls to zero, nothing while it stays positive, rows equal under
SQL's "not distinct" (NULL = NULL, NaN = NaN, 1.0 = 1.00, -0.0 = 0.0) counted together. A time's
delta becomes Arrow columns once (or is already columnar); ``kernels.group_index`` finds its
distinct rows, ``kernels.group_sums`` their net weights, ``kernels.key_bytes`` their state keys;
``GroupTable`` reads the changed rows' counts in one batch and stages them in one write batch.

State: one entry per distinct row, key = ``key_bytes`` of the row, value = a fixed-width numpy
record (the count as int64, then per float column one byte: the stored representative is -0.0),
no pickle. The output row is built from the time's input (the first occurrence of the row),
which is the stored representative for every supported type: integers, booleans, text, dates,
timestamps and numerics of a known scale have one representation per value (numerics are held
at the column's scale), a float NaN is the shared NaN, and the one float with two
representations, zero, takes its sign from the record. A value its Arrow type cannot hold (a
numeric NaN, more digits than decimal128) is keyed by ``encode_key`` in a suffix and sends that
time's output as tuples. This collection must not keep rows in memory between times beyond
``GroupTable``'s bounded cache of counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar.arrow_types import ColumnConversionError, to_arrow_column, to_python
from engine.dataflow.columnar.group_table import GroupTable
from engine.dataflow.columnar.time_columns import compatible
from engine.dataflow.state.keycodec import encode_key
from engine.dataflow.state.store import StateStore

_NEG_ZERO = pa.scalar(-0.0, pa.float64())
#: starts the key suffix of a row holding a value its column's Arrow type cannot hold
_ODD = b"\xff"


def _supported(t: pa.DataType | None) -> bool:
    if t is None or isinstance(t, pa.ExtensionType):
        return False
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
        or (pa.types.is_timestamp(t) and t.tz is None)
    )


def supports(column_types: Sequence[pa.DataType | None]) -> bool:
    """Whether ``ColumnarDistinctCollection`` computes DISTINCT over rows of these column types
    (the Arrow type holding every value of each column exactly, None where there is none).

    >>> supports([pa.int64(), pa.decimal128(12, 2), pa.date32(), pa.string()])
    True
    >>> supports([pa.int64(), None])
    False
    """
    return bool(column_types) and all(_supported(t) for t in column_types)


class ColumnarDistinctCollection(StatefulCollection):
    """DISTINCT over rows whose columns have the Arrow types ``column_types``."""

    takes_columns = True

    tuning = "point"

    def __init__(
        self, column_types: Sequence[pa.DataType | None], cache_bytes: int = 64 << 20
    ) -> None:
        super().__init__()
        self.column_types = tuple(column_types)
        if not supports(self.column_types):
            raise ValueError(
                f"ColumnarDistinctCollection cannot hold columns of types {self.column_types}"
            )
        self.floats = tuple(i for i, t in enumerate(self.column_types) if pa.types.is_floating(t))
        self.dtype = np.dtype([("n", "<i8")] + [(f"z{i}", "u1") for i in self.floats])
        self.cache_bytes = cache_bytes
        self.groups: GroupTable | None = None

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        self.groups = GroupTable(self.table, self.dtype, self.cache_bytes)

    def describe(self) -> str:
        return "Distinct (columnar)"

    # -- the time's work -------------------------------------------------------------------------
    def on_time_end(self, time: int) -> DiffBatch:
        """The time's input as it came (counts are sums: no consolidation needed)."""
        delta = DiffBatch.concat(self._pending[0])
        self._pending = [[]]
        if not delta:
            return DiffBatch()
        return self.process(time, [delta])

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        delta = deltas[0]
        columns, odd = self._columns(delta)
        suffix = odd.suffixes(len(delta)) if odd else None
        ids, first = K.group_index(columns if suffix is None else [*columns, suffix])
        dw = K.group_sums(ids, len(first), delta.column_weights)
        changed = np.flatnonzero(dw)
        if not len(changed):
            return DiffBatch()
        rep = first[changed]  # each changed row's first occurrence in the delta
        firsts = [c.take(pa.array(rep)) for c in columns]
        raw = K.key_bytes_array(firsts)
        if suffix is None:  # in the keys' byte order: read and written in RocksDB's order
            order, _ = K.byte_order(raw)
            keys = raw.take(order).to_pylist()
            changed, rep = changed[order], rep[order]
            firsts = [c.take(order) for c in firsts]
        else:
            keys = raw.to_pylist()
            tails = suffix.take(pa.array(rep)).to_pylist()
            keys = [k if s is None else k + s for k, s in zip(keys, tails, strict=True)]

        old, present = self.groups.fetch(keys)
        new = old.copy()
        new["n"] += dw[changed]
        for i in self.floats:  # a new row's representative is this first occurrence
            value = firsts[i].to_numpy(zero_copy_only=False)
            neg_zero = (value == 0) & np.signbit(value)
            new[f"z{i}"] = np.where(present, old[f"z{i}"], neg_zero)
        was, alive = present & (old["n"] > 0), new["n"] > 0
        self.groups.store(keys, new, alive)

        fall, rise = np.flatnonzero(was & ~alive), np.flatnonzero(alive & ~was)
        if not len(fall) and not len(rise):
            return DiffBatch()
        pick = np.concatenate([fall, rise])
        records = np.concatenate([old[fall], new[rise]])
        weights = np.concatenate(
            [np.full(len(fall), -1, dtype=np.int64), np.ones(len(rise), dtype=np.int64)]
        )
        take = pa.array(pick)
        out = [c.take(take) for c in firsts]
        for i in self.floats:
            out[i] = pc.if_else(
                pa.array(records[f"z{i}"] != 0), _NEG_ZERO, K.normalize_floats(out[i])
            )
        if odd is None:
            return DiffBatch.from_columns(out, weights)
        rows = odd.patch(list(zip(*map(to_python, out), strict=True)), rep[pick])
        return DiffBatch(rows, weights.tolist())

    def _columns(self, delta: DiffBatch) -> tuple[list[pa.Array], _OddValues | None]:
        """The delta's columns at ``column_types`` (the batch's own where they fit, else converted
        from its rows), and the values no Arrow column could hold."""
        given = delta.columns
        out: list[pa.Array] = []
        odd = _OddValues(len(self.column_types))
        values_of: list[tuple] | None = None
        for i, t in enumerate(self.column_types):
            col = _fitting(given[i], t) if given is not None else None
            if col is None:
                if values_of is None:
                    rows = delta.rows
                    values_of = list(zip(*rows, strict=True)) if rows else []
                col = odd.convert(i, values_of[i], t)
            out.append(col)
        return out, (odd if odd.values else None)


def _fitting(column: pa.Array, t: pa.DataType) -> pa.Array | None:
    """``column`` as type ``t`` when that is exact without per-value Python, else None."""
    if not compatible(column.type, t):
        return None
    if column.type == t or pa.types.is_decimal(t):
        return column  # a decimal of the same scale is keyed by the unscaled integer as it is
    return column.cast(t)


class _OddValues:
    """Values of a time that their column's Arrow type cannot hold (a numeric NaN, a numeric of
    more than 38 digits): NULL in the Arrow column, identified by an ``encode_key`` suffix of the
    row's state key, and put back into the output rows. Whether a value is odd depends on the
    value alone (never on the rest of its batch), so a row's key is the same in every time."""

    def __init__(self, ncols: int) -> None:
        self.ncols = ncols
        self.values: dict[int, tuple[list[int], Sequence]] = {}  # column -> (rows, all values)

    def convert(self, i: int, values: Sequence, t: pa.DataType) -> pa.Array:
        try:
            return to_arrow_column(list(values), t)
        except ColumnConversionError:
            pass
        odd = [j for j, v in enumerate(values) if v is not None and not _fits(v, t)]
        clean = list(values)
        for j in odd:
            clean[j] = None
        self.values[i] = (odd, values)
        return to_arrow_column(clean, t)

    def suffixes(self, n: int) -> pa.Array:
        """Per row: None, or ``_ODD`` then per column a flag byte (and the odd value's key)."""
        ncols = self.ncols
        parts: dict[int, list[bytes]] = {}
        for i, (rows, values) in self.values.items():
            for j in rows:
                parts.setdefault(j, [b"\x00"] * ncols)[i] = b"\x01" + _prefixed(
                    encode_key((values[j],))
                )
        out: list[bytes | None] = [None] * n
        for j, p in parts.items():
            out[j] = _ODD + b"".join(p)
        return pa.array(out, pa.binary())

    def patch(self, rows: list[tuple], sources: np.ndarray) -> list[tuple]:
        """``rows`` (built from the Arrow columns of input rows ``sources``) with the odd values
        of those input rows put back."""
        odd = {i: set(rows_) for i, (rows_, _) in self.values.items()}
        out = []
        for row, j in zip(rows, sources.tolist(), strict=True):
            fixes = [(i, self.values[i][1][j]) for i, s in odd.items() if j in s]
            if fixes:
                row = list(row)
                for i, v in fixes:
                    row[i] = v
                row = tuple(row)
            out.append(row)
        return out


def _fits(v: object, t: pa.DataType) -> bool:
    try:
        to_arrow_column([v], t)
    except ColumnConversionError:
        return False
    return True


def _prefixed(raw: bytes) -> bytes:
    return len(raw).to_bytes(4, "big") + raw
