"""Window functions: their description (``WindowFunction``) and their values over one partition.

``window_columns`` computes, for a partition already in ORDER BY order (ties broken by the caller)
and split into peer groups, one column of values per function, with Postgres' default frame: with
ORDER BY, aggregates run over RANGE UNBOUNDED PRECEDING .. CURRENT ROW (a row sees all its peers);
without ORDER BY the whole partition is one peer group, so they run over the whole partition.
Result types follow Postgres: sum of no non-NULL value is NULL, count is an int, avg of ints or
Decimals is a Decimal with Postgres' numeric division scale (``pg_numeric_div``), avg of floats is
a float; min/max order NaN above every number and a NaN result is the shared NaN object
(``engine.dataflow.nan``). Pure functions over lists: this module must not touch state or know
about diffs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import localcontext
from typing import Any

from engine.dataflow.batch import Row
from engine.dataflow.nan import canonical_value
from engine.numeric import pg_numeric_div

RANKING = ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile")
OFFSET = ("lag", "lead")
VALUE = ("first_value", "last_value", "nth_value")  # a row of the frame's value
AGGREGATES = ("sum", "count", "count_star", "avg", "min", "max")
KINDS = RANKING + OFFSET + VALUE + AGGREGATES
_NO_ARG = ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "count_star")


@dataclass(frozen=True)
class WindowFunction:
    """One window function: ``kind`` over column ``arg``; ``offset``/``default`` for lag and lead,
    ``offset`` also ntile's number of buckets and nth_value's position (both > 0).

    >>> WindowFunction("lag", 2, offset=1, default=0).describe()
    'lag(#2, 1, 0)'
    """

    kind: str
    arg: int | None = None
    offset: int = 1
    default: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"unknown window function {self.kind!r}; supported: {', '.join(KINDS)}"
            )
        if self.kind in _NO_ARG:
            if self.arg is not None:
                raise ValueError(
                    f"window function {self.kind} takes no argument, got column {self.arg}"
                )
        elif self.arg is None:
            raise ValueError(f"window function {self.kind} needs an argument column (arg=...)")

    def describe(self) -> str:
        if self.kind == "count_star":
            return "count(*)"
        if self.kind == "ntile":
            return f"ntile({self.offset})"
        if self.kind == "nth_value":
            return f"nth_value(#{self.arg}, {self.offset})"
        if self.kind in _NO_ARG:
            return f"{self.kind}()"
        if self.kind in OFFSET:
            return f"{self.kind}(#{self.arg}, {self.offset}, {self.default!r})"
        return f"{self.kind}(#{self.arg})"


# -- evaluation -----------------------------------------------------------------------------------
Groups = list[tuple[int, int]]


def window_columns(
    rows: Sequence[Row], groups: Groups, functions: Sequence[WindowFunction]
) -> list[list[Any]]:
    """One list of values per function, aligned with ``rows``.

    ``rows`` is the partition in order, one entry per occurrence (a row of multiplicity 3 appears
    three times); ``groups`` are the peer groups as [start, end) index ranges covering ``rows``.
    """
    return [_column(rows, groups, f) for f in functions]


def _column(rows: Sequence[Row], groups: Groups, f: WindowFunction) -> list[Any]:
    n = len(rows)
    kind = f.kind
    if kind == "row_number":
        return list(range(1, n + 1))
    if kind in ("rank", "dense_rank"):
        out: list[Any] = []
        for g, (s, e) in enumerate(groups):
            out.extend([s + 1 if kind == "rank" else g + 1] * (e - s))
        return out
    if kind == "percent_rank":  # (rank - 1) / (rows - 1), 0 for a single row
        return [s / (n - 1) if n > 1 else 0.0 for s, e in groups for _ in range(e - s)]
    if kind == "cume_dist":  # rows up to the current row's last peer / rows
        return [e / n for s, e in groups for _ in range(e - s)]
    if kind == "ntile":  # as equal as possible, the first (rows % buckets) one row larger
        size, extra = divmod(n, f.offset)
        return [b for b in range(1, f.offset + 1) for _ in range(size + (b <= extra))]
    if kind in VALUE:  # the frame: the partition's start .. the current row's last peer
        a = f.arg
        if kind == "first_value":
            return [rows[0][a]] * n
        if kind == "last_value":
            return [rows[e - 1][a] for s, e in groups for _ in range(e - s)]
        m = f.offset - 1
        return [rows[m][a] if m < e else None for s, e in groups for _ in range(e - s)]
    if kind in OFFSET:
        a = f.arg
        shift = -f.offset if kind == "lag" else f.offset
        default = f.default
        vals = [r[a] for r in rows]
        return [vals[p + shift] if 0 <= p + shift < n else default for p in range(n)]
    return _running_aggregate(rows, groups, f)


def _running_aggregate(rows: Sequence[Row], groups: Groups, f: WindowFunction) -> list[Any]:
    """The aggregate over each row's frame: every row up to the end of its peer group."""
    kind = f.kind
    a = f.arg
    out: list[Any] = []
    total: Any = None
    count = 0
    with localcontext() as ctx:
        ctx.prec = 1000  # numeric sums are exact in Postgres; Python's default is 28 digits
        for s, e in groups:
            if kind == "count_star":
                value: Any = e
            else:
                for p in range(s, e):
                    v = rows[p][a]
                    if v is None:
                        continue
                    count += 1
                    if total is None:
                        total = v
                    elif kind in ("sum", "avg"):
                        total = total + v
                    elif kind == "min":  # NaN sorts above every number, as in Postgres
                        if total != total or (v == v and v < total):
                            total = v
                    elif kind == "max" and (v != v or (total == total and v > total)):
                        total = v
                if kind == "count":
                    value = count
                elif kind == "avg":
                    if total is None:
                        value = None
                    elif isinstance(total, float):
                        value = total / count
                    else:
                        value = pg_numeric_div(total, count)
                else:
                    value = total
                if value != value:  # NaN: the shared object, equal to the last output's
                    value = canonical_value(value)
            out.extend([value] * (e - s))
    return out
