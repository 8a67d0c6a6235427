"""Pure kernels of the vectorized expressions: Postgres' operators over ``Vec`` values.

Each function takes and returns ``Vec``s (``engine.dataflow.columnar.vectors``) and computes
every row at once with numpy (text with Arrow compute). The semantics are the row compiler's
(``engine.sql.expression_compiler``, itself checked against Postgres): three-valued logic,
Postgres' float order (NaN equals NaN and sorts above everything), integer range errors,
truncating integer division, exact numerics at a known scale. A kernel never guesses: where
any non-NULL row would raise in the row path (division by zero, overflow, a bad cast) or holds
a value it cannot represent exactly, it raises ``NeedsRows`` and the batch runs row by row.
Each kernel is checked against the row path in ``tests/dataflow/columnar/test_vector_kernels.py``.
This module must not know about SQL syntax, plans or collections.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar.vectors import (
    DAY_US,
    MAX_DAY,
    MIN_DAY,
    Kind,
    NeedsRows,
    Vec,
    both_valid,
    to_arrow,
)

_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min
_EXACT_FLOAT_INT = 2**53  # integers up to this magnitude are exact in float64
_POW10 = [10**k for k in range(19)]


def _check(bad, valid, what: str) -> None:
    """``NeedsRows`` if ``bad`` holds for a non-NULL row."""
    bad = np.asarray(bad)
    if valid is not None:
        bad = bad & valid
    if bad.any():
        raise NeedsRows(what)


def _beyond(x, bound: int):
    """|x| > bound, without np.abs (which overflows on the smallest int64)."""
    return (x > bound) | (x < -bound)


def _bool_arrow(result, valid) -> Vec:
    """An Arrow boolean result (array or scalar) as a bool Vec with the given validity."""
    if isinstance(result, pa.Scalar):
        return Vec(Kind.BOOL, np.bool_(bool(result.as_py())), valid)
    return Vec(Kind.BOOL, pc.fill_null(result, False).to_numpy(zero_copy_only=False), valid)


# --- three-valued logic ------------------------------------------------------------------------


def _truth(v: Vec):
    """(rows that are TRUE, rows that are FALSE)."""
    if v.valid is None:
        return v.values, ~v.values
    return v.values & v.valid, ~v.values & v.valid


def and_(a: Vec, b: Vec) -> Vec:
    """Kleene AND: FALSE if either is FALSE, else NULL if either is NULL."""
    if a.valid is None and b.valid is None:
        return Vec(Kind.BOOL, a.values & b.values)
    at, af = _truth(a)
    bt, bf = _truth(b)
    return Vec(Kind.BOOL, at & bt, (at & bt) | af | bf)


def or_(a: Vec, b: Vec) -> Vec:
    """Kleene OR: TRUE if either is TRUE, else NULL if either is NULL."""
    if a.valid is None and b.valid is None:
        return Vec(Kind.BOOL, a.values | b.values)
    at, af = _truth(a)
    bt, bf = _truth(b)
    return Vec(Kind.BOOL, at | bt, at | bt | (af & bf))


def not_(a: Vec) -> Vec:
    return Vec(Kind.BOOL, ~a.values, a.valid)


def is_null(a: Vec, negate: bool) -> Vec:
    if a.valid is None:
        return Vec(Kind.BOOL, np.bool_(negate))
    return Vec(Kind.BOOL, a.valid if negate else ~a.valid)


def is_bool(a: Vec, value: bool, negate: bool) -> Vec:
    """``a IS [NOT] TRUE/FALSE``: never NULL."""
    t, f = _truth(a)
    hit = t if value else f
    return Vec(Kind.BOOL, ~hit if negate else hit)


def true_rows(v: Vec, n: int) -> np.ndarray:
    """The rows whose value is TRUE (a filter's mask)."""
    t, _ = _truth(v)
    return np.broadcast_to(np.asarray(t, dtype=bool), (n,))


# --- comparisons -------------------------------------------------------------------------------

_NUMPY_OPS = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}
_ARROW_OPS = {
    "==": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _float_order(op: str, x, y):
    """``x op y`` in Postgres' float order: NaN = NaN, NaN above every number."""
    xn, yn = np.isnan(x), np.isnan(y)
    if op == "==":
        return (x == y) | (xn & yn)
    if op == "!=":
        return ~((x == y) | (xn & yn))
    if op == "<":
        return (x < y) | (~xn & yn)
    if op == "<=":
        return (x <= y) | yn
    if op == ">":
        return (x > y) | (xn & ~yn)
    return (x >= y) | xn


def compare(op: str, a: Vec, b: Vec, nan_order: bool = True) -> Vec:
    """``a op b`` for operands of one kind (numerics of one scale: ``align_numeric``); NULL if
    either is NULL. ``nan_order=False``: Python's float ``==`` (NaN equal to nothing), as the
    row path's simple CASE compares."""
    if a.kind is not b.kind or a.scale != b.scale:
        raise TypeError(f"compare {a.kind}/{a.scale} with {b.kind}/{b.scale}")
    valid = both_valid(a, b)
    if a.kind is Kind.TEXT:
        return _bool_arrow(_ARROW_OPS[op](a.values, b.values), valid)
    with np.errstate(invalid="ignore"):
        if a.kind is Kind.FLOAT and nan_order:
            return Vec(Kind.BOOL, _float_order(op, a.values, b.values), valid)
        return Vec(Kind.BOOL, _NUMPY_OPS[op](a.values, b.values), valid)


def not_distinct(a: Vec, b: Vec) -> Vec:
    """``a IS NOT DISTINCT FROM b``: NULL equals NULL; never NULL."""
    eq = compare("==", a, b)
    if a.valid is None and b.valid is None:
        return Vec(Kind.BOOL, eq.values)
    av = True if a.valid is None else a.valid
    bv = True if b.valid is None else b.valid
    return Vec(Kind.BOOL, (eq.values & av & bv) | (~np.asarray(av) & ~np.asarray(bv)))


# --- integers ----------------------------------------------------------------------------------


def int_arith(op: str, a: Vec, b: Vec, lo: int, hi: int) -> Vec:
    """``a + b``, ``a - b``, ``a * b`` with the result type's range [lo, hi] (else the row
    path raises '... out of range')."""
    x, y = a.values, b.values
    valid = both_valid(a, b)
    with np.errstate(all="ignore"):
        if op == "+":
            r = x + y
            _check(((x ^ r) & (y ^ r)) < 0, valid, "integer overflow")
        elif op == "-":
            r = x - y
            _check(((x ^ y) & (x ^ r)) < 0, valid, "integer overflow")
        else:
            r = x * y
            _check(_mul_overflow(x, y, r), valid, "integer overflow")
    _check((r < lo) | (r > hi), valid, "integer out of range")
    return Vec(Kind.INT, r, valid)


def _mul_overflow(x, y, r):
    """Where the int64 product ``r`` of ``x * y`` wrapped around. Products below 2**62 in
    magnitude (by a float estimate) are exact; for the others ``r // y == x`` holds exactly
    when nothing wrapped (a wrapped ``r`` is 2**64 or more away from ``x * y``), except for
    ``min // -1``, which wraps itself (and whose product always overflows)."""
    big = np.abs(np.asarray(x, dtype=np.float64)) * np.abs(np.asarray(y, np.float64)) >= 2.0**62
    if not big.any():
        return big
    safe = np.where(y == 0, 1, y)
    return big & ((r // safe != x) | ((r == _I64_MIN) & (y == -1)))


def int_div(a: Vec, b: Vec, lo: int, hi: int) -> Vec:
    """Integer ``/``: truncated toward zero; division by zero and out-of-range quotients
    (``min / -1``) go to the row path."""
    x, y = a.values, b.values
    valid = both_valid(a, b)
    _check(y == 0, valid, "division by zero")
    _check((x == _I64_MIN) & (y == -1), valid, "bigint out of range")
    with np.errstate(all="ignore"):
        safe = np.where(y == 0, 1, y)
        q, r = np.divmod(x, safe)  # floor division: r has the divisor's sign
        q = q + ((r != 0) & ((x < 0) != (safe < 0)))  # floor -> toward zero
    _check((q < lo) | (q > hi), valid, "integer out of range")
    return Vec(Kind.INT, q, valid)


def int_mod(a: Vec, b: Vec) -> Vec:
    """Integer ``%`` with the dividend's sign; division by zero goes to the row path."""
    x, y = a.values, b.values
    valid = both_valid(a, b)
    _check(y == 0, valid, "division by zero")
    with np.errstate(all="ignore"):
        safe = np.where((y == 0) | (y == -1), 1, y)
        return Vec(Kind.INT, np.fmod(x, safe), valid)


def int_neg(a: Vec, hi: int) -> Vec:
    x = a.values
    _check((x == _I64_MIN) | (-x > hi), a.valid, "integer out of range")
    return Vec(Kind.INT, -x, a.valid)


def int_range(a: Vec, lo: int, hi: int) -> Vec:
    """A cast to a narrower integer type."""
    _check((a.values < lo) | (a.values > hi), a.valid, "integer out of range")
    return a


# --- floats ------------------------------------------------------------------------------------


def float_arith(op: str, a: Vec, b: Vec) -> Vec:
    """float8 ``+ - * /`` with the row path's overflow, underflow and division-by-zero errors."""
    x, y = a.values, b.values
    valid = both_valid(a, b)
    with np.errstate(all="ignore"):
        if op == "/":
            _check((y == 0.0) & ~np.isnan(x), valid, "division by zero")  # NaN / 0 is NaN
            r = x / y
            _check(np.isinf(r) & ~np.isinf(x), valid, "overflow")
            _check((r == 0.0) & (x != 0.0) & ~np.isinf(y), valid, "underflow")
            return Vec(Kind.FLOAT, r, valid)
        r = x + y if op == "+" else x - y if op == "-" else x * y
        _check(np.isinf(r) & ~np.isinf(x) & ~np.isinf(y), valid, "overflow")
        if op == "*":
            _check((r == 0.0) & (x != 0.0) & (y != 0.0), valid, "underflow")
    return Vec(Kind.FLOAT, r, valid)


def float_neg(a: Vec) -> Vec:
    return Vec(Kind.FLOAT, -a.values, a.valid)


def int_to_float(a: Vec, exact: bool) -> Vec:
    """int -> float8 (``float(v)``: rounded to nearest); ``exact``: only where every value is
    exact in float8 (an int compared with a float as Python does, exactly)."""
    if exact:
        _check(_beyond(a.values, _EXACT_FLOAT_INT), a.valid, "an integer past 2**53")
    return Vec(Kind.FLOAT, np.asarray(a.values, dtype=np.float64), a.valid)


def float_to_int(a: Vec, lo: int, hi: int) -> Vec:
    """float8 -> int: rint (half to even); NaN, infinity and out-of-range values raise."""
    x = a.values
    with np.errstate(all="ignore"):
        r = np.rint(x)
        _check(~np.isfinite(r) | (r < lo) | (r > hi), a.valid, "integer out of range")
        # lo..hi are within int64 except the bounds of bigint: 2**63 - 1 is 2**63 in float8
        _check(r >= 2.0**63, a.valid, "bigint out of range")
        return Vec(Kind.INT, np.where(np.isfinite(r), r, 0).astype(np.int64), a.valid)


# --- numerics (unscaled int64 at a scale) ------------------------------------------------------


def rescale(a: Vec, scale: int) -> Vec:
    """A numeric (or an integer: scale 0) at a larger ``scale``, exactly."""
    k = scale - a.scale
    if k < 0:
        raise ValueError("rescale only raises the scale")
    if k == 0:
        return Vec(Kind.NUMERIC, a.values, a.valid, scale)
    if k > 18:
        _check(a.values != 0, a.valid, "a numeric past 64 bits")
        return Vec(Kind.NUMERIC, np.zeros_like(a.values), a.valid, scale)
    f = _POW10[k]
    _check(_beyond(a.values, _I64_MAX // f), a.valid, "a numeric past 64 bits")
    with np.errstate(all="ignore"):
        return Vec(Kind.NUMERIC, a.values * f, a.valid, scale)


def align_numeric(a: Vec, b: Vec) -> tuple[Vec, Vec]:
    """Two numerics (or integers) at their larger scale."""
    s = max(a.scale, b.scale)
    return rescale(a, s), rescale(b, s)


def numeric_arith(op: str, a: Vec, b: Vec) -> Vec:
    """numeric ``+ - *``, exact: the scale of ``+``/``-`` is the larger one, of ``*`` the sum."""
    if op == "*":
        r = int_arith("*", a, b, _I64_MIN + 1, _I64_MAX)
        return Vec(Kind.NUMERIC, r.values, r.valid, a.scale + b.scale)
    a, b = align_numeric(a, b)
    r = int_arith(op, a, b, _I64_MIN + 1, _I64_MAX)
    return Vec(Kind.NUMERIC, r.values, r.valid, a.scale)


def numeric_neg(a: Vec) -> Vec:
    return Vec(Kind.NUMERIC, -a.values, a.valid, a.scale)


def _round_half_away(x, k: int):
    """``x / 10**k`` rounded half away from zero (``k`` <= 18)."""
    f = _POW10[k]
    q, r = np.divmod(x, f)  # floor: 0 <= r < f
    # half away from zero: up when r > f/2, or r == f/2 and x >= 0 (x < 0: -q-1 + ... rounds down)
    up = (2 * r > f) | ((2 * r == f) & (x >= 0))
    return q + up


def numeric_to_int(a: Vec, lo: int, hi: int) -> Vec:
    """numeric -> integer: rounded half away from zero, range-checked."""
    if a.scale == 0:
        return int_range(Vec(Kind.INT, a.values, a.valid), lo, hi)
    if a.scale > 18:  # |value| < 0.93: rounds to 0 unless it is 0.5 or more
        _check(a.values != 0, a.valid, "a numeric past the kernels")
        return Vec(Kind.INT, np.zeros_like(a.values), a.valid)
    r = _round_half_away(a.values, a.scale)
    return int_range(Vec(Kind.INT, r, a.valid), lo, hi)


def numeric_typmod(a: Vec, precision: int, scale: int) -> Vec:
    """A cast to numeric(precision, scale): rounded half away from zero to ``scale``; a value
    of ``precision - scale`` or more integer digits raises 'numeric field overflow'."""
    if scale >= a.scale:
        r = rescale(a, scale)
    else:
        k = a.scale - scale
        if k > 18:
            raise NeedsRows("a rounding past the kernels")
        r = Vec(Kind.NUMERIC, _round_half_away(a.values, k), a.valid, scale)
    if precision <= 18:
        _check(_beyond(r.values, _POW10[precision] - 1), r.valid, "numeric field overflow")
    return r


def numeric_to_float(a: Vec) -> Vec:
    """numeric -> float8, correctly rounded: unscaled / 10**scale is one IEEE division of two
    exact doubles when |unscaled| <= 2**53 and scale <= 22; other values go to the row path."""
    if a.scale > 22:
        raise NeedsRows("a numeric scale past exact float division")
    _check(_beyond(a.values, _EXACT_FLOAT_INT), a.valid, "a numeric past 2**53")
    return Vec(Kind.FLOAT, np.asarray(a.values, dtype=np.float64) / float(10**a.scale), a.valid)


# --- text --------------------------------------------------------------------------------------


def _text(v: Vec, n: int) -> Vec:
    return Vec(Kind.TEXT, to_arrow(v, n).cast(pa.string()), v.valid)


def to_text(a: Vec, n: int) -> Vec:
    """int, numeric and boolean -> text (Postgres' output: '-12', '1.500', 'true')."""
    if a.kind not in (Kind.INT, Kind.NUMERIC, Kind.BOOL):
        raise TypeError(f"no text kernel for {a.kind}")
    return _text(a, n)


_INT_TEXT = r"^[ \t\n\r\v\f]*[+-]?[0-9]+[ \t\n\r\v\f]*$"


def text_to_int(a: Vec, lo: int, hi: int) -> Vec:
    """text -> integer (surrounding whitespace and a sign allowed); anything else raises."""
    s = a.values
    ok = pc.match_substring_regex(s, _INT_TEXT)
    _check(~_bool_arrow(ok, None).values, a.valid, "invalid input syntax")
    digits = pc.replace_substring_regex(pc.utf8_trim(s, " \t\n\r\v\f"), r"^\+", "")
    try:
        values = pc.cast(pc.if_else(ok, digits, "0"), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise NeedsRows("out of range") from None
    if isinstance(values, pa.Scalar):
        v = Vec(Kind.INT, np.int64(values.as_py() or 0), a.valid)
    else:
        v = Vec(Kind.INT, pc.fill_null(values, 0).to_numpy(zero_copy_only=False), a.valid)
    return int_range(v, lo, hi)


def text_map(fn: str, a: Vec) -> Vec:
    """lower/upper (ASCII letters only, as the row path) and length (code points)."""
    if fn == "length":
        r = pc.utf8_length(a.values)
        if isinstance(r, pa.Scalar):
            return Vec(Kind.INT, np.int64(r.as_py() or 0), a.valid)
        return Vec(
            Kind.INT, pc.fill_null(r, 0).to_numpy(zero_copy_only=False).astype(np.int64), a.valid
        )
    kernel = pc.ascii_lower if fn == "lower" else pc.ascii_upper
    return Vec(Kind.TEXT, kernel(a.values), a.valid)


def concat(a: Vec, b: Vec) -> Vec:
    """text || text (NULL if either is NULL)."""
    return Vec(Kind.TEXT, pc.binary_join_element_wise(a.values, b.values, ""), both_valid(a, b))


# --- dates and timestamps ----------------------------------------------------------------------


def date_plus_days(d: Vec, days: Vec) -> Vec:
    """date + integer; a date outside Python's range raises in the row path."""
    valid = both_valid(d, days)
    _check(_beyond(days.values, MAX_DAY - MIN_DAY), valid, "date out of range")
    r = d.values + days.values
    _check((r < MIN_DAY) | (r > MAX_DAY), valid, "date out of range")
    return Vec(Kind.DATE, r, valid)


def date_minus_date(a: Vec, b: Vec) -> Vec:
    return Vec(Kind.INT, a.values - b.values, both_valid(a, b))


def date_to_timestamp(d: Vec) -> Vec:
    return Vec(Kind.TIMESTAMP, d.values * DAY_US, d.valid)


def timestamp_to_date(ts: Vec) -> Vec:
    return Vec(Kind.DATE, ts.values // DAY_US, ts.valid)


def bool_to_int(a: Vec) -> Vec:
    return Vec(Kind.INT, np.asarray(a.values, dtype=np.int64), a.valid)


def int_to_bool(a: Vec) -> Vec:
    return Vec(Kind.BOOL, a.values != 0, a.valid)


# --- CASE / COALESCE ---------------------------------------------------------------------------


def select(cond: np.ndarray, a: Vec, b: Vec, n: int) -> Vec:
    """Per row ``a`` where ``cond`` else ``b`` (same kind). Numerics of two scales: the result
    holds one scale only if the rows taken from one side are all NULL, else ``NeedsRows``."""
    if a.kind is not b.kind:
        raise TypeError(f"select {a.kind} or {b.kind}")
    cond = np.broadcast_to(np.asarray(cond, dtype=bool), (n,))
    av, bv = a.valid_mask(n), b.valid_mask(n)
    valid = np.where(cond, av, bv)
    scale = a.scale
    if a.kind is Kind.NUMERIC and a.scale != b.scale:
        from_a, from_b = (cond & av).any(), (~cond & bv).any()
        if from_a and from_b:
            raise NeedsRows("numerics of two scales in one column")
        scale = a.scale if from_a else b.scale
    if a.kind is Kind.TEXT:
        values = pc.if_else(pa.array(cond), a.values, b.values)
        if isinstance(values, pa.Scalar):
            values = pa.repeat(values, n)
    else:
        values = np.where(cond, a.values, b.values)
    return Vec(a.kind, values, None if valid.all() else valid, scale)
