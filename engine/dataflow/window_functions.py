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

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import localcontext
from typing import Any

from engine.dataflow.batch import Row
from engine.dataflow.nan import canonical_value
from engine.numeric import pg_numeric_div
from engine.pg_interval import interval_div

RANKING = ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile")
OFFSET = ("lag", "lead")
VALUE = ("first_value", "last_value", "nth_value")  # a row of the frame's value
AGGREGATES = ("sum", "count", "count_star", "avg", "min", "max")
KINDS = RANKING + OFFSET + VALUE + AGGREGATES
Groups = list[tuple[int, int]]
_NO_ARG = ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "count_star")


FRAMED = VALUE + AGGREGATES  # the functions a frame clause applies to


@dataclass(frozen=True)
class Frame:
    """A frame clause other than the default: ``mode`` rows or groups (RANGE with only
    UNBOUNDED/CURRENT ROW bounds is groups with no offsets); each bound is ``unbounded``,
    ``preceding``, ``current`` or ``following``, the last two with an offset.

    >>> Frame("rows", "preceding", 2, "current").describe()
    'ROWS BETWEEN 2 PRECEDING AND CURRENT ROW'
    """

    mode: str
    start: str
    start_n: int = 0
    end: str = "current"
    end_n: int = 0

    def describe(self) -> str:
        def bound(kind: str, n: int, unbounded: str) -> str:
            if kind == "unbounded":
                return f"UNBOUNDED {unbounded}"
            if kind == "current":
                return "CURRENT ROW"
            return f"{n} {kind.upper()}"

        return (
            f"{self.mode.upper()} BETWEEN {bound(self.start, self.start_n, 'PRECEDING')} "
            f"AND {bound(self.end, self.end_n, 'FOLLOWING')}"
        )

    def bounds(self, n: int, groups: Groups) -> list[tuple[int, int]]:
        """Each row's frame as [lo, hi) row indexes (lo >= hi: empty)."""
        out: list[tuple[int, int]] = []
        for gi, (s, e) in enumerate(groups):
            for p in range(s, e):
                out.append((self._edge(self.start, self.start_n, p, gi, n, groups, True),
                            self._edge(self.end, self.end_n, p, gi, n, groups, False)))  # fmt: skip
        return out

    def _edge(self, kind: str, k: int, p: int, gi: int, n: int, groups: Groups, start: bool) -> int:
        if kind == "unbounded":
            return 0 if start else n
        step = -k if kind == "preceding" else k if kind == "following" else 0
        if self.mode == "rows":
            q = p + step
            return max(0, min(n, q if start else q + 1))
        g = gi + step  # groups: whole peer groups
        if g < 0:
            return 0
        if g >= len(groups):
            return n
        return groups[g][0] if start else groups[g][1]


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
    frame: Frame | None = None  # None: the default frame

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
        if self.frame is not None and self.kind not in FRAMED:
            raise ValueError(f"window function {self.kind} takes no frame")

    def describe(self) -> str:
        text = self._call()
        return text if self.frame is None else f"{text} {self.frame.describe()}"

    def _call(self) -> str:
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
    if f.frame is not None:
        return _framed(rows, f.frame.bounds(n, groups), f)
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


class _Accumulator:
    """One aggregate over rows added in frame order (NULLs skipped)."""

    def __init__(self, kind: str, arg: int | None) -> None:
        self.kind, self.arg = kind, arg
        self.rows = 0
        self.count = 0
        self.total: Any = None

    def add(self, row: Row) -> None:
        self.rows += 1
        if self.kind == "count_star":
            return
        v = row[self.arg]
        if v is None:
            return
        self.count += 1
        total, kind = self.total, self.kind
        if total is None:
            self.total = v
        elif kind in ("sum", "avg"):
            self.total = total + v
        elif kind == "min":  # NaN sorts above every number, as in Postgres
            if total != total or (v == v and v < total):
                self.total = v
        elif kind == "max" and (v != v or (total == total and v > total)):
            self.total = v

    def value(self) -> Any:
        kind, total = self.kind, self.total
        if kind == "count_star":
            return self.rows
        if kind == "count":
            return self.count
        if kind == "avg" and isinstance(total, datetime.timedelta):  # interval: Postgres' division
            return interval_div(total, self.count)
        if kind == "avg" and total is not None:
            total = (
                total / self.count
                if isinstance(total, float)
                else pg_numeric_div(total, self.count)
            )
        if total != total:  # NaN: the shared object, equal to the last output's
            total = canonical_value(total)
        return total


def _running_aggregate(rows: Sequence[Row], groups: Groups, f: WindowFunction) -> list[Any]:
    """The aggregate over each row's frame: every row up to the end of its peer group."""
    acc = _Accumulator(f.kind, f.arg)
    out: list[Any] = []
    with localcontext() as ctx:
        ctx.prec = 1000  # numeric sums are exact in Postgres; Python's default is 28 digits
        for s, e in groups:
            for p in range(s, e):
                acc.add(rows[p])
            out.extend([acc.value()] * (e - s))
    return out


def _framed(rows: Sequence[Row], bounds: list[tuple[int, int]], f: WindowFunction) -> list[Any]:
    """``f`` over each row's frame [lo, hi). Aggregates extend the last frame when it only grew
    at its end (running frames), else start over from the frame's first row, adding rows in
    frame order as Postgres does for aggregates without an inverse (float sums round alike)."""
    kind, a = f.kind, f.arg
    if kind in VALUE:
        m = f.offset - 1 if kind == "nth_value" else 0
        out: list[Any] = []
        for lo, hi in bounds:
            if kind == "last_value":
                out.append(rows[hi - 1][a] if hi > lo else None)
            else:
                out.append(rows[lo + m][a] if lo + m < hi else None)
        return out
    out = []
    acc: _Accumulator | None = None
    last = (0, 0)
    with localcontext() as ctx:
        ctx.prec = 1000
        for lo, hi in bounds:
            if acc is None or lo != last[0] or hi < last[1]:
                acc, last = _Accumulator(kind, a), (lo, lo)
            for p in range(last[1], hi):
                acc.add(rows[p])
            last = (lo, max(hi, last[1]))
            out.append(acc.value())
    return out
