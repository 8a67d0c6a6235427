"""Batches of diffs as Z-sets: rows (tuples) with integer weights.

A ``DiffBatch`` is two parallel lists, ``rows`` and ``weights``: +1 inserts a row, -1 deletes it,
an UPDATE is -old +new; or the same diffs as Arrow columns and an int64 weight array, made by the
columnar collections (``engine.dataflow.columnar``), and turned into rows only when a row-wise
consumer reads ``rows``. Consolidation sums the weights per row and drops zeros (DBSP's Z-set
normal form). Operations run over whole lists with C-level builtins (``zip``, ``compress``, dict
updates) so a batch of 100k diffs costs no per-row Python beyond one dict operation.

Row equality is Python equality, which is SQL's "not distinct" for our value types (None equals
None, Decimal('1.0') equals Decimal('1.00')) as long as every NaN is the engine's one shared NaN
object (``engine.dataflow.nan``): tuples compare items by identity first. This module must not
know about plans or state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, repeat
from typing import Any

from engine.dataflow.nan import NAN

Row = tuple


class DiffBatch:
    """A Z-set batch: ``rows[i]`` carries weight ``weights[i]`` (may repeat rows until consolidated).

    A batch holds its diffs as tuple rows, or as Arrow columns (``columns``: one array per
    column, ``column_weights``: an int64 numpy array) when a columnar collection made it; each
    form is built from the other on first use, so row-wise collections read any batch and
    columnar ones pass columns on without a per-row conversion.
    """

    __slots__ = ("_rows", "_weights", "_columns", "_cweights")

    def __init__(self, rows: list[Row] | None = None, weights: list[int] | None = None) -> None:
        self._rows: list[Row] | None = [] if rows is None else rows
        self._weights: list[int] | None = [] if weights is None else weights
        self._columns: list[Any] | None = None
        self._cweights: Any = None

    @classmethod
    def from_columns(cls, columns: list[Any], weights: Any) -> DiffBatch:
        """A batch of Arrow ``columns`` (equal lengths) with int64 numpy ``weights``."""
        b = cls.__new__(cls)
        b._rows = b._weights = None
        b._columns, b._cweights = list(columns), weights
        return b

    # -- the two forms ------------------------------------------------------------------------
    @property
    def rows(self) -> list[Row]:
        if self._rows is None:
            from engine.dataflow.columnar.arrow_types import to_python

            cols = [to_python(c) for c in self._columns]
            n = len(self._cweights)
            self._rows = list(zip(*cols, strict=True)) if cols else [()] * n
        return self._rows

    @rows.setter
    def rows(self, rows: list[Row]) -> None:
        self.weights  # noqa: B018 (keep the weights before dropping the columns)
        self._rows, self._columns, self._cweights = rows, None, None

    @property
    def weights(self) -> list[int]:
        if self._weights is None:
            self._weights = self._cweights.tolist()
        return self._weights

    @weights.setter
    def weights(self, weights: list[int]) -> None:
        self.rows  # noqa: B018
        self._weights, self._columns, self._cweights = weights, None, None

    @property
    def columnar(self) -> bool:
        """Whether the batch is held as Arrow columns only (no tuple rows were made of it)."""
        return self._rows is None

    @property
    def columns(self) -> list[Any] | None:
        """The Arrow columns, if the batch was made of columns (else None)."""
        return self._columns

    @property
    def column_weights(self) -> Any:
        """The weights as an int64 numpy array (columnar batches; else built from the list)."""
        if self._cweights is None:
            import numpy as np

            return np.asarray(self.weights, dtype=np.int64)
        return self._cweights

    def __getstate__(self) -> tuple:
        # an Arrow slice pickles its whole parent's buffers: each column is compacted first
        columns = self._columns
        if columns is not None:
            import pyarrow as pa

            columns = [pa.concat_arrays([c]) for c in columns]
        return (self._rows, self._weights, columns, self._cweights)

    def __setstate__(self, state: tuple) -> None:
        if len(state) == 2:  # pickled before __getstate__: (None, {slot: value})
            state = tuple(state[1].get(k) for k in ("_rows", "_weights", "_columns", "_cweights"))
        self._rows, self._weights, self._columns, self._cweights = state

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DiffBatch):
            return NotImplemented
        return self.rows == other.rows and self.weights == other.weights

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DiffBatch(rows={self.rows!r}, weights={self.weights!r})"

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def inserts(cls, rows: Iterable[Row]) -> DiffBatch:
        rows = list(rows)
        return cls(rows, [1] * len(rows))

    @classmethod
    def deletes(cls, rows: Iterable[Row]) -> DiffBatch:
        rows = list(rows)
        return cls(rows, [-1] * len(rows))

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Row, int]]) -> DiffBatch:
        rows: list[Row] = []
        weights: list[int] = []
        for r, w in pairs:
            rows.append(r)
            weights.append(w)
        return cls(rows, weights)

    @classmethod
    def from_counts(cls, counts: dict[Row, int]) -> DiffBatch:
        """From a row -> weight mapping (zero weights dropped)."""
        rows = [r for r, w in counts.items() if w]
        return cls(rows, [counts[r] for r in rows])

    @classmethod
    def concat(cls, batches: Iterable[DiffBatch]) -> DiffBatch:
        batches = [b for b in batches if len(b)]
        if batches and all(b._columns is not None and b._rows is None for b in batches):
            from engine.dataflow.columnar.kernels import concat_columns

            joined = concat_columns([b._columns for b in batches], [b._cweights for b in batches])
            if joined is not None:
                return cls.from_columns(*joined)
        rows: list[Row] = []
        weights: list[int] = []
        for b in batches:
            rows.extend(b.rows)
            weights.extend(b.weights)
        return cls(rows, weights)

    def slices(self, size: int) -> Iterator[DiffBatch]:
        """The diffs in consecutive batches of at most ``size`` (Arrow slices of a columnar
        batch: no copy); the batch itself when it is no larger."""
        if len(self) <= size:
            yield self
            return
        if self._rows is None:
            columns, weights = self._columns, self._cweights
            for i in range(0, len(weights), size):
                yield DiffBatch.from_columns(
                    [c.slice(i, size) for c in columns], weights[i : i + size]
                )
            return
        rows, weights_list = self.rows, self.weights
        for i in range(0, len(rows), size):
            yield DiffBatch(rows[i : i + size], weights_list[i : i + size])

    def extend(self, other: DiffBatch) -> None:
        """Append ``other``'s diffs in place (the batch becomes rows: extending ``rows`` of a
        columnar batch by hand would leave its columns stale)."""
        rows, weights = self.rows, self.weights
        self._columns = self._cweights = None
        rows.extend(other.rows)
        weights.extend(other.weights)

    # -- inspection ---------------------------------------------------------------------------
    def __len__(self) -> int:
        if self._rows is not None:
            return len(self._rows)
        return len(self._cweights)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[tuple[Row, int]]:
        return zip(self.rows, self.weights, strict=True)

    def counts(self) -> dict[Row, int]:
        """Row -> net weight, zeros dropped (the consolidated Z-set as a dict)."""
        acc: dict[Row, int] = {}
        get = acc.get
        for r, w in zip(self.rows, self.weights, strict=True):
            acc[r] = get(r, 0) + w
        return {r: w for r, w in acc.items() if w}

    # -- Z-set algebra ------------------------------------------------------------------------
    def consolidate(self) -> DiffBatch:
        """Sum weights per row and drop rows whose weight is zero."""
        if self._rows is None:
            from engine.dataflow.columnar.kernels import consolidate_columns

            return DiffBatch.from_columns(*consolidate_columns(self._columns, self._cweights))
        if len(self.rows) <= 1:
            if self.weights and self.weights[0] == 0:
                return DiffBatch()
            return DiffBatch(list(self.rows), list(self.weights))
        return DiffBatch.from_counts(self.counts())

    def negate(self) -> DiffBatch:
        if self._rows is None:
            return DiffBatch.from_columns(self._columns, -self._cweights)
        return DiffBatch(list(self.rows), [-w for w in self.weights])

    def filter_mask(self, mask: Sequence[Any]) -> DiffBatch:
        """Keep the diffs whose mask entry is exactly ``True`` (SQL: NULL and false drop the row)."""
        keep = [m is True for m in mask]
        return DiffBatch(list(compress(self.rows, keep)), list(compress(self.weights, keep)))

    def with_rows(self, rows: list[Row]) -> DiffBatch:
        """Same weights, new rows (the result of a map over ``self.rows``)."""
        return DiffBatch(rows, list(self.weights))

    def expand(self) -> list[Row]:
        """Rows repeated by their (positive) weight; raises if any net weight is negative."""
        out: list[Row] = []
        for r, w in self.counts().items():
            if w < 0:
                raise ValueError(f"negative multiplicity {w} for row {r!r}")
            out.extend(repeat(r, w))
        return out

    # -- Arrow --------------------------------------------------------------------------------
    @classmethod
    def from_arrow(cls, table: Any, weight_column: str = "__weight") -> DiffBatch:
        """From a pyarrow Table/RecordBatch whose ``weight_column`` holds the weights."""
        names = list(table.schema.names)
        if weight_column not in names:
            raise ValueError(f"arrow batch has no weight column {weight_column!r}: {names}")
        wi = names.index(weight_column)
        cols = [_pylist(table.column(i)) for i in range(len(names)) if i != wi]
        weights = table.column(wi).to_pylist()
        rows = list(zip(*cols, strict=True)) if cols else [() for _ in weights]
        return cls(rows, weights)

    def to_arrow(self, column_names: Sequence[str], weight_column: str = "__weight") -> Any:
        """As a pyarrow Table with the given column names plus ``weight_column``."""
        import pyarrow as pa

        n = len(column_names)
        cols = list(zip(*self.rows, strict=True)) if self.rows else [() for _ in range(n)]
        if len(cols) != n:
            raise ValueError(f"rows have {len(cols)} columns, expected {n}: {list(column_names)}")
        arrays = [pa.array(list(c)) for c in cols]
        arrays.append(pa.array(self.weights, type=pa.int64()))
        return pa.Table.from_arrays(arrays, names=[*column_names, weight_column])


def _pylist(column: Any) -> list:
    """An Arrow column as Python values; a float NaN is the shared ``NAN`` (``engine.dataflow.nan``)."""
    import pyarrow as pa

    values = column.to_pylist()
    if pa.types.is_floating(column.type):
        values = [NAN if v != v else v for v in values]
    return values
