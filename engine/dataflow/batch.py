"""Batches of diffs as Z-sets: rows (tuples) with integer weights.

A ``DiffBatch`` is two parallel lists, ``rows`` and ``weights``: +1 inserts a row, -1 deletes it,
an UPDATE is -old +new. Consolidation sums the weights per row and drops zeros (DBSP's Z-set
normal form). Operations run over whole lists with C-level builtins (``zip``, ``compress``, dict
updates) so a batch of 100k diffs costs no per-row Python beyond one dict operation.

Row equality is Python equality, which is SQL's "not distinct" for our value types (None equals
None, Decimal('1.0') equals Decimal('1.00')) as long as every NaN is the engine's one shared NaN
object (``engine.dataflow.nan``): tuples compare items by identity first. This module must not
know about plans or state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Any

from engine.dataflow.nan import NAN

Row = tuple


@dataclass(slots=True)
class DiffBatch:
    """A Z-set batch: ``rows[i]`` carries weight ``weights[i]`` (may repeat rows until consolidated)."""

    rows: list[Row] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)

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
        rows: list[Row] = []
        weights: list[int] = []
        for b in batches:
            rows.extend(b.rows)
            weights.extend(b.weights)
        return cls(rows, weights)

    # -- inspection ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def __bool__(self) -> bool:
        return bool(self.rows)

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
        if len(self.rows) <= 1:
            if self.weights and self.weights[0] == 0:
                return DiffBatch()
            return DiffBatch(list(self.rows), list(self.weights))
        return DiffBatch.from_counts(self.counts())

    def negate(self) -> DiffBatch:
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
