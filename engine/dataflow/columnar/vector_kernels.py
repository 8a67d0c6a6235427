"""Pure kernels of the vectorized expressions: logic, comparisons, text, dates, CASE.

Each function takes and returns ``Vec``s (``engine.dataflow.columnar.vectors``) and computes
every row at once with numpy (text with Arrow compute); numbers have their own module
(``number_kernels``). The semantics are the row compiler's (``engine.sql.expression_compiler``,
itself checked against Postgres): three-valued logic, Postgres' float order (NaN equals NaN and
sorts above everything), text in code point order (the C collation). A kernel never guesses:
where any non-NULL row would raise in the row path (a bad cast, a date out of range) or holds a
value it cannot represent exactly, it raises ``NeedsRows`` and the batch runs row by row. Each
kernel is checked against the row path in ``tests/dataflow/columnar/test_vector_kernels.py``.
This module must not know about SQL syntax, plans or collections.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar.number_kernels import int_range
from engine.dataflow.columnar.vectors import (
    DAY_US,
    MAX_DAY,
    MIN_DAY,
    Kind,
    NeedsRows,
    Vec,
    beyond,
    both_valid,
    raise_if_any,
    to_arrow,
)


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


def compare(op: str, a: Vec, b: Vec) -> Vec:
    """``a op b`` for operands of one kind (numerics of one scale: ``align_numeric``); NULL if
    either is NULL; floats in Postgres' order."""
    if a.kind is not b.kind or a.scale != b.scale:
        raise TypeError(f"compare {a.kind}/{a.scale} with {b.kind}/{b.scale}")
    valid = both_valid(a, b)
    if a.kind is Kind.TEXT:
        return _bool_arrow(_ARROW_OPS[op](a.values, b.values), valid)
    with np.errstate(invalid="ignore"):
        if a.kind is Kind.FLOAT:
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
    raise_if_any(~_bool_arrow(ok, None).values, a.valid, "invalid input syntax")
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


def text_slice(a: Vec, lo: int, hi: int | None) -> Vec:
    """The code points ``lo`` up to ``hi`` (None: the end) of every text, 0-based."""
    return Vec(Kind.TEXT, pc.utf8_slice_codeunits(a.values, start=lo, stop=hi), a.valid)


_TEXT_TESTS = {
    "equals": lambda s, lit: pc.equal(s, lit),
    "starts_with": lambda s, lit: pc.starts_with(s, lit),
    "ends_with": lambda s, lit: pc.ends_with(s, lit),
    "contains": lambda s, lit: pc.match_substring(s, lit),
    "regex": lambda s, rx: pc.match_substring_regex(s, rx),
}


def text_test(test: str, a: Vec, literal: str) -> Vec:
    """LIKE: equality, prefix, suffix or substring (code points), or a whole-text RE2 match."""
    return _bool_arrow(_TEXT_TESTS[test](a.values, literal), a.valid)


def concat(a: Vec, b: Vec) -> Vec:
    """text || text (NULL if either is NULL)."""
    return Vec(Kind.TEXT, pc.binary_join_element_wise(a.values, b.values, ""), both_valid(a, b))


# --- dates and timestamps ----------------------------------------------------------------------


def date_plus_days(d: Vec, days: Vec) -> Vec:
    """date + integer; a date outside Python's range raises in the row path."""
    valid = both_valid(d, days)
    raise_if_any(beyond(days.values, MAX_DAY - MIN_DAY), valid, "date out of range")
    r = d.values + days.values
    raise_if_any((r < MIN_DAY) | (r > MAX_DAY), valid, "date out of range")
    return Vec(Kind.DATE, r, valid)


def date_minus_date(a: Vec, b: Vec) -> Vec:
    return Vec(Kind.INT, a.values - b.values, both_valid(a, b))


def date_to_timestamp(d: Vec) -> Vec:
    return Vec(Kind.TIMESTAMP, d.values * DAY_US, d.valid)


def timestamp_to_date(ts: Vec) -> Vec:
    return Vec(Kind.DATE, ts.values // DAY_US, ts.valid)


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
