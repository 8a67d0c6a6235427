"""Runtime helpers called by compiled SQL expressions: Postgres 15 semantics in plain Python.

The expression compiler inlines what it can (comparisons, null checks, integer range checks);
everything with more logic than an expression lives here: integer division and modulo, numeric
division scale, casts with Postgres' input syntax and error messages, LIKE patterns, string
functions, date_trunc/extract and interval arithmetic. Helpers take non-NULL arguments (the
generated code does the NULL checks) and raise ``EvalError`` with Postgres' message. This module
must not know about sqlglot or code generation, and must not depend on the session's locale or
time zone (incview assumes a ``C``-collation database: case mapping is ASCII-only).
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import math
import re
import struct
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache

from engine.dataflow.errs import EvalError
from engine.dataflow.nan import canonical_value
from engine.numeric import pg_numeric_div
from engine.pg_interval import PgInterval
from engine.pg_interval import interval_text as pg_interval_text

NUMERIC_CONTEXT = decimal.Context(
    prec=decimal.MAX_PREC,
    rounding=ROUND_HALF_UP,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)
"""Exact +, -, * on Decimals (Postgres numeric never rounds them); set per batch by the compiler."""

_INF = math.inf


def raise_error(message: str):
    raise EvalError(message)


# --- integers ---------------------------------------------------------------------------------


def int_div(a: int, b: int, lo: int, hi: int, overflow: str) -> int:
    """Integer division truncating toward zero (Postgres), with a range check on the result."""
    if b == 0:
        raise EvalError("division by zero")
    q = abs(a) // abs(b)
    if (a < 0) != (b < 0):
        q = -q
    if q < lo or q > hi:
        raise EvalError(overflow)
    return q


def int_mod(a: int, b: int) -> int:
    """``a % b`` with the sign of the dividend (Postgres), never an overflow."""
    if b == 0:
        raise EvalError("division by zero")
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def int_range_check(v: int, lo: int, hi: int, message: str) -> int:
    if v < lo or v > hi:
        raise EvalError(message)
    return v


# --- numeric ----------------------------------------------------------------------------------


def numeric_div(a: Decimal | int, b: Decimal | int) -> Decimal:
    """Postgres ``numeric / numeric``: result scale from ``select_div_scale``, rounded half away."""
    if b == 0:
        raise EvalError("division by zero")
    if not (Decimal(a).is_finite() and Decimal(b).is_finite()):
        return NUMERIC_CONTEXT.divide(Decimal(a), Decimal(b))
    return pg_numeric_div(a, b)


def numeric_mod(a: Decimal | int, b: Decimal | int) -> Decimal:
    if b == 0:
        raise EvalError("division by zero")
    r = NUMERIC_CONTEXT.remainder(Decimal(a), Decimal(b))
    return r.copy_abs() if r == 0 else r


# round(numeric, n) limits n as Postgres 15 does: no scale beyond NUMERIC_DSCALE_MAX, nor a
# rounding position before the largest numeric's first digit
_ROUND_PLACES = (-(0x7FFF + 1) * 4 - 1, 0x3FFF)


def numeric_round(d: Decimal, places: int = 0) -> Decimal:
    """round(numeric, n): half away from zero; result scale max(n, 0)."""
    if not d.is_finite():
        return d
    places = min(max(places, _ROUND_PLACES[0]), _ROUND_PLACES[1])
    r = d.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP, NUMERIC_CONTEXT)
    if places < 0:
        r = r.quantize(Decimal(1), context=NUMERIC_CONTEXT)
    return r.copy_abs() if r == 0 else r


def numeric_trunc_scale(d: Decimal, rounding: str) -> Decimal:
    """floor/ceil of a numeric: scale 0."""
    if not d.is_finite():
        return d
    r = d.quantize(Decimal(1), rounding, NUMERIC_CONTEXT)
    return r.copy_abs() if r == 0 else r


def numeric_typmod(d: Decimal, precision: int, scale: int) -> Decimal:
    """Coerce to numeric(precision, scale): round half away from zero, then check the digits."""
    if not d.is_finite():
        if d.is_nan():
            return d
        raise EvalError("numeric field overflow")
    r = d.quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP, NUMERIC_CONTEXT)
    if r != 0 and r.adjusted() >= precision - scale:
        raise EvalError("numeric field overflow")
    return r.copy_abs() if r == 0 else r


def numeric_to_int(d: Decimal, lo: int, hi: int, message: str) -> int:
    if d.is_nan():
        raise EvalError(f"cannot convert NaN to {_INT_NAMES[message]}")
    if d.is_infinite():
        raise EvalError(f"cannot convert infinity to {_INT_NAMES[message]}")
    v = int(d.to_integral_value(ROUND_HALF_UP, NUMERIC_CONTEXT))
    if v < lo or v > hi:
        raise EvalError(message)
    return v


_INT_NAMES = {
    "smallint out of range": "smallint",
    "integer out of range": "integer",
    "bigint out of range": "bigint",
}


def float_to_int(x: float, lo: int, hi: int, message: str) -> int:
    """float8 -> int: rint() (round half to even), like Postgres."""
    if x != x or x in (_INF, -_INF):
        raise EvalError(message)
    v = round(x)
    if v < lo or v > hi:
        raise EvalError(message)
    return v


def float_to_numeric(x: float, digits: int = 15) -> Decimal:
    """float8 -> numeric keeps DBL_DIG (15) significant digits (float4: 6), as Postgres does."""
    if x != x:
        return Decimal("NaN")
    if x in (_INF, -_INF):
        return Decimal("Infinity") if x > 0 else Decimal("-Infinity")
    d = Decimal(format(x, f".{digits}g"))
    if d.as_tuple().exponent > 0:
        d = d.quantize(Decimal(1), context=NUMERIC_CONTEXT)
    return d.copy_abs() if d == 0 else d


def numeric_text(d: Decimal) -> str:
    if d.is_nan():
        return "NaN"
    if d.is_infinite():
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        d = d.copy_abs()
    return format(d, "f")


# --- floats -----------------------------------------------------------------------------------


def float_check(result: float, a: float, b: float) -> float:
    """Called when an add/sub result is not finite: overflow unless an input was already inf/NaN."""
    if math.isinf(result) and not (math.isinf(a) or math.isinf(b)):
        raise EvalError("value out of range: overflow")
    return result


def float_mul(a: float, b: float) -> float:
    r = a * b
    if math.isinf(r) and not (math.isinf(a) or math.isinf(b)):
        raise EvalError("value out of range: overflow")
    if r == 0.0 and a != 0.0 and b != 0.0:
        raise EvalError("value out of range: underflow")
    return r


def float_div(a: float, b: float) -> float:
    if b == 0.0:
        if a == a:
            raise EvalError("division by zero")
        return a  # Postgres' float8_div: NaN / 0 is NaN
    r = a / b
    if math.isinf(r) and not math.isinf(a):
        raise EvalError("value out of range: overflow")
    if r == 0.0 and a != 0.0 and not math.isinf(b):
        raise EvalError("value out of range: underflow")
    return r


def to_float4(x: float) -> float:
    """Round a float to single precision (real), with Postgres' overflow/underflow errors.

    The result is a real as the engine carries it: the double nearest to the real's shortest
    decimal text, which is what Postgres prints and what the snapshot and the CDC decoder read
    (``0.1``, not the single-precision value ``0.10000000149011612``).
    """
    if x != x or math.isinf(x):
        return x
    try:
        r = _unpack_f(_pack_f(x))[0]
    except OverflowError:
        raise EvalError("value out of range: overflow") from None
    if r == 0.0 and x != 0.0:
        raise EvalError("value out of range: underflow")
    return float(float4_text(r))


def float4_to_float8(x: float) -> float:
    """real -> double precision: the real's exact single-precision value, as Postgres widens it
    (a real carried as ``0.1`` is ``0.10000000149011612`` in double precision)."""
    if x != x or math.isinf(x):
        return x
    return _unpack_f(_pack_f(x))[0]


_pack_f = struct.Struct("<f").pack  # standard size: OverflowError past the largest real
_unpack_f = struct.Struct("<f").unpack


def float_floor(x: float) -> float:
    """floor(float8): +-Infinity and NaN stay themselves."""
    return float(math.floor(x)) if math.isfinite(x) else x


def float_ceil(x: float) -> float:
    return float(math.ceil(x)) if math.isfinite(x) else x


def float_round(x: float) -> float:
    """round(float8): rint, half to even."""
    if x != x or math.isinf(x):
        return x
    return float(round(x))


def _shortest_text(sign: bool, digits: str, e10: int, exponent_from: int = 15) -> str:
    """Postgres' shortest-digits output: positional for exponents in [-4, ``exponent_from``)
    (float8: 15, float4: 6), else ``1.5e+07``."""
    n = len(digits)
    if -4 <= e10 < exponent_from:
        if e10 >= n - 1:
            out = digits + "0" * (e10 - n + 1)
        elif e10 >= 0:
            out = digits[: e10 + 1] + "." + digits[e10 + 1 :]
        else:
            out = "0." + "0" * (-e10 - 1) + digits
    else:
        m = digits[0] + ("." + digits[1:] if n > 1 else "")
        out = f"{m}e{'+' if e10 >= 0 else '-'}{abs(e10):02d}"
    return ("-" if sign else "") + out


def float8_text(x: float) -> str:
    """Postgres 15's float8out (shortest round-trip digits, exponent outside [-4, 15))."""
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0.0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    d = Decimal(repr(x))  # the fewest digits that read back as x, a tie included
    low, high = _rounding_interval(x, math.nextafter(abs(x), 0.0), math.nextafter(abs(x), _INF))
    if not low < d < high:  # a tie: Postgres (ryu) takes the next length that is no tie
        for p in range(len(d.as_tuple().digits), 17):
            d = Decimal(format(x, f".{p}e"))
            if low < d < high:
                break
    sign, digits, exp = d.as_tuple()
    s = "".join(map(str, digits)).rstrip("0") or "0"
    e10 = len(digits) - 1 + exp
    return _shortest_text(bool(sign), s, e10)


def _rounding_interval(x: float, below: float, above: float) -> tuple[Decimal, Decimal]:
    """The decimals strictly between the two bounds read back as ``x`` (finite, not 0), whose
    neighbours in magnitude are ``below`` and ``above`` (+inf past the largest value): the
    midpoints between them."""
    ax = Decimal(abs(x))
    low = (ax + Decimal(below)) / 2
    high = (ax + Decimal(above)) / 2 if math.isfinite(above) else ax + (ax - low)
    return (low, high) if x > 0 else (-high, -low)


def _float4_rounding_interval(x: float) -> tuple[Decimal, Decimal]:
    """``_rounding_interval`` of the real ``x`` (its exact value; finite, not 0)."""
    (bits,) = struct.unpack("<I", _pack_f(abs(x)))
    below = struct.unpack("<f", struct.pack("<I", bits - 1))[0]
    above = struct.unpack("<f", struct.pack("<I", bits + 1))[0]  # +inf past the largest real
    return _rounding_interval(x, below, above)


def float4_text(x: float) -> str:
    """Postgres 15's float4out: the fewest digits that read back as the same real."""
    if x != x or math.isinf(x) or x == 0.0:
        return float8_text(x)
    x = _unpack_f(_pack_f(x))[0]
    low, high = _float4_rounding_interval(x)
    for p in range(9):
        s = format(x, f".{p}e")
        if low < Decimal(s) < high:  # a tie reads back as x, but Postgres (ryu) rejects it
            break
    mant, e = s.split("e")
    neg = mant.startswith("-")
    digits = mant.lstrip("-").replace(".", "").rstrip("0") or "0"
    return _shortest_text(neg, digits, int(e), exponent_from=6)


# --- text input (casts from text) -------------------------------------------------------------

_WS = " \t\n\r\v\f"
_INT_RE = re.compile(r"[ \t\n\r\v\f]*([+-]?[0-9]+)[ \t\n\r\v\f]*")
_NUM_RE = re.compile(
    r"[ \t\n\r\v\f]*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[ \t\n\r\v\f]*"
)
_SPECIAL_NUM = {
    "nan": "NaN",
    "infinity": "Infinity",
    "+infinity": "Infinity",
    "-infinity": "-Infinity",
    "inf": "Infinity",
    "+inf": "Infinity",
    "-inf": "-Infinity",
}


def _invalid(typename: str, s: str) -> EvalError:
    return EvalError(f'invalid input syntax for type {typename}: "{s}"')


def text_to_int(s: str, lo: int, hi: int, typename: str) -> int:
    m = _INT_RE.fullmatch(s)
    if not m:
        raise _invalid(typename, s)
    v = int(m.group(1))
    if v < lo or v > hi:
        raise EvalError(f'value "{s}" is out of range for type {typename}')
    return v


def text_to_numeric(s: str) -> Decimal:
    m = _NUM_RE.fullmatch(s)
    if not m:
        special = _SPECIAL_NUM.get(s.strip(_WS).lower())
        if special:
            return Decimal(special)
        raise _invalid("numeric", s)
    d = Decimal(m.group(1))
    if d.as_tuple().exponent > 0:
        d = d.quantize(Decimal(1), context=NUMERIC_CONTEXT)
    return d.copy_abs() if d == 0 else d


def numeric_to_float8(v: Decimal) -> float:
    """numeric -> double precision with Postgres' range errors (Python's float() gives inf/0)."""
    r = float(v)
    if (math.isinf(r) and v.is_finite()) or (r == 0.0 and v != 0):
        text = str(v) if len(str(v)) <= 40 else f"{v:.6e}"
        raise EvalError(f'"{text}" is out of range for type double precision')
    return r


def text_to_float(s: str, typename: str = "double precision") -> float:
    t = s.strip(_WS)
    m = _NUM_RE.fullmatch(t)
    if not m:
        special = _SPECIAL_NUM.get(t.lower())
        if special:
            return float(special)
        raise _invalid(typename, s)
    v = float(t)
    if math.isinf(v) or (v == 0.0 and Decimal(t) != 0):
        raise EvalError(f'"{t}" is out of range for type {typename}')
    return v


_TRUE = ("t", "tr", "tru", "true", "y", "ye", "yes", "on", "1")
_FALSE = ("f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0")


def text_to_bool(s: str) -> bool:
    t = s.strip(_WS).lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise _invalid("boolean", s)


_TS_RE = re.compile(
    r"[ \t\n\r\v\f]*([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})"
    r"(?:[ T]+([0-9]{1,2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,6}))?)?)?[ \t\n\r\v\f]*"
)


def text_to_date(s: str) -> datetime.date:
    """ISO dates ('YYYY-MM-DD', a time part is ignored); other Postgres formats are rejected."""
    if not _TS_RE.fullmatch(s):
        raise _invalid("date", s)
    try:
        return text_to_timestamp(s).date()
    except EvalError:
        raise EvalError(f'date/time field value out of range: "{s}"') from None


def text_to_timestamp(s: str) -> datetime.datetime:
    """ISO timestamps ('YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]')."""
    m = _TS_RE.fullmatch(s)
    if not m:
        raise _invalid("timestamp", s)
    y, mo, d, h, mi, sec, frac = m.groups()
    try:
        return datetime.datetime(
            int(y),
            int(mo),
            int(d),
            int(h or 0),
            int(mi or 0),
            int(sec or 0),
            int((frac or "0").ljust(6, "0")),
        )
    except ValueError:
        raise EvalError(f'date/time field value out of range: "{s}"') from None


# --- text output (casts to text, concat) ------------------------------------------------------


def bool_text(b: bool) -> str:
    """boolean::text."""
    return "true" if b else "false"


def bool_out(b: bool) -> str:
    """boolout, used by concat(): 't' / 'f'."""
    return "t" if b else "f"


def timestamp_text(ts: datetime.datetime) -> str:
    s = ts.strftime("%Y-%m-%d %H:%M:%S")
    if ts.microsecond:
        s += f".{ts.microsecond:06d}".rstrip("0")
    return s


def date_text(d: datetime.date) -> str:
    return d.isoformat()


def interval_text(iv: datetime.timedelta) -> str:
    """Postgres' default IntervalStyle for a timedelta (days and time kept apart)."""
    if isinstance(iv, PgInterval):
        return pg_interval_text(iv)
    days = iv.days
    secs = iv.seconds
    micros = iv.microseconds
    parts = []
    if days and secs == 0 and micros == 0:
        return f"{days} day" if days in (1, -1) else f"{days} days"
    if days < 0 and (secs or micros):  # Python normalises; Postgres keeps signs per field
        total = -(((-days) * 86400 - secs) * 1_000_000 - micros)
        neg = True
        total = -total
    else:
        total = (days * 86400 + secs) * 1_000_000 + micros
        neg = False
    if days > 0:
        parts.append(f"{days} day" if days == 1 else f"{days} days")
        total -= days * 86400 * 1_000_000
    h, rem = divmod(total, 3_600_000_000)
    m, rem = divmod(rem, 60_000_000)
    s, us = divmod(rem, 1_000_000)
    t = f"{'-' if neg else ''}{h:02d}:{m:02d}:{s:02d}"
    if us:
        t += f".{us:06d}".rstrip("0")
    parts.append(t)
    return " ".join(parts)


# --- LIKE -------------------------------------------------------------------------------------


def like_tokens(pattern: str, escape: str | None = "\\") -> list[str]:
    """Split a LIKE pattern into '%', '_' and literal characters (as 1-char strings 'Lx')."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if escape and c == escape:
            if i + 1 >= n:
                raise EvalError("LIKE pattern must not end with escape character")
            out.append("L" + pattern[i + 1])
            i += 2
            continue
        out.append(c if c in "%_" else "L" + c)
        i += 1
    return out


def _tokens_regex(tokens: list[str]) -> str:
    return "".join(".*" if t == "%" else "." if t == "_" else re.escape(t[1]) for t in tokens)


@lru_cache(maxsize=4096)
def like_regex(pattern: str, escape: str | None = "\\") -> re.Pattern:
    return re.compile(_tokens_regex(like_tokens(pattern, escape)), re.DOTALL)


@lru_cache(maxsize=4096)
def _runtime_like(pattern: str, escape: str | None) -> tuple[re.Pattern, bool]:
    """(regex, dangling): a pattern ending in a lone escape raises only if matching reaches it
    with text left (Postgres' MatchText stops at the end of the text: 'ab' LIKE 'ab\\' is
    false); the regex then matches the pattern before the escape and one more character."""
    if escape and pattern.endswith(escape):
        k = len(pattern) - len(pattern.rstrip(escape))
        if k % 2 == 1:
            tokens = like_tokens(pattern[:-1], escape)
            return re.compile(_tokens_regex(tokens) + "(?=.)", re.DOTALL), True
    return like_regex(pattern, escape), False


def like(s: str, pattern: str, escape: str | None = "\\") -> bool:
    rx, dangling = _runtime_like(pattern, escape)
    if dangling:
        if rx.match(s) is not None:
            raise EvalError("LIKE pattern must not end with escape character")
        return False
    return rx.fullmatch(s) is not None


def ilike(s: str, pattern: str, escape: str | None = "\\") -> bool:
    return like(ascii_lower(s), ascii_lower(pattern), escape)


def like_escape(e: str) -> str | None:
    if e == "":
        return None
    if len(e) != 1:
        raise EvalError("invalid escape string")
    return e


# --- strings ----------------------------------------------------------------------------------

_LOWER = {c: c + 32 for c in range(65, 91)}
_UPPER = {c: c - 32 for c in range(97, 123)}


def ascii_lower(s: str) -> str:
    """lower() in a C-collation database: ASCII letters only."""
    return s.lower() if s.isascii() else s.translate(_LOWER)


def ascii_upper(s: str) -> str:
    return s.upper() if s.isascii() else s.translate(_UPPER)


def substring(s: str, start: int, length: int | None = None) -> str:
    if length is None:
        return s[max(start - 1, 0) :]
    if length < 0:
        raise EvalError("negative substring length not allowed")
    end = start - 1 + length
    if end <= 0:
        return ""
    return s[max(start - 1, 0) : end]


def split_part(s: str, delimiter: str, n: int) -> str:
    if n == 0:
        raise EvalError("field position must not be zero")
    if delimiter == "":
        return s if n in (1, -1) else ""
    parts = s.split(delimiter)
    if n > 0:
        return parts[n - 1] if n <= len(parts) else ""
    return parts[n] if -n <= len(parts) else ""


def right(s: str, n: int) -> str:
    if n == -(2**31):  # Postgres negates n in C: INT_MIN stays negative, the whole string results
        return s
    if n >= 0:
        return s[len(s) - n :] if n < len(s) else s
    return s[-n:]


def replace(s: str, old: str, new: str) -> str:
    return s if old == "" else s.replace(old, new)


def repeat(s: str, n: int) -> str:
    return s * n if n > 0 else ""


# --- GREATEST / LEAST -------------------------------------------------------------------------


def greatest(*args):
    """NULLs ignored; a NaN is greater than every number (Postgres' btree order)."""
    vals = [v for v in args if v is not None]
    if not vals:
        return None
    for v in vals:
        if v != v:
            return canonical_value(v)
    return max(vals)


def least(*args):
    """NULLs ignored; a NaN is greater than every number, so the least only when all are NaN."""
    vals = [v for v in args if v is not None]
    numbers = [v for v in vals if v == v]
    if numbers:
        return min(numbers)
    return canonical_value(vals[0]) if vals else None


# --- dates, timestamps, intervals -------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """An interval with a month part (``interval '1 month'``); day/time parts as a timedelta.

    Only constants carry this type: values read from Postgres are ``timedelta`` (psycopg folds
    months into 30 days), so month intervals are supported as literals added to or subtracted
    from dates and timestamps.
    """

    months: int
    delta: datetime.timedelta = datetime.timedelta(0)

    def __neg__(self) -> Interval:
        return Interval(-self.months, -self.delta)


_UNITS = {
    "microsecond": ("us", 1),
    "microseconds": ("us", 1),
    "us": ("us", 1),
    "usec": ("us", 1),
    "usecs": ("us", 1),
    "millisecond": ("us", 1000),
    "milliseconds": ("us", 1000),
    "ms": ("us", 1000),
    "msec": ("us", 1000),
    "msecs": ("us", 1000),
    "second": ("us", 1_000_000),
    "seconds": ("us", 1_000_000),
    "sec": ("us", 1_000_000),
    "secs": ("us", 1_000_000),
    "s": ("us", 1_000_000),
    "minute": ("us", 60_000_000),
    "minutes": ("us", 60_000_000),
    "min": ("us", 60_000_000),
    "mins": ("us", 60_000_000),
    "m": ("us", 60_000_000),
    "hour": ("us", 3_600_000_000),
    "hours": ("us", 3_600_000_000),
    "hr": ("us", 3_600_000_000),
    "hrs": ("us", 3_600_000_000),
    "h": ("us", 3_600_000_000),
    "day": ("d", 1),
    "days": ("d", 1),
    "d": ("d", 1),
    "week": ("d", 7),
    "weeks": ("d", 7),
    "w": ("d", 7),
    "month": ("mon", 1),
    "months": ("mon", 1),
    "mon": ("mon", 1),
    "mons": ("mon", 1),
    "year": ("mon", 12),
    "years": ("mon", 12),
    "yr": ("mon", 12),
    "yrs": ("mon", 12),
    "y": ("mon", 12),
    "decade": ("mon", 120),
    "decades": ("mon", 120),
    "century": ("mon", 1200),
    "centuries": ("mon", 1200),
}
_IV_TOKEN = re.compile(
    r"\s*(?:([+-]?\d+(?:\.\d+)?)\s*([a-z]+)|([+-]?)(\d+):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?)?)",
    re.I,
)


def _interval_fields(text: str) -> tuple[int, Decimal, Decimal]:
    """Postgres interval input as (months, days, microseconds), 'ago' applied."""
    s = text.strip().lower()
    if re.fullmatch(r"[-+]?\d+(\.\d+)?", s):  # a bare number: seconds
        s += " seconds"
    ago = s.endswith(" ago")
    if ago:
        s = s[:-4]
    months = 0
    days = Decimal(0)
    micros = Decimal(0)
    pos = 0
    matched = False
    while pos < len(s):
        m = _IV_TOKEN.match(s, pos)
        if not m or m.end() == pos:
            if s[pos:].strip() == "":
                break
            raise _invalid("interval", text)
        pos = m.end()
        matched = True
        if m.group(1) is not None:
            unit = _UNITS.get(m.group(2))
            if unit is None:
                raise _invalid("interval", text)
            kind, mult = unit
            n = Decimal(m.group(1))
            if kind == "mon":
                if n != n.to_integral_value():
                    raise EvalError(f"fractional months in interval {text!r} are not supported")
                months += int(n) * mult
            elif kind == "d":
                days += n * mult
            else:
                micros += n * mult
        else:
            sign = -1 if m.group(3) == "-" else 1
            h, mi = int(m.group(4)), int(m.group(5))
            sec = int(m.group(6) or 0)
            us = int((m.group(7) or "0").ljust(6, "0"))
            micros += sign * (((h * 60 + mi) * 60 + sec) * 1_000_000 + us)
    if not matched:
        raise _invalid("interval", text)
    if ago:
        return -months, -days, -micros
    return months, days, micros


def parse_interval(text: str) -> PgInterval:
    """Parse Postgres interval input ('1 day 2 hours', '3 months', '01:30:00', '2 weeks ago')
    into its three fields, as Postgres stores it."""
    return PgInterval(*interval_parts(text))


def interval_parts(text: str) -> tuple[int, int, int]:
    """Postgres' three interval fields (months, days, microseconds), kept apart as Postgres
    keeps them (``'1 day'`` is not ``'24 hours'`` across a DST change); a fraction of a day
    goes to the time part.

    >>> interval_parts("1 mon 1.5 days 2 hours")
    (1, 1, 50400000000)
    """
    months, days, micros = _interval_fields(text)
    whole = int(days)  # toward zero, as Postgres
    micros += (days - whole) * 86_400_000_000
    return months, whole, int(micros.to_integral_value(rounding=ROUND_HALF_UP))


def add_months(ts: datetime.date, months: int):
    y, m = divmod(ts.month - 1 + months, 12)
    year = ts.year + y
    month = m + 1
    day = min(ts.day, calendar.monthrange(year, month)[1]) if 1 <= year <= 9999 else ts.day
    try:
        return ts.replace(year=year, month=month, day=day)
    except ValueError:
        raise EvalError("timestamp out of range") from None


def ts_plus_interval(ts: datetime.datetime, iv) -> datetime.datetime:
    """timestamp + interval: months first (day clamped to the month's end), then days and time."""
    try:
        if isinstance(iv, PgInterval):
            return add_months(ts, iv.months) + datetime.timedelta(
                days=iv.idays, microseconds=iv.micros
            )
        if isinstance(iv, Interval):
            return add_months(ts, iv.months) + iv.delta
        return ts + iv
    except OverflowError:
        raise EvalError("timestamp out of range") from None


def ts_minus_interval(ts: datetime.datetime, iv) -> datetime.datetime:
    return ts_plus_interval(ts, -iv)


def date_plus_days(d: datetime.date, n: int) -> datetime.date:
    """date + integer (a date beyond the years 1-9999, which Postgres has, is out of range)."""
    try:
        return d + datetime.timedelta(days=n)
    except OverflowError:
        raise EvalError("date out of range") from None


def date_minus_days(d: datetime.date, n: int) -> datetime.date:
    """date - integer, without negating n (- -2147483648 is no integer overflow in Postgres)."""
    try:
        return d - datetime.timedelta(days=n)
    except OverflowError:
        raise EvalError("date out of range") from None


def date_to_ts(d: datetime.date) -> datetime.datetime:
    return datetime.datetime(d.year, d.month, d.day)


_TRUNC_UNITS = {
    "microseconds": "microseconds",
    "microsecond": "microseconds",
    "milliseconds": "milliseconds",
    "millisecond": "milliseconds",
    "second": "second",
    "seconds": "second",
    "minute": "minute",
    "minutes": "minute",
    "hour": "hour",
    "hours": "hour",
    "day": "day",
    "days": "day",
    "week": "week",
    "weeks": "week",
    "month": "month",
    "months": "month",
    "quarter": "quarter",
    "year": "year",
    "years": "year",
    "decade": "decade",
    "decades": "decade",
    "century": "century",
    "centuries": "century",
    "millennium": "millennium",
    "millennia": "millennium",
}


def trunc_unit(name: str) -> str | None:
    return _TRUNC_UNITS.get(name.lower())


def date_trunc(unit: str, ts: datetime.datetime) -> datetime.datetime:
    if unit == "microseconds":
        return ts
    if unit == "milliseconds":
        return ts.replace(microsecond=ts.microsecond // 1000 * 1000)
    if unit == "second":
        return ts.replace(microsecond=0)
    if unit == "minute":
        return ts.replace(second=0, microsecond=0)
    if unit == "hour":
        return ts.replace(minute=0, second=0, microsecond=0)
    day = datetime.datetime(ts.year, ts.month, ts.day)
    if unit == "day":
        return day
    if unit == "week":
        return day - datetime.timedelta(days=ts.weekday())
    if unit == "month":
        return day.replace(day=1)
    if unit == "quarter":
        return day.replace(month=(ts.month - 1) // 3 * 3 + 1, day=1)
    y = ts.year
    if unit == "decade":
        y = y // 10 * 10
    elif unit == "century":
        y = (y + 99) // 100 * 100 - 99
    elif unit == "millennium":
        y = (y + 999) // 1000 * 1000 - 999
    return datetime.datetime(max(y, 1), 1, 1)


_EPOCH = datetime.datetime(1970, 1, 1)
DATE_FIELDS = frozenset(
    [
        "day",
        "month",
        "year",
        "decade",
        "century",
        "millennium",
        "isoyear",
        "week",
        "quarter",
        "dow",
        "isodow",
        "doy",
        "epoch",
    ]
)
TIMESTAMP_FIELDS = DATE_FIELDS | {"microseconds", "milliseconds", "second", "minute", "hour"}
_FIELD_ALIASES = {
    "microsecond": "microseconds",
    "us": "microseconds",
    "millisecond": "milliseconds",
    "ms": "milliseconds",
    "seconds": "second",
    "minutes": "minute",
    "hours": "hour",
    "days": "day",
    "months": "month",
    "years": "year",
    "weeks": "week",
    "decades": "decade",
    "centuries": "century",
    "millennia": "millennium",
}


def extract_field_name(name: str) -> str:
    n = name.lower()
    return _FIELD_ALIASES.get(n, n)


def extract(field: str, v: datetime.date) -> Decimal:
    """EXTRACT(field FROM timestamp|date) as numeric (Postgres 14+)."""
    if field == "second":
        return Decimal(v.second * 1_000_000 + v.microsecond).scaleb(-6)
    if field == "milliseconds":
        return Decimal(v.second * 1_000_000 + v.microsecond).scaleb(-3)
    if field == "microseconds":
        return Decimal(v.second * 1_000_000 + v.microsecond)
    if field == "epoch":
        if isinstance(v, datetime.datetime):
            delta = v - _EPOCH
            us = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
            return Decimal(us).scaleb(-6)
        return Decimal((v - _EPOCH.date()).days * 86400)
    return Decimal(_int_field(field, v))


def _int_field(field: str, v: datetime.date) -> int:
    if field == "minute":
        return v.minute
    if field == "hour":
        return v.hour
    if field == "day":
        return v.day
    if field == "month":
        return v.month
    if field == "year":
        return v.year
    if field == "quarter":
        return (v.month - 1) // 3 + 1
    if field == "dow":
        return v.isoweekday() % 7
    if field == "isodow":
        return v.isoweekday()
    if field == "doy":
        return v.timetuple().tm_yday
    if field == "week":
        return v.isocalendar()[1]
    if field == "isoyear":
        return v.isocalendar()[0]
    if field == "decade":
        return v.year // 10
    if field == "century":
        return (v.year + 99) // 100
    if field == "millennium":
        return (v.year + 999) // 1000
    raise EvalError(f'unit "{field}" not supported')


def date_part(field: str, v: datetime.date) -> float:
    """date_part(text, timestamp) -> float8."""
    return float(extract(field, v))


# An internal function the planner writes (never the user): raise ``message`` for this row.
RAISE_FUNCTION = "__incview_raise"
MORE_THAN_ONE_ROW = "more than one row returned by a subquery used as an expression"
