"""Aggregate functions of GROUP BY: their definition and their value semantics (Postgres').

``Aggregate`` is what the planner hands to ``ReduceCollection``: the kind, the input column of
the argument (argument expressions are computed into columns beforehand), the column of an
already-computed FILTER boolean, and string_agg's separator and ORDER BY columns. The functions
below are the arithmetic of the accumulators that must be exact under retraction: integer and
numeric sums are exact (no rounding context), float sums are kept as exact integers in units of
2**-1074 (the smallest double) so that deleting a huge value leaves exactly the sum of the rest,
and numeric averages follow Postgres' ``numeric_div`` result scale so that results equal a full
recompute by Postgres. This module holds no state and must not touch RocksDB: the per-group
multisets of min/max/count(DISTINCT)/string_agg live in ``collections.reduce``.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.numeric import pg_numeric_div
from engine.pg_interval import interval_div

KINDS = frozenset(
    {
        "count_star",
        "count",
        "sum",
        "avg",
        "min",
        "max",
        "count_distinct",
        "bool_and",
        "bool_or",
        "string_agg",
        "array_agg",
        "var_samp",
        "var_pop",
        "stddev_samp",
        "stddev_pop",
    }
)
#: aggregates whose value is their inputs in an order (ORDER BY inside the call)
ORDERED_KINDS = frozenset({"string_agg", "array_agg"})
MOMENT_KINDS = frozenset({"var_samp", "var_pop", "stddev_samp", "stddev_pop"})

#: decimal context under which + and * never round (used for every numeric accumulation)
EXACT = decimal.Context(
    prec=decimal.MAX_PREC,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of a ``ReduceCollection``.

    >>> Aggregate("sum", 3).describe()
    'sum(#3)'
    >>> Aggregate("string_agg", 1, filter=4, separator=";", order_by=(2,), descending=(True,)).describe()
    "string_agg(#1, ';' ORDER BY #2 DESC) FILTER (WHERE #4)"
    """

    kind: str
    arg: int | None = None
    filter: int | None = None
    separator: str | None = ","  # None for array_agg
    order_by: tuple[int, ...] = ()
    descending: tuple[bool, ...] = ()
    # per ORDER BY column: True/False for an explicit NULLS FIRST/LAST, None for the default
    nulls_first: tuple[bool | None, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"unknown aggregate kind {self.kind!r}; expected one of {sorted(KINDS)}"
            )
        if self.kind == "count_star":
            if self.arg is not None:
                raise ValueError(
                    "count_star takes no argument column (use kind 'count' for count(col))"
                )
        elif self.arg is None:
            raise ValueError(f"aggregate {self.kind} needs an argument column (arg=...)")
        if (self.order_by or self.descending) and self.kind not in ORDERED_KINDS:
            raise ValueError(
                f"ORDER BY inside an aggregate is only supported for string_agg and array_agg, "
                f"not {self.kind}"
            )
        if self.descending and len(self.descending) != len(self.order_by):
            raise ValueError(
                f"string_agg: descending has {len(self.descending)} flags for {len(self.order_by)} ORDER BY columns"
            )

    def describe(self) -> str:
        if self.kind == "count_star":
            text = "count(*)"
        elif self.kind == "count_distinct":
            text = f"count(DISTINCT #{self.arg})"
        elif self.kind in ORDERED_KINDS:
            order = ""
            if self.order_by:
                desc = self.descending or (False,) * len(self.order_by)
                nulls = self.nulls_first or (None,) * len(self.order_by)
                cols = ", ".join(
                    f"#{c}{' DESC' if d else ''}"
                    + ("" if nf is None or nf == d else " NULLS FIRST" if nf else " NULLS LAST")
                    for c, d, nf in zip(self.order_by, desc, nulls, strict=True)
                )
                order = f" ORDER BY {cols}"
            if self.kind == "array_agg":
                text = f"array_agg(#{self.arg}{order})"
            else:
                text = f"string_agg(#{self.arg}, {self.separator!r}{order})"
        else:
            text = f"{self.kind}(#{self.arg})"
        if self.filter is not None:
            text += f" FILTER (WHERE #{self.filter})"
        return text


# -- exact float sums ------------------------------------------------------------------------------
_FIXED_SHIFT = 1074  # every finite double is an integer multiple of 2**-1074
_FIXED_ONE = 1 << _FIXED_SHIFT


def float_to_fixed(v: float) -> int:
    """A finite float as an exact integer in units of 2**-1074."""
    n, d = v.as_integer_ratio()
    return n << (_FIXED_SHIFT + 1 - d.bit_length())


def fixed_to_float(x: int) -> float:
    """The float nearest to ``x * 2**-1074`` (int true division rounds correctly); +-inf if too big."""
    try:
        return x / _FIXED_ONE
    except OverflowError:
        return math.inf if x > 0 else -math.inf


# -- sum / avg accumulators ------------------------------------------------------------------------
# A sum accumulator is None (no value yet) or the list
#   [n, total, nf, fixed, scales, specials]
# n: non-NULL values; total: exact sum of the finite int / Decimal / interval values; nf: how many
# of the values are floats; fixed: exact sum of the finite floats in units of 2**-1074; scales:
# None or {display scale: count} of the finite Decimals (the result's scale is their maximum, as
# in Postgres); specials: None or [+inf, -inf, NaN] counts. Every field is a plain sum, so a
# delta has the same shape and merging is field-wise addition.
N, TOTAL, NF, FIXED, SCALES, SPECIALS = range(6)


def new_sum_acc() -> list:
    return [0, 0, 0, 0, None, None]


def _add_count(target: dict, key: Any, w: int) -> None:
    target[key] = target.get(key, 0) + w


def sum_add_value(acc: list, v: Any, w: int) -> None:
    """Add non-NULL ``v`` with weight ``w`` to ``acc`` (call under ``decimal.localcontext(EXACT)``)."""
    acc[N] += w
    t = type(v)
    if t is float:
        acc[NF] += w
        if v - v == 0.0:  # finite
            acc[FIXED] += float_to_fixed(v) * w
        else:
            _add_special(acc, 2 if v != v else (0 if v > 0 else 1), w)
    elif t is Decimal:
        if v.is_finite():
            acc[TOTAL] += v * w
            exp = v.as_tuple().exponent
            if acc[SCALES] is None:
                acc[SCALES] = {}
            _add_count(acc[SCALES], -exp if exp < 0 else 0, w)
        else:
            _add_special(acc, 2 if v.is_nan() else (0 if v > 0 else 1), w)
    else:  # interval (timedelta) and other additive types
        acc[TOTAL] = _plus(acc[TOTAL], v * w)


def _plus(a: Any, b: Any) -> Any:
    """``a + b`` where an int 0 is the neutral element of any type (0 + interval is an interval)."""
    if b.__class__ is int and not b:
        return a
    if a.__class__ is int and not a:
        return b
    return a + b


def _add_special(acc: list, which: int, w: int) -> None:
    if acc[SPECIALS] is None:
        acc[SPECIALS] = [0, 0, 0]
    acc[SPECIALS][which] += w


def sum_merge(acc: list | None, delta: list) -> list | None:
    """``acc + delta`` field by field; None once no value is left."""
    if acc is None:
        acc = new_sum_acc()
    n = acc[N] + delta[N]
    if n <= 0:
        return None
    acc[N] = n
    acc[TOTAL] = _plus(acc[TOTAL], delta[TOTAL])
    acc[NF] += delta[NF]
    acc[FIXED] += delta[FIXED]
    if delta[SCALES]:
        scales = acc[SCALES] or {}
        for s, c in delta[SCALES].items():
            c += scales.get(s, 0)
            if c:
                scales[s] = c
            else:
                scales.pop(s, None)
        acc[SCALES] = scales or None
    if delta[SPECIALS]:
        sp = acc[SPECIALS] or [0, 0, 0]
        sp = [a + b for a, b in zip(sp, delta[SPECIALS], strict=True)]
        acc[SPECIALS] = sp if any(sp) else None
    return acc


def _special_result(acc: list) -> Any:
    sp = acc[SPECIALS]
    if not sp:
        return None
    pinf, ninf, nan = sp
    make = float if acc[NF] else Decimal
    if nan > 0 or (pinf > 0 and ninf > 0):
        return NAN if acc[NF] else NUMERIC_NAN  # the shared NaN: equal to the last output's
    if pinf > 0:
        return make("inf")
    if ninf > 0:
        return make("-inf")
    return None


def _max_scale(acc: list) -> int | None:
    scales = acc[SCALES]
    return max(scales) if scales else None


def sum_result(acc: list | None) -> Any:
    """sum(): NULL without values; int for ints, Decimal (at the inputs' max scale), float."""
    if acc is None:
        return None
    special = _special_result(acc)
    if special is not None:
        return special
    if acc[NF]:
        total = acc[FIXED]
        if acc[TOTAL]:
            total += float_to_fixed(float(acc[TOTAL]))
        return fixed_to_float(total)
    scale = _max_scale(acc)
    if scale is not None:
        return Decimal(acc[TOTAL]).quantize(Decimal((0, (1,), -scale)), context=EXACT)
    return acc[TOTAL]


def avg_result(acc: list | None) -> Any:
    """avg(): NULL without values; float for floats, interval / count, else Postgres numeric_div."""
    if acc is None:
        return None
    special = _special_result(acc)
    if special is not None:
        return special
    n = acc[N]
    if acc[NF]:
        return sum_result(acc) / n
    total = acc[TOTAL]
    if not isinstance(total, (int, Decimal)):  # interval: Postgres' interval_div
        return interval_div(total, n)
    scale = _max_scale(acc)
    if scale is not None:
        total = Decimal(total).quantize(Decimal((0, (1,), -scale)), context=EXACT)
    return pg_numeric_div(Decimal(total), n)


# -- bool_and / bool_or ----------------------------------------------------------------------------
def bool_and_result(acc: tuple[int, int]) -> bool | None:
    n_true, n_false = acc
    if n_true + n_false <= 0:
        return None
    return n_false <= 0


def bool_or_result(acc: tuple[int, int]) -> bool | None:
    n_true, n_false = acc
    if n_true + n_false <= 0:
        return None
    return n_true > 0


# -- variance / stddev -----------------------------------------------------------------------------
# A moments accumulator is None (no value) or [sum accumulator of x, exact sum of x*x]: ints and
# Decimals square exactly; a finite float is squared as its exact fixed-point integer (units of
# 2**-2148), so that a deletion takes back exactly what its insertion added.


def square_deltas(G: list[int], V: list[Any], W: list[int]) -> dict[int, Any]:
    """Per group the weighted sum of the squares of the finite non-NULL values (see above)."""
    out: dict[int, Any] = {}
    for g, v, w in zip(G, V, W, strict=True):
        t = type(v)
        if t is float:
            if v - v != 0.0:
                continue  # inf/NaN: counted by the sum accumulator's specials
            f = float_to_fixed(v)
            sq = f * f
        elif t is Decimal:
            if not v.is_finite():
                continue
            sq = v * v
        else:
            sq = v * v
        out[g] = out.get(g, 0) + sq * w
    return out


def moments_merge(acc: list | None, sums: list, squares: Any) -> list | None:
    """``acc`` plus a delta (a sum accumulator's delta and a sum of squares); None once empty."""
    merged = sum_merge(acc[0] if acc is not None else None, sums)
    if merged is None:
        return None
    return [merged, _plus(acc[1] if acc is not None else 0, squares)]


def moments_result(kind: str, acc: list | None) -> Any:
    """var_samp/var_pop/stddev_samp/stddev_pop as Postgres computes them: NULL with too few
    values; NaN with an inf or NaN among them; a float for floats; for ints and numerics
    ``(n*sum(x*x) - sum(x)**2) / (n*(n-1))`` (``n*n`` for the population) at Postgres' division
    scale, 0 when that numerator is not positive, the square root rounded to the same scale."""
    if acc is None:
        return None
    sums, squares = acc
    n = sums[N]
    sample = kind.endswith("_samp")
    if n <= (1 if sample else 0):
        return None
    if sums[SPECIALS]:
        return NAN if sums[NF] else NUMERIC_NAN
    den = n * (n - 1) if sample else n * n
    root = kind.startswith("stddev")
    if sums[NF]:
        num = Fraction(n * squares - sums[FIXED] * sums[FIXED], den << (2 * _FIXED_SHIFT))
        value = float(num) if num > 0 else 0.0
        return math.sqrt(value) if root else value
    total = sums[TOTAL]
    scale = _max_scale(sums)
    if scale is not None:  # Postgres' sum(x) has the inputs' largest scale, sum(x*x) twice it
        total = Decimal(total).quantize(Decimal((0, (1,), -scale)), context=EXACT)
        squares = Decimal(squares).quantize(Decimal((0, (1,), -2 * scale)), context=EXACT)
    with decimal.localcontext(EXACT):
        num = n * squares - total * total
    if num <= 0:
        return Decimal(0)
    variance = pg_numeric_div(num, den)
    if not root:
        return variance
    rscale = -variance.as_tuple().exponent
    with decimal.localcontext() as ctx:
        ctx.prec = variance.adjusted() // 2 + rscale + 12
        ctx.rounding = decimal.ROUND_DOWN
        root_value = variance.sqrt()
    return root_value.quantize(Decimal((0, (1,), -rscale)), rounding=decimal.ROUND_HALF_UP)
