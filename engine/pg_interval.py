"""Postgres' interval as a value: months, days and microseconds kept apart, compared as Postgres.

``PgInterval(months, days, micros)`` is a ``datetime.timedelta`` whose timedelta value is the
interval with a month as 30 days and a day as 24 hours: exactly what Postgres compares, hashes
and orders by (``interval_cmp_value``), so '1 mon' = '30 days' as in Postgres, while the three
fields survive for output ('1 mon 2 days 03:00:00' comes back as it went in), for calendar
arithmetic (a timestamp plus '1 mon' is the same day of the next month) and for the sink. Sums
and differences are fieldwise; ``interval_div`` is Postgres' division (``avg``). Plain timedeltas
(a timestamp minus a timestamp) stay timedeltas: days and time, no months. Pure values only.
"""

from __future__ import annotations

import datetime
import math

from engine.dataflow.errs import EvalError

USECS_PER_DAY = 86_400_000_000
DAYS_PER_MONTH = 30


class PgInterval(datetime.timedelta):
    """An interval with Postgres' three fields (see the module docstring)."""

    months: int
    idays: int
    micros: int

    def __new__(cls, months: int, days: int, micros: int) -> PgInterval:
        self = super().__new__(cls, days=months * DAYS_PER_MONTH + days, microseconds=micros)
        self.months, self.idays, self.micros = months, days, micros
        return self

    def __reduce__(self):
        return (PgInterval, (self.months, self.idays, self.micros))

    def __repr__(self) -> str:
        return f"PgInterval({self.months}, {self.idays}, {self.micros})"

    def __add__(self, other):
        o = fields(other)
        if o is None:
            return NotImplemented
        return PgInterval(self.months + o[0], self.idays + o[1], self.micros + o[2])

    __radd__ = __add__

    def __sub__(self, other):
        o = fields(other)
        if o is None:
            return NotImplemented
        return PgInterval(self.months - o[0], self.idays - o[1], self.micros - o[2])

    def __rsub__(self, other):
        o = fields(other)
        if o is None:
            return NotImplemented
        return PgInterval(o[0] - self.months, o[1] - self.idays, o[2] - self.micros)

    def __neg__(self) -> PgInterval:
        return PgInterval(-self.months, -self.idays, -self.micros)

    def __mul__(self, other):
        if isinstance(other, int) and not isinstance(other, bool):
            return PgInterval(self.months * other, self.idays * other, self.micros * other)
        return NotImplemented

    __rmul__ = __mul__


def fields(v) -> tuple[int, int, int] | None:
    """(months, days, microseconds) of an interval value. A plain timedelta (a timestamp minus
    a timestamp) has whole days and the rest, both of its sign, as Postgres' ``timestamp_mi``
    justifies them ('-22:00:00', not '-1 days +02:00:00')."""
    if isinstance(v, PgInterval):
        return v.months, v.idays, v.micros
    if isinstance(v, datetime.timedelta):
        total = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
        days = abs(total) // USECS_PER_DAY * (1 if total >= 0 else -1)
        return 0, days, total - days * USECS_PER_DAY
    return None


def interval_div(v, factor) -> PgInterval:
    """Postgres 15's ``interval_div`` (``/`` and avg): see ``_scaled``."""
    factor = float(factor)
    if factor == 0:
        raise EvalError("division by zero")
    return _scaled(v, lambda x: x / factor)


def interval_mul(v, factor) -> PgInterval:
    """Postgres 15's ``interval_mul`` (``*`` by a number): see ``_scaled``."""
    factor = float(factor)
    return _scaled(v, lambda x: x * factor)


def _scaled(v, scale) -> PgInterval:
    """Months and days scaled in float8, their fractions cascaded down to days (a month is 30)
    and to the time, as Postgres computes them."""
    months, days, micros = fields(v)
    m, d = scale(months), scale(days)
    if not (math.isfinite(m) and math.isfinite(d)) or abs(m) >= 2**31 or abs(d) >= 2**31:
        raise EvalError("interval out of range")
    r_month, r_day = int(m), int(d)
    month_remainder_days = round((m - r_month) * DAYS_PER_MONTH * 1_000_000) / 1_000_000  # TSROUND
    sec_remainder = (d - r_day + month_remainder_days - int(month_remainder_days)) * 86400
    sec_remainder = round(sec_remainder * 1_000_000) / 1_000_000  # TSROUND
    if abs(sec_remainder) >= 86400:
        r_day += int(sec_remainder / 86400)
        sec_remainder -= int(sec_remainder / 86400) * 86400
    r_day += int(month_remainder_days)
    r_time = scale(float(micros)) + sec_remainder * 1_000_000
    if not math.isfinite(r_time) or abs(r_time) >= 2**63:
        raise EvalError("interval out of range")
    try:
        return PgInterval(r_month, r_day, int(round(r_time)))
    except OverflowError:  # Postgres holds it; a timedelta holds at most 999999999 days
        raise EvalError(
            f"interval of {r_month} months {r_day} days is too long for incview (at most "
            "999999999 days, a month counted as 30)"
        ) from None


def interval_text(v) -> str:
    """Postgres' output of an interval under IntervalStyle 'postgres'."""
    months, days, micros = fields(v)
    years, mons = int(months / 12), months - int(months / 12) * 12
    parts: list[str] = []
    is_before = False
    for value, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        if value:
            plus = "+" if is_before and value > 0 else ""
            parts.append(f"{plus}{value} {unit}{'' if value == 1 else 's'}")
            is_before = value < 0
    if not parts or micros:
        neg = micros < 0
        a = -micros if neg else micros
        hours, rest = divmod(a, 3_600_000_000)
        mins, rest = divmod(rest, 60_000_000)
        secs, frac = divmod(rest, 1_000_000)
        sign = "-" if neg else ("+" if is_before else "")
        t = f"{sign}{hours:02d}:{mins:02d}:{secs:02d}"
        if frac:
            t += f".{frac:06d}".rstrip("0")
        parts.append(t)
    return " ".join(parts)
