"""Postgres numeric arithmetic that Python's Decimal does differently: division's result scale.

``pg_numeric_div`` is Postgres' ``numeric / numeric`` (``select_div_scale``: at least 16
significant digits, never fewer decimals than either input, rounded half away from zero), in exact
integer arithmetic. It is shared by the expression runtime (``/``), ``avg`` in reduce and window
collections, so all three give the values Postgres gives. Pure functions, no SQL knowledge.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

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


_POW10 = np.array([10**i for i in range(19)], dtype=np.int64)


def pg_numeric_div_many(nums: list[int], num_scale: int, dens: list[int]) -> list[Decimal]:
    """``pg_numeric_div(nums[i] * 10**-num_scale, dens[i])`` for many integer pairs at once.

    >>> pg_numeric_div_many([150, -1], 2, [1, 3])
    [Decimal('1.50000000000000000000'), Decimal('-0.00333333333333333333')]
    """
    return [Decimal(t) for t in pg_numeric_div_texts(nums, num_scale, dens)]


def pg_numeric_div_texts(nums: list[int], num_scale: int, dens: list[int]) -> list[str]:
    """The quotients of ``pg_numeric_div_many`` as numeric text ('15000000000000000E-16').

    The result scale of every quotient (Postgres' ``select_div_scale``: the operands' base-10000
    weights and leading digits) is computed in numpy; each quotient is one integer ``divmod``.
    Numerators past 18 digits and non-positive denominators take ``pg_numeric_div`` itself.

    >>> pg_numeric_div_texts([150], 2, [1])
    ['150000000000000000000E-20']
    """
    n = len(nums)
    if not n:
        return []
    num = np.array(nums, dtype=object)
    small = np.array([abs(v) < 10**18 for v in nums], dtype=bool)
    den_ok = np.array([0 < d < 10**18 for d in dens], dtype=bool)
    fast = small & den_ok
    out: list[str] = [""] * n
    for i in np.flatnonzero(~fast).tolist():
        num_i = Decimal(f"{nums[i]}E-{num_scale}") if num_scale else Decimal(nums[i])
        out[i] = str(pg_numeric_div(num_i, dens[i]))
    idx = np.flatnonzero(fast)
    if not len(idx):
        return out
    a = np.abs(num[idx].astype(np.int64))
    b = np.array(dens, dtype=np.int64)[idx]
    rscale = _result_scales(a, num_scale, b)
    k = rscale - num_scale
    for i, ai, bi, ki, ri in zip(
        idx.tolist(), a.tolist(), b.tolist(), k.tolist(), rscale.tolist(), strict=True
    ):
        if ki >= 0:
            q, r = divmod(ai * 10**ki, bi)
        else:
            bk = bi * 10**-ki
            q, r = divmod(ai, bk)
            bi = bk
        if 2 * r >= bi:
            q += 1
        sign = "-" if q and nums[i] < 0 else ""
        out[i] = f"{sign}{q}E-{ri}"
    return out


def _result_scales(a: np.ndarray, num_scale: int, b: np.ndarray) -> np.ndarray:
    """Postgres' ``select_div_scale`` of ``a * 10**-num_scale / b`` (non-negative int64 arrays)."""
    w1, f1 = _weights_and_first_digits(a, -num_scale)
    w2, f2 = _weights_and_first_digits(b, 0)
    qweight = w1 - w2 - (f1 <= f2).astype(np.int64)
    rscale = np.maximum(_NUMERIC_MIN_SIG_DIGITS - qweight * 4, max(num_scale, 0))
    return np.minimum(rscale, _NUMERIC_MAX_DISPLAY_SCALE)


def _weights_and_first_digits(c: np.ndarray, e: int) -> tuple[np.ndarray, np.ndarray]:
    """``_weight_and_first_digit`` over an int64 array of non-negative coefficients."""
    digits = np.searchsorted(_POW10, c, side="right")  # number of decimal digits (0 for 0)
    weight = (digits - 1 + e) // 4
    shift = e - 4 * weight
    up = np.clip(shift, 0, 18)
    down = np.clip(-shift, 0, 18)
    first = np.where(shift >= 0, c * _POW10[up], c // _POW10[down])
    zero = c == 0
    return np.where(zero, 0, weight), np.where(zero, 0, first)


def pg_numeric_div_text_array(nums: np.ndarray, num_scale: int, dens: np.ndarray):
    """``pg_numeric_div_texts`` over int64 arrays, as a pyarrow string array, with no per-value
    Python where the denominators are below 10**9 (every avg: they are counts).

    The result scales come from ``select_div_scale`` in numpy; the quotients by long division
    in numpy, nine decimal digits a step (``|num| // den``, then the remainder times 10**9 ...),
    one pass per distinct number of fraction digits, rounded half away from zero with the carry
    propagated through the digit groups; the text is joined by Arrow string kernels."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(nums) == 0:
        return pa.array([], pa.string())
    a = np.abs(nums)
    b = dens.astype(np.int64)
    rscale = _result_scales(a, num_scale, b)
    k = rscale - num_scale
    fast = (b > 0) & (b < 10**9) & (k >= 0) & (k <= 90) & (a < np.iinfo(np.int64).max)
    if not fast.all():
        texts = pg_numeric_div_texts(nums.tolist(), num_scale, dens.tolist())
        return pa.array(texts, pa.string())
    parts, order = [], []
    for kk in np.unique(k).tolist():
        idx = np.flatnonzero(k == kk)
        parts.append(_quotient_digits(a[idx], b[idx], kk))
        order.append(idx)
    digits = pa.concat_arrays(parts).take(pa.array(np.argsort(np.concatenate(order))))
    digits = pc.utf8_ltrim(digits, "0")
    zero = pc.equal(pc.utf8_length(digits), 0)
    digits = pc.if_else(zero, "0", digits)
    sign = pc.if_else(pa.array(nums < 0), "-", "")
    sign = pc.if_else(zero, "", sign)
    return pc.binary_join_element_wise(sign, digits, "E-", pa.array(rscale).cast(pa.string()), "")


_LIMB = 10**9


def _quotient_digits(a: np.ndarray, b: np.ndarray, k: int):
    """The digits of round_half_up(a * 10**k / b) (a, b > 0 int64, b < 10**9), zero-padded
    after the integer part, as a pyarrow string array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    q0, r = a // b, a % b
    widths = [9] * (k // 9) + ([k % 9] if k % 9 else [])
    chunks = []
    for w in widths:  # long division, w digits at a time (r < b < 10**9: no overflow)
        t = r * 10**w
        chunks.append(t // b)
        r = t % b
    carry = (2 * r >= b).astype(np.int64)
    for j in range(len(chunks) - 1, -1, -1):
        c = chunks[j] + carry
        limit = 10 ** widths[j]
        carry = (c >= limit).astype(np.int64)
        chunks[j] = c - carry * limit
    q0 = q0 + carry
    pieces = [pc.cast(pa.array(q0), pa.string())]
    for c, w in zip(chunks, widths, strict=True):
        pieces.append(pc.utf8_lpad(pc.cast(pa.array(c), pa.string()), w, "0"))
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, "")
