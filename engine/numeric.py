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
    propagated through the digit groups; the text is a matrix of ASCII bytes (four digits a
    table lookup) whose kept bytes are the string array's data (``_texts``; 10k averages of
    quantities, the whole division measured: 3.9 ms with the text by Arrow string kernels,
    3.4 ms so)."""
    import pyarrow as pa

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
        q0, chunks, widths = _quotient_limbs(a[idx], b[idx], kk)
        parts.append(_texts(nums[idx] < 0, q0, chunks, widths, f"E-{kk + num_scale}"))
        order.append(idx)
    if len(parts) == 1:
        return parts[0]
    return pa.concat_arrays(parts).take(pa.array(np.argsort(np.concatenate(order))))


def _quotient_limbs(
    a: np.ndarray, b: np.ndarray, k: int
) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """round_half_up(a * 10**k / b) (a, b > 0 int64, b < 10**9) as its integer part and its k
    fraction digits in groups of at most nine (each group's value and digit count)."""
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
    return q0 + carry, chunks, widths


#: the four ASCII digits of every number below 10**4, zero-padded, as one little-endian uint32
_FOUR_DIGITS = np.frombuffer("".join(f"{i:04d}" for i in range(10**4)).encode(), dtype="<u4")


def _digits(x: np.ndarray, width: int) -> np.ndarray:
    """(n, width) ASCII digits of non-negative int64 values below 10**width, zero-padded."""
    groups = -(-width // 4)
    out = np.empty((len(x), groups), dtype="<u4")
    for g in range(groups - 1, -1, -1):
        x, low = np.divmod(x, 10**4)
        out[:, g] = _FOUR_DIGITS[low]
    return out.view(np.uint8)[:, 4 * groups - width :]


def _texts(negative: np.ndarray, q0: np.ndarray, chunks: list, widths: list[int], suffix: str):
    """``[-]digits{suffix}`` per value as a pyarrow string array: q0's digits without leading
    zeros (one "0" for zero) and the chunks' zero-padded digits; "-" where negative but not 0."""
    import pyarrow as pa

    n = len(q0)
    int_width = max(1, int(np.searchsorted(_POW10, q0.max(), side="right")))
    digits = np.concatenate(
        [_digits(q0, int_width), *(_digits(c, w) for c, w in zip(chunks, widths, strict=True))],
        axis=1,
    )
    ndig = digits.shape[1]
    nonzero = digits != ord("0")
    some = nonzero.any(axis=1)
    first = np.where(some, nonzero.argmax(axis=1), ndig - 1)
    tail = np.frombuffer(suffix.encode(), dtype=np.uint8)
    text = np.empty((n, 1 + ndig + len(tail)), dtype=np.uint8)
    text[:, 0] = ord("-")
    text[:, 1 : 1 + ndig] = digits
    text[:, 1 + ndig :] = tail
    keep = np.ones(text.shape, dtype=bool)
    keep[:, 0] = negative & some
    keep[:, 1 : 1 + ndig] = np.arange(ndig) >= first[:, None]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(keep.sum(axis=1, dtype=np.int32), out=offsets[1:])
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text[keep]))
