"""Number kernels of the vectorized expressions: integer, float and numeric arithmetic and casts.

Integers are int64 arrays checked against the SQL type's range (the row path raises 'integer out
of range' there); floats are float64 with the row path's overflow, underflow and division-by-zero
errors; numerics are exact unscaled int64 integers at a known scale (``+``/``-``: the larger
scale, ``*``: the sum, as Postgres), rounded half away from zero where a cast lowers the scale.
Where a non-NULL row would raise in the row path, or a value does not fit 64 bits (or 2**53 as a
float), a kernel raises ``NeedsRows``. Each kernel is checked against the row path's function in
``tests/dataflow/columnar/test_vector_kernels.py``. This module must not know about SQL syntax.
"""

from __future__ import annotations

import numpy as np

from engine.dataflow.columnar.vectors import Kind, NeedsRows, Vec, beyond, both_valid, raise_if_any

_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min
_EXACT_FLOAT_INT = 2**53  # integers up to this magnitude are exact in float64
_POW10 = [10**k for k in range(19)]


# --- integers ----------------------------------------------------------------------------------


def int_arith(op: str, a: Vec, b: Vec, lo: int, hi: int) -> Vec:
    """``a + b``, ``a - b``, ``a * b`` with the result type's range [lo, hi] (else the row
    path raises '... out of range')."""
    x, y = a.values, b.values
    valid = both_valid(a, b)
    with np.errstate(all="ignore"):
        if op == "+":
            r = x + y
            raise_if_any(((x ^ r) & (y ^ r)) < 0, valid, "integer overflow")
        elif op == "-":
            r = x - y
            raise_if_any(((x ^ y) & (x ^ r)) < 0, valid, "integer overflow")
        else:
            r = x * y
            raise_if_any(_mul_overflow(x, y, r), valid, "integer overflow")
    raise_if_any((r < lo) | (r > hi), valid, "integer out of range")
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
    raise_if_any(y == 0, valid, "division by zero")
    raise_if_any((x == _I64_MIN) & (y == -1), valid, "bigint out of range")
    with np.errstate(all="ignore"):
        safe = np.where(y == 0, 1, y)
        q, r = np.divmod(x, safe)  # floor division: r has the divisor's sign
        q = q + ((r != 0) & ((x < 0) != (safe < 0)))  # floor -> toward zero
    raise_if_any((q < lo) | (q > hi), valid, "integer out of range")
    return Vec(Kind.INT, q, valid)


def int_mod(a: Vec, b: Vec) -> Vec:
    """Integer ``%`` with the dividend's sign; division by zero goes to the row path."""
    x, y = a.values, b.values
    valid = both_valid(a, b)
    raise_if_any(y == 0, valid, "division by zero")
    with np.errstate(all="ignore"):
        safe = np.where((y == 0) | (y == -1), 1, y)
        return Vec(Kind.INT, np.fmod(x, safe), valid)


def int_neg(a: Vec, hi: int) -> Vec:
    x = a.values
    raise_if_any((x == _I64_MIN) | (-x > hi), a.valid, "integer out of range")
    return Vec(Kind.INT, -x, a.valid)


def int_range(a: Vec, lo: int, hi: int) -> Vec:
    """A cast to a narrower integer type."""
    raise_if_any((a.values < lo) | (a.values > hi), a.valid, "integer out of range")
    return a


# --- floats ------------------------------------------------------------------------------------


def float_arith(op: str, a: Vec, b: Vec) -> Vec:
    """float8 ``+ - * /`` with the row path's overflow, underflow and division-by-zero errors."""
    x, y = a.values, b.values
    valid = both_valid(a, b)
    with np.errstate(all="ignore"):
        if op == "/":
            raise_if_any((y == 0.0) & ~np.isnan(x), valid, "division by zero")  # NaN / 0 is NaN
            r = x / y
            raise_if_any(np.isinf(r) & ~np.isinf(x), valid, "overflow")
            raise_if_any((r == 0.0) & (x != 0.0) & ~np.isinf(y), valid, "underflow")
            return Vec(Kind.FLOAT, r, valid)
        r = x + y if op == "+" else x - y if op == "-" else x * y
        raise_if_any(np.isinf(r) & ~np.isinf(x) & ~np.isinf(y), valid, "overflow")
        if op == "*":
            raise_if_any((r == 0.0) & (x != 0.0) & (y != 0.0), valid, "underflow")
    return Vec(Kind.FLOAT, r, valid)


def float_neg(a: Vec) -> Vec:
    return Vec(Kind.FLOAT, -a.values, a.valid)


def int_to_float(a: Vec, exact: bool) -> Vec:
    """int -> float8 (``float(v)``: rounded to nearest); ``exact``: only where every value is
    exact in float8 (an int compared with a float as Python does, exactly)."""
    if exact:
        raise_if_any(beyond(a.values, _EXACT_FLOAT_INT), a.valid, "an integer past 2**53")
    return Vec(Kind.FLOAT, np.asarray(a.values, dtype=np.float64), a.valid)


def float_to_int(a: Vec, lo: int, hi: int) -> Vec:
    """float8 -> int: rint (half to even); NaN, infinity and out-of-range values raise."""
    x = a.values
    with np.errstate(all="ignore"):
        r = np.rint(x)
        raise_if_any(~np.isfinite(r) | (r < lo) | (r > hi), a.valid, "integer out of range")
        # lo..hi are within int64 except the bounds of bigint: 2**63 - 1 is 2**63 in float8
        raise_if_any(r >= 2.0**63, a.valid, "bigint out of range")
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
        raise_if_any(a.values != 0, a.valid, "a numeric past 64 bits")
        return Vec(Kind.NUMERIC, np.zeros_like(a.values), a.valid, scale)
    f = _POW10[k]
    raise_if_any(beyond(a.values, _I64_MAX // f), a.valid, "a numeric past 64 bits")
    with np.errstate(all="ignore"):
        return Vec(Kind.NUMERIC, a.values * f, a.valid, scale)


def align_numeric(a: Vec, b: Vec) -> tuple[Vec, Vec]:
    """Two numerics (or integers) at their larger scale."""
    s = max(a.scale, b.scale)
    return rescale(a, s), rescale(b, s)


def order_signs(a: Vec, b: Vec) -> tuple[Vec, Vec]:
    """Two integers or numerics whose scales cannot be aligned in 64 bits (a bigint past
    ~9.2e16 beside a numeric of scale 2, ...) as (the sign of ``a - b``, 0): operands that
    compare as ``a`` and ``b`` do, exactly. The value at the larger scale is split into its
    floor at the smaller scale and a remainder (``y = q * 10**k + r``, 0 <= r < 10**k): the
    other value ``x`` is above it where ``x > q``, equal where ``x == q`` and ``r == 0``."""
    flip = a.scale > b.scale
    low, high = (b, a) if flip else (a, b)
    k = high.scale - low.scale
    y = high.values
    if k > 18:  # |y| < 10**19 <= 10**k: y / 10**k lies in (-1, 1)
        q = np.where(y < 0, -1, 0)
        fraction = y != 0
    else:
        q, r = np.divmod(y, _POW10[k])
        fraction = r != 0
    x = low.values
    sign = np.where(x > q, 1, np.where(x < q, -1, np.where(fraction, -1, 0))).astype(np.int64)
    if flip:
        sign = -sign
    return Vec(Kind.INT, sign, a.valid), Vec(Kind.INT, np.zeros_like(sign), b.valid)


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
        raise_if_any(a.values != 0, a.valid, "a numeric past the kernels")
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
        raise_if_any(beyond(r.values, _POW10[precision] - 1), r.valid, "numeric field overflow")
    return r


def numeric_to_float(a: Vec) -> Vec:
    """numeric -> float8, correctly rounded: unscaled / 10**scale is one IEEE division of two
    exact doubles when |unscaled| <= 2**53 and scale <= 22; other values go to the row path."""
    if a.scale > 22:
        raise NeedsRows("a numeric scale past exact float division")
    raise_if_any(beyond(a.values, _EXACT_FLOAT_INT), a.valid, "a numeric past 2**53")
    return Vec(Kind.FLOAT, np.asarray(a.values, dtype=np.float64) / float(10**a.scale), a.valid)


def bool_to_int(a: Vec) -> Vec:
    return Vec(Kind.INT, np.asarray(a.values, dtype=np.int64), a.valid)


def int_to_bool(a: Vec) -> Vec:
    return Vec(Kind.BOOL, a.values != 0, a.valid)
