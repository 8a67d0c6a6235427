"""Runtime helpers for timestamptz under a time zone: Postgres 15 semantics with ``zoneinfo``.

What Postgres computes in the session's ``TimeZone`` (casts between timestamptz and
date/timestamp/text, ``date_trunc`` and ``extract`` of a timestamptz, timestamptz +/- interval)
and with an explicit zone (``AT TIME ZONE``, ``date_trunc(unit, ts, zone)``), as functions of
the value and a ``ZoneInfo`` argument. Postgres reads the same IANA tz database. A local time
that a transition skips or repeats maps to the later of its two instants (the smaller UTC
offset), as Postgres' ``DetermineTimeZoneOffset`` does: in a spring-forward gap the offset from
before the transition, in a fall-back overlap the one from after it. Results of type
timestamptz are aware datetimes in UTC (equal to the same instant in any zone). Like
``engine.sql.functions``, helpers take non-NULL arguments and raise ``EvalError`` with Postgres'
message; this module must not read any session setting: the zone is always an argument.

>>> ny = load_zone("America/New_York")
>>> from_local(datetime.datetime(2024, 3, 10, 2, 30), ny)  # in the gap: 02:30 EST
datetime.datetime(2024, 3, 10, 7, 30, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from decimal import Decimal
from functools import lru_cache

from engine.dataflow.errs import EvalError
from engine.pg_interval import fields
from engine.sql import functions as F

UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
# units date_trunc truncates in local time and resolves again (DST may change the offset);
# smaller units keep the value's own offset (Postgres' timestamptz_trunc_internal)
_SUB_DAY_UNITS = frozenset({"microseconds", "milliseconds", "second", "minute", "hour"})
# fields extract/date_part read from a timestamptz beyond those of a timestamp
ZONE_FIELDS = frozenset({"timezone", "timezone_hour", "timezone_minute"})


@lru_cache(maxsize=64)
def load_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name``; ``ValueError`` when the tz database has no such zone."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"time zone {name!r} is not in the IANA tz database") from None


def _out_of_range(what: str = "timestamp") -> EvalError:
    return EvalError(f"{what} out of range")


def to_local(ts: datetime.datetime, zone: datetime.tzinfo) -> datetime.datetime:
    """timestamptz -> timestamp: the wall-clock time of instant ``ts`` in ``zone`` (naive)."""
    try:
        return ts.astimezone(zone).replace(tzinfo=None)
    except OverflowError:
        raise _out_of_range() from None


def from_local(local: datetime.datetime, zone: datetime.tzinfo) -> datetime.datetime:
    """timestamp -> timestamptz: the instant whose wall-clock time in ``zone`` is ``local``.

    A skipped or repeated local time takes the smaller of its two offsets (module docstring).
    """
    early = local.replace(tzinfo=zone, fold=0).utcoffset()
    late = local.replace(tzinfo=zone, fold=1).utcoffset()
    offset = early if early is not None and late is not None and early <= late else late
    try:
        return (local - offset).replace(tzinfo=UTC)
    except OverflowError:
        raise _out_of_range() from None


def date_to_tz(d: datetime.date, zone: datetime.tzinfo) -> datetime.datetime:
    """date -> timestamptz: local midnight."""
    return from_local(datetime.datetime(d.year, d.month, d.day), zone)


def tz_to_date(ts: datetime.datetime, zone: datetime.tzinfo) -> datetime.date:
    """timestamptz -> date: the local date."""
    return to_local(ts, zone).date()


def date_trunc(unit: str, ts: datetime.datetime, zone: datetime.tzinfo) -> datetime.datetime:
    """date_trunc(unit, timestamptz [, zone]): truncate the wall-clock time in ``zone``."""
    aware = ts.astimezone(zone)
    local = F.date_trunc(unit, aware.replace(tzinfo=None))
    if unit in _SUB_DAY_UNITS:
        return (local - aware.utcoffset()).replace(tzinfo=UTC)
    return from_local(local, zone)


def _offset_seconds(ts: datetime.datetime, zone: datetime.tzinfo) -> int:
    off = ts.astimezone(zone).utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def _c_div(a: int, b: int) -> int:
    """C's integer division (truncates toward zero), as Postgres computes the zone fields."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def extract(field: str, ts: datetime.datetime, zone: datetime.tzinfo) -> Decimal:
    """EXTRACT(field FROM timestamptz) as numeric: local fields, epoch of the instant."""
    if field == "epoch":
        delta = ts - _EPOCH
        us = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
        return Decimal(us).scaleb(-6)
    if field in ZONE_FIELDS:
        east = _offset_seconds(ts, zone)
        if field == "timezone":
            return Decimal(east)
        if field == "timezone_hour":
            return Decimal(_c_div(east, 3600))
        minutes = _c_div(east, 60)
        return Decimal(minutes - _c_div(minutes, 60) * 60)  # C's % keeps the dividend's sign
    return F.extract(field, to_local(ts, zone))


def date_part(field: str, ts: datetime.datetime, zone: datetime.tzinfo) -> float:
    """date_part(text, timestamptz) -> float8."""
    return float(extract(field, ts, zone))


def plus_interval(
    ts: datetime.datetime, months: int, days: int, micros: int, zone: datetime.tzinfo
) -> datetime.datetime:
    """timestamptz + interval: months, then days, on the wall clock in ``zone`` (each step
    resolved to an instant again), then the time part as elapsed time
    (Postgres' ``timestamptz_pl_interval``)."""
    try:
        if months:
            local = to_local(ts, zone)
            ts = from_local(F.add_months(local, months), zone)
        if days:
            local = to_local(ts, zone)
            ts = from_local(local + datetime.timedelta(days=days), zone)
        return ts + datetime.timedelta(microseconds=micros)
    except OverflowError:
        raise _out_of_range() from None


def plus_interval_value(
    ts: datetime.datetime, iv: datetime.timedelta, sign: int, zone: datetime.tzinfo
) -> datetime.datetime:
    """timestamptz + (or, ``sign`` -1, -) an interval value (a column, a computed interval):
    its months, days and time as ``PgInterval`` keeps them (``engine.pg_interval.fields``)."""
    months, days, micros = fields(iv)
    return plus_interval(ts, sign * months, sign * days, sign * micros, zone)


def _offset_text(east: int) -> str:
    sign = "-" if east < 0 else "+"
    h, rem = divmod(abs(east), 3600)
    m, s = divmod(rem, 60)
    text = f"{sign}{h:02d}"
    if m or s:
        text += f":{m:02d}"
    if s:
        text += f":{s:02d}"
    return text


def tz_text(ts: datetime.datetime, zone: datetime.tzinfo) -> str:
    """timestamptz::text in ``zone`` (DateStyle ISO): '2024-03-10 03:30:00-04'."""
    return F.timestamp_text(to_local(ts, zone)) + _offset_text(_offset_seconds(ts, zone))


_TZ_TEXT = re.compile(
    r"[ \t\n\r\v\f]*(?P<ts>[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"(?:[ T]+[0-9]{1,2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?)?)[ \t]*"
    r"(?:(?P<z>z|utc)|(?P<sign>[+-])(?P<h>[0-9]{1,2})(?::?(?P<m>[0-9]{2})(?::?(?P<s>[0-9]{2}))?)?)?"
    r"[ \t\n\r\v\f]*",
    re.I,
)


def text_to_tz(s: str, zone: datetime.tzinfo) -> datetime.datetime:
    """text -> timestamptz: ISO 'YYYY-MM-DD[ HH:MM[:SS[.ffffff]]][Z|+HH[:MM[:SS]]]'; without an
    offset the time is local to ``zone``. Other spellings (zone names) are refused."""
    m = _TZ_TEXT.fullmatch(s)
    if not m:
        raise EvalError(f'invalid input syntax for type timestamp with time zone: "{s}"')
    try:
        local = F.text_to_timestamp(m.group("ts"))
    except EvalError as e:  # Postgres names the whole text
        if str(e).startswith("date/time field value out of range"):
            raise EvalError(f'date/time field value out of range: "{s}"') from None
        raise EvalError(f'invalid input syntax for type timestamp with time zone: "{s}"') from None
    if m.group("z"):
        return local.replace(tzinfo=UTC)
    if m.group("sign"):
        east = int(m.group("h")) * 3600 + int(m.group("m") or 0) * 60 + int(m.group("s") or 0)
        if m.group("sign") == "-":
            east = -east
        try:
            return (local - datetime.timedelta(seconds=east)).replace(tzinfo=UTC)
        except OverflowError:
            raise _out_of_range() from None
    return from_local(local, zone)
