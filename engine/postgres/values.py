"""Text-format value parsers: Postgres' text output of a value -> the Python value psycopg 3 returns.

pgoutput sends column values in the type's text output format. ``parser_for(type_oid)`` returns
one callable per type that turns those bytes into exactly what psycopg 3 would return when
reading the same column (``int``, ``Decimal`` incl. NaN/Infinity, ``float`` incl. inf/nan,
``str``, ``bool``, ``date``, naive/aware ``datetime``, ``time``, ``PgInterval`` for interval), so
rows from CDC compare equal to rows read by a query; a float or numeric NaN is the engine's one
shared NaN object (``engine.dataflow.nan``), so rows holding it compare equal. The decoder resolves one parser per column
once per Relation message, never per value. The parsers assume the session settings the CDC
reader forces on the decoding session (``DateStyle=ISO``, ``IntervalStyle=postgres``,
``TimeZone=UTC``, ``extra_float_digits>=1``); they must not consult a connection, and they raise
``ValueError`` for values Python cannot represent (``infinity`` dates, years before 1 or after
9999, ``24:00:00``) so the caller can name the column at fault.
"""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import psycopg

from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.pg_interval import PgInterval
from engine.postgres.arrays import array_parser
from engine.sql import types as sqltypes
from engine.sql.types import SqlType

Parser = Callable[[bytes], Any]

UTC = datetime.UTC

# Built-in type OIDs (pg_type.oid, stable across Postgres versions).
BOOL = 16
BYTEA = 17
CHAR = 18  # "char", the one-byte internal type
NAME = 19
INT8 = 20
INT2 = 21
INT4 = 23
TEXT = 25
OID = 26
JSON = 114
FLOAT4 = 700
FLOAT8 = 701
BPCHAR = 1042
VARCHAR = 1043
DATE = 1082
TIME = 1083
TIMESTAMP = 1114
TIMESTAMPTZ = 1184
INTERVAL = 1186
TIMETZ = 1266
NUMERIC = 1700
UUID = 2950
JSONB = 3802

_decode = bytes.decode
_fromisoformat_date = datetime.date.fromisoformat
_fromisoformat_dt = datetime.datetime.fromisoformat
_fromisoformat_time = datetime.time.fromisoformat


def parse_text(data: bytes) -> str:
    return _decode(data)


def parse_bpchar(data: bytes) -> str:
    """character(n): without its padding. Postgres ignores trailing blanks of character(n)
    values when comparing them and drops them when converting to text, so the unpadded string is
    the value everywhere incview computes; a character(n) result column pads it again."""
    return _decode(data).rstrip(" ")


def parse_int(data: bytes) -> int:
    return int(data)


def parse_float(data: bytes) -> float:
    """``float('Infinity')`` works as it is (Postgres prints exactly that); ``NaN`` is the shared
    ``engine.dataflow.nan.NAN``, so that a NaN row's delete cancels its insert."""
    if data == b"NaN":
        return NAN
    return float(data)


def parse_numeric(data: bytes) -> Decimal:
    """``Decimal('Infinity')`` and ``Decimal('-Infinity')`` included; ``NaN`` is the shared
    ``engine.dataflow.nan.NUMERIC_NAN``."""
    if data == b"NaN":
        return NUMERIC_NAN
    try:
        return Decimal(_decode(data))
    except InvalidOperation:
        raise ValueError("not a numeric literal") from None


_BOOLS = {b"t": True, b"f": False}


def parse_bool(data: bytes) -> bool:
    return _BOOLS[data]


def parse_date(data: bytes) -> datetime.date:
    s = _decode(data)
    try:
        return _fromisoformat_date(s)
    except ValueError:
        raise ValueError(f"date {s!r} is outside Python's range (years 1-9999)") from None


def parse_timestamp(data: bytes) -> datetime.datetime:
    s = _decode(data)
    try:
        return _fromisoformat_dt(s)
    except ValueError:
        raise ValueError(f"timestamp {s!r} is outside Python's range (years 1-9999)") from None


def timestamptz_parser(tz: datetime.tzinfo = UTC) -> Parser:
    """A timestamptz parser returning aware datetimes in ``tz`` (psycopg: the session's zone)."""

    def parse_timestamptz(data: bytes) -> datetime.datetime:
        s = _decode(data)
        try:
            dt = _fromisoformat_dt(s)
        except ValueError:
            raise ValueError(
                f"timestamptz {s!r} is outside Python's range (years 1-9999)"
            ) from None
        return dt if dt.tzinfo is tz else dt.astimezone(tz)

    return parse_timestamptz


parse_timestamptz = timestamptz_parser(UTC)


def parse_time(data: bytes) -> datetime.time:
    s = _decode(data)
    try:
        return _fromisoformat_time(s)
    except ValueError:
        raise ValueError(f"time {s!r} cannot be represented in Python (24:00:00?)") from None


def parse_timetz(data: bytes) -> datetime.time:
    s = _decode(data)
    try:
        return _fromisoformat_time(s)
    except ValueError:
        raise ValueError(f"time with time zone {s!r} cannot be represented in Python") from None


# IntervalStyle 'postgres': "1 year 2 mons -3 days +04:05:06.5", "-00:00:01", "00:00:00".
_INTERVAL = re.compile(
    r"""
    (?:([-+]?\d+)\ years?\ ?)?
    (?:([-+]?\d+)\ mons?\ ?)?
    (?:([-+]?\d+)\ days?\ ?)?
    (?:([-+])?(\d+):(\d+):(\d+)(?:\.(\d+))?)?
    $""",
    re.VERBOSE,
)


def parse_interval(data: bytes) -> PgInterval:
    """Months, days and microseconds kept apart, as Postgres stores them (``PgInterval``)."""
    s = _decode(data)
    m = _INTERVAL.match(s)
    if m is None or not s:
        raise ValueError(f"cannot parse interval {s!r} (IntervalStyle must be 'postgres')")
    ye, mo, da, sign, ho, mi, se, fr = m.groups()
    months = 12 * int(ye or 0) + int(mo or 0)
    days = int(da or 0)
    micros = 0
    if ho:
        micros = (int(ho) * 3600 + int(mi) * 60 + int(se)) * 1_000_000
        if fr:
            micros += int(fr[:6].ljust(6, "0"))
        if sign == "-":
            micros = -micros
    try:
        return PgInterval(months, days, micros)
    except OverflowError:
        raise ValueError(f"interval {s!r} is outside Python's timedelta range") from None


def parse_bytea(data: bytes) -> bytes:
    """bytea_output 'hex' (the default): ``\\x0102`` -> ``b'\\x01\\x02'``."""
    if data[:2] != b"\\x":
        raise ValueError("bytea value not in hex format (set bytea_output = 'hex')")
    return bytes.fromhex(_decode(data[2:]))


def parse_uuid(data: bytes) -> uuid.UUID:
    return uuid.UUID(_decode(data))


_PARSERS: dict[int, Parser] = {
    BOOL: parse_bool,
    BYTEA: parse_bytea,
    CHAR: parse_text,
    NAME: parse_text,
    INT8: int,
    INT2: int,
    INT4: int,
    TEXT: parse_text,
    OID: int,
    JSON: parse_text,  # as written (json keeps its text; incview never compares it)
    FLOAT4: parse_float,
    FLOAT8: parse_float,
    BPCHAR: parse_bpchar,
    VARCHAR: parse_text,
    DATE: parse_date,
    TIME: parse_time,
    TIMESTAMP: parse_timestamp,
    INTERVAL: parse_interval,
    TIMETZ: parse_timetz,
    NUMERIC: parse_numeric,
    UUID: parse_uuid,
    JSONB: parse_text,  # the canonical text (sqltypes.TEXT_CARRIED), compared and hashed as is
}

# Built-in array type oid -> its element's oid (psycopg's registry of Postgres' types).
_ARRAY_ELEMENTS: dict[int, int] = {
    info.array_oid: info.oid for info in psycopg.postgres.types if info.array_oid
}


def parser_for(
    type_oid: int,
    tz: datetime.tzinfo = UTC,
    resolve: Callable[[int], SqlType] | None = None,
) -> Parser:
    """The parser for a column of type ``type_oid``. Arrays of built-in types parse into tuples;
    other types (enums, domains, user types) need ``resolve`` (oid -> ``SqlType``, through
    pg_type: ``engine.postgres.pg_types``); without it, or for types incview cannot carry, the
    value stays its text, so a table with such a column can still be read as long as views do
    not use it."""
    if type_oid == TIMESTAMPTZ:
        return parse_timestamptz if tz is UTC else timestamptz_parser(tz)
    parser = _PARSERS.get(type_oid)
    if parser is not None:
        return parser
    element = _ARRAY_ELEMENTS.get(type_oid)
    if element is not None and element in _PARSERS:
        return array_parser(parser_for(element, tz))
    if resolve is not None:
        return parser_for_type(resolve(type_oid), tz)
    return parse_text


_KIND_PARSERS: dict[sqltypes.TypeKind, Parser] = {}


def parser_for_type(t: SqlType, tz: datetime.tzinfo = UTC) -> Parser:
    """The parser of a value of type ``t`` from its text output (a domain's values are its base
    type's; an enum's its label)."""
    kind = t.kind
    if kind is sqltypes.TypeKind.ARRAY:
        return array_parser(parser_for_type(t.element, tz))
    if kind is sqltypes.TypeKind.TIMESTAMPTZ:
        return parser_for(TIMESTAMPTZ, tz)
    if not _KIND_PARSERS:
        _KIND_PARSERS.update(
            {k.kind: _PARSERS[oid] for oid, k in _SQL_TYPES.items() if oid in _PARSERS}
        )
    return _KIND_PARSERS.get(kind, parse_text)


def input_text(v: Any) -> str:
    """A Python value (as the parsers return it) in a text Postgres' input functions accept."""
    if v is True or v is False:
        return "t" if v else "f"
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, float):
        return "NaN" if v != v else repr(v)
    if isinstance(v, datetime.timedelta):
        return f"{v.days} days {v.seconds}.{v.microseconds:06d} seconds"
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    return str(v)


_SQL_TYPES: dict[int, SqlType] = {
    INT2: sqltypes.SMALLINT,
    INT4: sqltypes.INTEGER,
    INT8: sqltypes.BIGINT,
    NUMERIC: sqltypes.NUMERIC,
    FLOAT4: sqltypes.REAL,
    FLOAT8: sqltypes.DOUBLE,
    TEXT: sqltypes.TEXT,
    VARCHAR: SqlType(sqltypes.TypeKind.VARCHAR),
    BPCHAR: SqlType(sqltypes.TypeKind.CHAR),
    BOOL: sqltypes.BOOLEAN,
    DATE: sqltypes.DATE,
    TIMESTAMP: sqltypes.TIMESTAMP,
    TIMESTAMPTZ: sqltypes.TIMESTAMPTZ,
    INTERVAL: sqltypes.INTERVAL,
    TIME: sqltypes.TIME,
    UUID: sqltypes.UUID,
    BYTEA: sqltypes.BYTEA,
    JSONB: sqltypes.JSONB,
    JSON: sqltypes.JSON,
    NAME: sqltypes.NAME,
}


def sql_type_for(type_oid: int, type_modifier: int = -1) -> SqlType | None:
    """The incview ``SqlType`` of a column (typmod gives numeric(p,s) and varchar(n)); None when
    incview does not support the type."""
    t = _SQL_TYPES.get(type_oid)
    if t is None or type_modifier < 4:
        return t
    if type_oid == NUMERIC:
        mod = type_modifier - 4
        scale = ((mod & 0x7FF) ^ 1024) - 1024  # 11-bit signed: Postgres 15 allows scale < 0
        return sqltypes.numeric((mod >> 16) & 0xFFFF, scale)
    if type_oid in (VARCHAR, BPCHAR):
        return SqlType(t.kind, length=type_modifier - 4)
    return t
