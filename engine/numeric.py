"""Postgres numeric arithmetic that Python's Decimal does differently: division's result scale.

``pg_numeric_div`` is Postgres' ``numeric / numeric`` (``select_div_scale``: at least 16
significant digits, never fewer decimals than either input, rounded half away from zero), in exact
integer arithmetic. It is shared by the expression runtime (``/``), ``avg`` in reduce and window
collections, so all three give the values Postgres gives. Pure functions, no SQL knowledge.
"""

from __future__ import annotations

from decimal import Decimal

_NUMERIC_MIN_SIG_DIGITS = 16
_NUMERIC_MAX_DISPLAY_SCALE = 1000


def _coefficient_exponent(x: int | Decimal) -> tuple[int, int]:
    """``x`` as ``c * 10**e`` with an integer ``c`` (exactly; keeps a Decimal's scale)."""
    if type(x) is int:
        return x, 0
    sign, digits, exp = x.as_tuple()
    c = int("".join(map(str, digits))) if digits else 0
    return (-c if sign else c), exp  # type: ignore[return-value]


def _weight_and_first_digit(c: int, e: int) -> tuple[int, int]:
    """Postgres NumericVar's weight (base-10000 exponent) and leading base-10000 digit of c*10**e."""
    if not c:
        return 0, 0
    weight = (len(str(c)) - 1 + e) // 4
    shift = e - 4 * weight
    return weight, c * 10**shift if shift >= 0 else c // 10**-shift


def pg_numeric_div(num: int | Decimal, den: int | Decimal) -> Decimal:
    """``num / den`` with Postgres' numeric result scale and rounding (``select_div_scale``).

    At least 16 significant digits, never fewer decimals than either input, rounded half away
    from zero; this is what ``avg`` over integers or numerics returns. Exact integer arithmetic.

    >>> pg_numeric_div(3, 2)
    Decimal('1.5000000000000000')
    >>> pg_numeric_div(300004, 3)
    Decimal('100001.333333333333')
    """
    if (type(num) is not int and not num.is_finite()) or (
        type(den) is not int and not den.is_finite()
    ):
        return Decimal(num) / Decimal(den)
    cn, en = _coefficient_exponent(num)
    cd, ed = _coefficient_exponent(den)
    if not cd:
        raise ZeroDivisionError("division by zero")
    a, b = abs(cn), abs(cd)
    w1, f1 = _weight_and_first_digit(a, en)
    w2, f2 = _weight_and_first_digit(b, ed)
    qweight = w1 - w2 - (1 if f1 <= f2 else 0)
    rscale = max(_NUMERIC_MIN_SIG_DIGITS - qweight * 4, -en, -ed, 0)
    rscale = min(rscale, _NUMERIC_MAX_DISPLAY_SCALE)
    k = en - ed + rscale  # result * 10**rscale == a * 10**k / b
    if k >= 0:
        a *= 10**k
    else:
        b *= 10**-k
    q, r = divmod(a, b)
    if 2 * r >= b:
        q += 1  # half away from zero, as Postgres' round_var
    sign = "-" if q and (cn < 0) != (cd < 0) else ""
    return Decimal(f"{sign}{q}E-{rscale}")
