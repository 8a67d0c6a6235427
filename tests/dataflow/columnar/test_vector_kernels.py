"""Each vectorized kernel against the row path's function for one value at a time.

For random and edge operands (zeros, extremes of int64/int4, NaN, infinities, -0.0, NULLs), a
kernel over the whole array must give the row path's value for every row, and a one-row call
must raise ``NeedsRows`` exactly where the row path raises (a whole array raises if any row
does). References: ``engine.sql.functions`` (the compiled expressions' runtime) and Python.
"""

from __future__ import annotations

import datetime
import itertools
import math
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from engine.dataflow.columnar import number_kernels as N
from engine.dataflow.columnar import vector_kernels as K
from engine.dataflow.columnar.vectors import (
    Kind,
    NeedsRows,
    Vec,
    constant,
    from_arrow,
    python_constant,
    to_arrow,
)
from engine.dataflow.errs import EvalError
from engine.sql import functions as F

I64 = 2**63
INT4 = (-(2**31), 2**31 - 1)
INT8 = (-I64, I64 - 1)
EDGE_INTS = [0, 1, -1, 2, -2, 7, -7, 10, 2**31 - 1, -(2**31), I64 - 1, -I64, 2**53 + 1, 3**39]
FLOATS = [0.0, -0.0, 1.5, -2.0, math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 1e-300]


def ints(rng: random.Random, n: int = 300) -> list[int | None]:
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.1:
            out.append(None)
        elif r < 0.4:
            out.append(rng.choice(EDGE_INTS))
        elif r < 0.7:
            out.append(rng.randint(-1000, 1000))
        else:
            out.append(rng.randint(-I64, I64 - 1))
    return out


def vec(values: list, kind: Kind) -> Vec:
    arrow = {
        Kind.INT: pa.int64(),
        Kind.FLOAT: pa.float64(),
        Kind.DATE: pa.date32(),
        Kind.TEXT: pa.string(),
    }[kind]
    return from_arrow(pa.array(values, arrow), kind)


def values(v: Vec, n: int) -> list:
    return to_arrow(v, n).to_pylist()


def row_reference(fn, *columns) -> list:
    """Per row: fn(*values) (None if any is NULL), or the exception class name if it raises."""
    out = []
    for args in zip(*columns, strict=True):
        if any(a is None for a in args):
            out.append(None)
            continue
        try:
            out.append(fn(*args))
        except (EvalError, ZeroDivisionError, OverflowError):
            out.append("raises")
    return out


def check(kernel, reference: list, *columns: list, kinds: tuple = ()) -> None:
    """The kernel over each one-row slice: NeedsRows exactly where the reference raises; over
    the rows that do not raise, in one call, the reference's values. ``kinds``: the columns'
    (default: floats for a column holding floats, else integers)."""
    kinds = kinds or tuple(
        Kind.FLOAT if any(isinstance(v, float) for v in c) else Kind.INT for c in columns
    )
    good = [i for i, r in enumerate(reference) if r != "raises"]
    for i, r in enumerate(reference):
        if r == "raises":
            with pytest.raises(NeedsRows):
                kernel(*[vec([c[i]], k) for c, k in zip(columns, kinds, strict=True)])
    rows = [vec([c[i] for i in good], k) for c, k in zip(columns, kinds, strict=True)]
    got = values(kernel(*rows), len(good))
    want = [reference[i] for i in good]
    bad = [(g, w) for g, w in zip(got, want, strict=True) if not same(g, w)]
    assert not bad, bad[:5]
    if len(good) < len(reference):
        everything = [vec(c, k) for c, k in zip(columns, kinds, strict=True)]
        with pytest.raises(NeedsRows):
            kernel(*everything)


def same(a, b) -> bool:
    if isinstance(b, float):
        return isinstance(a, float) and (
            (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
        )
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("lo, hi", [INT4, INT8])
def test_integer_arithmetic(seed, lo, hi):
    rng = random.Random(seed)
    a, b = ints(rng), ints(rng)
    for op, fn in (("+", int.__add__), ("-", int.__sub__), ("*", int.__mul__)):
        ref = row_reference(lambda x, y, fn=fn: F.int_range_check(fn(x, y), lo, hi, "r"), a, b)
        check(lambda x, y, op=op: N.int_arith(op, x, y, lo, hi), ref, a, b)
    ref = row_reference(lambda x, y: F.int_div(x, y, lo, hi, "r"), a, b)
    check(lambda x, y: N.int_div(x, y, lo, hi), ref, a, b)
    check(N.int_mod, row_reference(F.int_mod, a, b), a, b)
    ref = row_reference(lambda x: F.int_range_check(-x, *INT8, "r"), a)
    check(lambda x: N.int_neg(x, INT8[1]), ref, a)


def test_integer_division_truncates_toward_zero():
    a = [7, -7, 7, -7, 1, -1, 0, -I64, -I64]
    b = [2, 2, -2, -2, 3, 3, -5, 2, 1]
    check(lambda x, y: N.int_div(x, y, *INT8), [3, -3, -3, 3, 0, 0, 0, -(2**62), -I64], a, b)
    check(N.int_mod, [1, -1, 1, -1, 1, -1, 0, 0, 0], a, b)


def test_float_arithmetic():
    pairs = list(itertools.product(FLOATS + [None], repeat=2))
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]

    def add(x, y):
        r = x + y
        return r if math.isfinite(r) else F.float_check(r, x, y)

    def sub(x, y):
        r = x - y
        return r if math.isfinite(r) else F.float_check(r, x, y)

    for op, fn in (("+", add), ("-", sub), ("*", F.float_mul), ("/", F.float_div)):
        check(lambda x, y, op=op: N.float_arith(op, x, y), row_reference(fn, a, b), a, b)


def _pg_key(x: float):
    return (1, 0.0) if x != x else (0, x)  # NaN above everything, equal to itself


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
def test_float_comparisons_follow_postgres_order(op):
    pairs = list(itertools.product(FLOATS + [None], repeat=2))
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    cmp = {
        "==": lambda x, y: x == y,
        "!=": lambda x, y: x != y,
        "<": lambda x, y: x < y,
        "<=": lambda x, y: x <= y,
        ">": lambda x, y: x > y,
        ">=": lambda x, y: x >= y,
    }[op]
    ref = row_reference(lambda x, y: cmp(_pg_key(x), _pg_key(y)), a, b)
    check(lambda x, y: K.compare(op, x, y), ref, a, b)


def test_three_valued_logic():
    tvs = [True, False, None]
    a = [x for x in tvs for _ in tvs]
    b = [y for _ in tvs for y in tvs]
    av = from_arrow(pa.array(a, pa.bool_()), Kind.BOOL)
    bv = from_arrow(pa.array(b, pa.bool_()), Kind.BOOL)

    def kleene_and(x, y):
        return False if False in (x, y) else None if None in (x, y) else True

    def kleene_or(x, y):
        return True if True in (x, y) else None if None in (x, y) else False

    assert values(K.and_(av, bv), 9) == [kleene_and(x, y) for x, y in zip(a, b, strict=True)]
    assert values(K.or_(av, bv), 9) == [kleene_or(x, y) for x, y in zip(a, b, strict=True)]
    assert values(K.not_(av), 9) == [None if x is None else not x for x in a]
    assert values(K.is_null(av, False), 9) == [x is None for x in a]
    assert values(K.is_bool(av, False, True), 9) == [x is not False for x in a]
    assert K.true_rows(K.and_(av, bv), 9).tolist() == [
        x is True and y is True for x, y in zip(a, b, strict=True)
    ]
    c = constant(Kind.BOOL, None)
    assert values(K.or_(av, c), 9) == [kleene_or(x, None) for x in a]


def test_numerics():
    rng = random.Random(5)
    raw = [rng.randint(-(10**12), 10**12) for _ in range(200)] + [0, 5, -5, 15, -15, 25, -25]
    raw += [I64 - 1, -I64 + 1, 10**17]
    a = Vec(Kind.NUMERIC, np.array(raw, dtype=np.int64), None, 1)
    dec = [Decimal(v).scaleb(-1) for v in raw]
    # to numeric(12, 0), numeric(20, 3) and to integer: rounded half away from zero
    for p, s in ((12, 0), (20, 3)):
        ref = row_reference(lambda d, p=p, s=s: F.numeric_typmod(d, p, s), dec)
        got_ref = [r if r == "raises" else int(r.scaleb(s)) for r in ref]
        for i, r in enumerate(got_ref):
            one = Vec(Kind.NUMERIC, np.array([raw[i]], dtype=np.int64), None, 1)
            if r == "raises" or not -I64 < r < I64:  # an error, or past 64 bits
                with pytest.raises(NeedsRows):
                    N.numeric_typmod(one, p, s)
            else:
                assert N.numeric_typmod(one, p, s).values.tolist() == [r]
    ref = row_reference(lambda d: F.numeric_to_int(d, *INT4, "integer out of range"), dec)
    for i, r in enumerate(ref):
        one = Vec(Kind.NUMERIC, np.array([raw[i]], dtype=np.int64), None, 1)
        if r == "raises":
            with pytest.raises(NeedsRows):
                N.numeric_to_int(one, *INT4)
        else:
            assert N.numeric_to_int(one, *INT4).values.tolist() == [r]
    floats = [float(d) if abs(v) <= 2**53 else "raises" for d, v in zip(dec, raw, strict=True)]
    for i, r in enumerate(floats):
        one = Vec(Kind.NUMERIC, np.array([raw[i]], dtype=np.int64), None, 1)
        if r == "raises":
            with pytest.raises(NeedsRows):
                N.numeric_to_float(one)
        else:
            assert N.numeric_to_float(one).values.tolist() == [r]
    # + - * at scales 1 and 3: exact, or NeedsRows past 64 bits
    b = Vec(Kind.NUMERIC, np.array(raw[::-1], dtype=np.int64), None, 3)
    decb = [Decimal(v).scaleb(-3) for v in raw[::-1]]
    for op in "+-*":
        for i in range(len(raw)):
            x = Vec(Kind.NUMERIC, a.values[i : i + 1], None, 1)
            y = Vec(Kind.NUMERIC, b.values[i : i + 1], None, 3)
            want = {"+": dec[i] + decb[i], "-": dec[i] - decb[i], "*": dec[i] * decb[i]}[op]
            scale = 4 if op == "*" else 3
            unscaled = int(want.scaleb(scale))
            if -I64 < unscaled < I64:
                r = N.numeric_arith(op, x, y)
                assert (r.values.tolist(), r.scale) == ([unscaled], scale), (op, dec[i], decb[i])
            else:
                with pytest.raises(NeedsRows):
                    N.numeric_arith(op, x, y)
    assert python_constant(Kind.NUMERIC, Decimal("-1.250")).scale == 3


@pytest.mark.parametrize("scales", [(0, 2), (2, 0), (1, 5), (0, 18), (0, 19), (3, 25)])
def test_order_signs_compare_any_scales_exactly(scales):
    """Integers and numerics whose common scale does not fit 64 bits (bigint extremes beside a
    numeric) compare through the sign of their difference as Decimal compares them: values
    near the int64 limits, equal values at both scales, and a fraction just above or below."""
    rng = random.Random(sum(scales))
    sa, sb = scales
    xs = [I64 - 1, -I64 + 1, 0, 1, -1, 10**17, -(10**17)] + [
        rng.randint(-I64 + 1, I64 - 1) for _ in range(60)
    ]
    ys = []
    for x in xs:  # the same value at b's scale where it fits, and neighbours of it
        exact = Decimal(x).scaleb(-sa).scaleb(sb)
        near = int(exact) if -I64 < exact < I64 else rng.randint(-I64 + 1, I64 - 1)
        ys += [near, near + (near < I64 - 1), near - (near > -I64 + 1)]
    xs = [x for x in xs for _ in range(3)]
    a = Vec(Kind.INT if sa == 0 else Kind.NUMERIC, np.array(xs, dtype=np.int64), None, sa)
    b = Vec(Kind.NUMERIC, np.array(ys, dtype=np.int64), None, sb)
    sign_a, zero = N.order_signs(a, b)
    want = [
        (Decimal(x).scaleb(-sa) > Decimal(y).scaleb(-sb))
        - (Decimal(x).scaleb(-sa) < Decimal(y).scaleb(-sb))
        for x, y in zip(xs, ys, strict=True)
    ]
    assert sign_a.values.tolist() == want and not zero.values.any()
    for op in ("==", "<", ">="):
        got = K.compare(op, sign_a, zero).values.tolist()
        assert got == [{"==": w == 0, "<": w < 0, ">=": w >= 0}[op] for w in want]


def test_numeric_text_and_decimal128_output():
    v = Vec(Kind.NUMERIC, np.array([-1, 0, 12345, -5000], dtype=np.int64), None, 3)
    assert values(K.to_text(v, 4), 4) == ["-0.001", "0.000", "12.345", "-5.000"]
    assert [F.numeric_text(d) for d in to_arrow(v, 4).to_pylist()] == values(K.to_text(v, 4), 4)


@pytest.mark.parametrize("lo, hi", [INT4, INT8])
def test_text_to_int(lo, hi):
    texts = [" 7 ", "+12", "-0012", "1.5", "", "abc", "99999999999", "\v3\n", "- 1", None]
    texts += ["9223372036854775808", "2147483647", "١٢"]  # the last: Arabic-Indic digits
    ref = row_reference(lambda s: F.text_to_int(s, lo, hi, "integer"), texts)
    check(lambda s: K.text_to_int(s, lo, hi), ref, texts, kinds=(Kind.TEXT,))


def test_dates():
    days = [0, 1, -1, 365, None, 2932896, -719162]
    shifts = [1, -1, 30, 2, 5, 1, -1]
    as_dates = [
        None if d is None else datetime.date(1970, 1, 1) + datetime.timedelta(d) for d in days
    ]
    ref = row_reference(F.date_plus_days, as_dates, shifts)
    check(K.date_plus_days, ref, as_dates, shifts, kinds=(Kind.DATE, Kind.INT))


def test_select_keeps_one_numeric_scale_or_needs_rows():
    a = Vec(Kind.NUMERIC, np.array([15, 25], dtype=np.int64), np.array([True, False]), 1)
    b = Vec(Kind.NUMERIC, np.array([7, 8], dtype=np.int64), None, 0)
    with pytest.raises(NeedsRows):  # one row from each: two scales
        K.select(np.array([True, False]), a, b, 2)
    r = K.select(np.array([False, True]), a, b, 2)  # a's only row is NULL: b's scale
    assert (r.scale, values(r, 2)) == (0, [Decimal(7), None])


def test_from_arrow_refuses_other_types():
    with pytest.raises(NeedsRows):
        from_arrow(pa.array([1.0]), Kind.INT)
    with pytest.raises(NeedsRows):
        from_arrow(pa.array([Decimal(2) ** 100], pa.decimal128(38, 0)), Kind.NUMERIC)
    assert from_arrow(pa.array([1, None], pa.int32()), Kind.INT).values.dtype == np.int64
