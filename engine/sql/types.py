"""The SQL type model: the Postgres types incview understands, as small frozen values.

``SqlType`` is what the planner attaches to every column and what the expression compiler
infers for every expression; ``from_pg_name`` maps the names Postgres' catalog prints
(``format_type``, ``information_schema.columns.data_type``, ``pg_typeof``) onto it, and
``python_type`` is the Python class psycopg 3 returns for a value of that type (the dataflow
carries exactly those values). Implicit-cast rules live here (``common_type``) because the planner
needs them too (UNION branches, CASE). This module must not import sqlglot or evaluate anything.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import re
import uuid
from dataclasses import dataclass


class TypeKind(enum.Enum):
    SMALLINT = "smallint"
    INTEGER = "integer"
    BIGINT = "bigint"
    NUMERIC = "numeric"
    REAL = "real"
    DOUBLE = "double precision"
    TEXT = "text"
    VARCHAR = "character varying"
    CHAR = "character"
    BOOLEAN = "boolean"
    DATE = "date"
    TIMESTAMP = "timestamp without time zone"
    TIMESTAMPTZ = "timestamp with time zone"
    INTERVAL = "interval"
    TIME = "time without time zone"
    UUID = "uuid"
    BYTEA = "bytea"
    JSONB = "jsonb"
    JSON = "json"  # carried as its text as written; no equality, as in Postgres
    INET = "inet"
    CIDR = "cidr"
    NAME = "name"
    ENUM = "enum"  # a user's enum type: ``SqlType.name`` is its qualified name, values its labels
    ARRAY = "array"  # ``SqlType.element`` is the element type
    UNKNOWN = "unknown"  # an untyped literal ('abc', NULL) before context gives it a type
    UNSUPPORTED = "unsupported"  # a source column incview cannot read: ``name`` is its type


# Types whose values the engine carries as Postgres' text output (canonical for each: equal
# values print equally) and reads with a ``::text`` cast: equality and hashing are exact, their
# order is not the text's (refused where an order is needed).
TEXT_CARRIED = frozenset({"jsonb", "json", "inet", "cidr", "enum"})


_INTEGERS = (TypeKind.SMALLINT, TypeKind.INTEGER, TypeKind.BIGINT)
# Postgres' implicit-cast order inside the numeric category (int2 -> ... -> float8).
_NUMERIC_RANK = {
    TypeKind.SMALLINT: 0,
    TypeKind.INTEGER: 1,
    TypeKind.BIGINT: 2,
    TypeKind.NUMERIC: 3,
    TypeKind.REAL: 4,
    TypeKind.DOUBLE: 5,
}
_STRINGS = (TypeKind.TEXT, TypeKind.VARCHAR, TypeKind.CHAR, TypeKind.NAME)
_DATETIME_RANK = {TypeKind.DATE: 0, TypeKind.TIMESTAMP: 1, TypeKind.TIMESTAMPTZ: 2}

_PY_TYPES: dict[TypeKind, type] = {
    TypeKind.SMALLINT: int,
    TypeKind.INTEGER: int,
    TypeKind.BIGINT: int,
    TypeKind.NUMERIC: decimal.Decimal,
    TypeKind.REAL: float,
    TypeKind.DOUBLE: float,
    TypeKind.TEXT: str,
    TypeKind.VARCHAR: str,
    TypeKind.CHAR: str,
    TypeKind.BOOLEAN: bool,
    TypeKind.DATE: datetime.date,
    TypeKind.TIMESTAMP: datetime.datetime,  # naive
    TypeKind.TIMESTAMPTZ: datetime.datetime,  # tz-aware
    TypeKind.INTERVAL: datetime.timedelta,
    TypeKind.TIME: datetime.time,
    TypeKind.UUID: uuid.UUID,
    TypeKind.BYTEA: bytes,
    TypeKind.JSONB: str,
    TypeKind.JSON: str,
    TypeKind.INET: str,
    TypeKind.CIDR: str,
    TypeKind.NAME: str,
    TypeKind.ENUM: str,
    TypeKind.ARRAY: tuple,
    TypeKind.UNKNOWN: str,
    TypeKind.UNSUPPORTED: object,
}

# Integer ranges and Postgres' overflow messages.
INT_RANGES: dict[TypeKind, tuple[int, int, str]] = {
    TypeKind.SMALLINT: (-(2**15), 2**15 - 1, "smallint out of range"),
    TypeKind.INTEGER: (-(2**31), 2**31 - 1, "integer out of range"),
    TypeKind.BIGINT: (-(2**63), 2**63 - 1, "bigint out of range"),
}


@dataclass(frozen=True)
class SqlType:
    """A Postgres type; ``precision``/``scale`` for numeric(p,s), ``length`` for varchar(n)/char(n),
    ``name`` (the quoted, qualified type name) and ``labels`` for an enum, ``element`` for an
    array."""

    kind: TypeKind
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    name: str | None = None
    labels: tuple[str, ...] | None = None
    element: SqlType | None = None

    @property
    def text_carried(self) -> bool:
        """Values are Postgres' text output of the value (``TEXT_CARRIED``)."""
        return self.kind.value in TEXT_CARRIED

    @property
    def ordered(self) -> bool:
        """Whether the engine can order values as Postgres does (ORDER BY, min/max, <)."""
        if self.kind is TypeKind.ARRAY:
            return False
        return not self.text_carried and self.kind is not TypeKind.UNSUPPORTED

    @property
    def is_integer(self) -> bool:
        return self.kind in _INTEGERS

    @property
    def is_numeric_category(self) -> bool:
        return self.kind in _NUMERIC_RANK

    @property
    def is_float(self) -> bool:
        return self.kind in (TypeKind.REAL, TypeKind.DOUBLE)

    @property
    def is_string(self) -> bool:
        return self.kind in _STRINGS

    @property
    def is_datetime(self) -> bool:
        return self.kind in _DATETIME_RANK

    @property
    def python_type(self) -> type:
        """The class of the values psycopg 3 returns for this type."""
        return _PY_TYPES[self.kind]

    def unconstrained(self) -> SqlType:
        """The type without typmod (numeric(10,2) -> numeric): what arithmetic results carry."""
        if self.kind is TypeKind.CHAR or self.kind is TypeKind.VARCHAR:
            return TEXT
        if self.kind in (TypeKind.ENUM, TypeKind.ARRAY, TypeKind.UNSUPPORTED):
            return self
        return SqlType(self.kind)

    def sql(self) -> str:
        """The name Postgres' ``format_type`` prints (usable in DDL)."""
        k = self.kind
        if k is TypeKind.NUMERIC and self.precision is not None:
            return f"numeric({self.precision},{self.scale or 0})"
        if k in (TypeKind.VARCHAR, TypeKind.CHAR) and self.length is not None:
            return f"{k.value}({self.length})"
        if k is TypeKind.UNKNOWN:
            return "text"
        if k is TypeKind.ENUM or k is TypeKind.UNSUPPORTED:
            return self.name or k.value
        if k is TypeKind.ARRAY:
            return f"{self.element.sql()}[]"
        return k.value

    def __str__(self) -> str:
        return self.sql()


SMALLINT = SqlType(TypeKind.SMALLINT)
INTEGER = SqlType(TypeKind.INTEGER)
BIGINT = SqlType(TypeKind.BIGINT)
NUMERIC = SqlType(TypeKind.NUMERIC)
REAL = SqlType(TypeKind.REAL)
DOUBLE = SqlType(TypeKind.DOUBLE)
TEXT = SqlType(TypeKind.TEXT)
BOOLEAN = SqlType(TypeKind.BOOLEAN)
DATE = SqlType(TypeKind.DATE)
TIMESTAMP = SqlType(TypeKind.TIMESTAMP)
TIMESTAMPTZ = SqlType(TypeKind.TIMESTAMPTZ)
INTERVAL = SqlType(TypeKind.INTERVAL)
TIME = SqlType(TypeKind.TIME)
UUID = SqlType(TypeKind.UUID)
BYTEA = SqlType(TypeKind.BYTEA)
JSONB = SqlType(TypeKind.JSONB)
JSON = SqlType(TypeKind.JSON)
INET = SqlType(TypeKind.INET)
CIDR = SqlType(TypeKind.CIDR)
NAME = SqlType(TypeKind.NAME)
UNKNOWN = SqlType(TypeKind.UNKNOWN)


def numeric(precision: int | None = None, scale: int | None = None) -> SqlType:
    if precision is None:
        return NUMERIC
    return SqlType(TypeKind.NUMERIC, precision, scale or 0)


def varchar(length: int | None = None) -> SqlType:
    return SqlType(TypeKind.VARCHAR, length=length)


_NAMES: dict[str, SqlType] = {
    "smallint": SMALLINT,
    "int2": SMALLINT,
    "integer": INTEGER,
    "int": INTEGER,
    "int4": INTEGER,
    "bigint": BIGINT,
    "int8": BIGINT,
    "numeric": NUMERIC,
    "decimal": NUMERIC,
    "real": REAL,
    "float4": REAL,
    "double precision": DOUBLE,
    "float8": DOUBLE,
    "float": DOUBLE,
    "text": TEXT,
    "character varying": SqlType(TypeKind.VARCHAR),
    "varchar": SqlType(TypeKind.VARCHAR),
    "character": SqlType(TypeKind.CHAR, length=1),
    "char": SqlType(TypeKind.CHAR, length=1),
    "bpchar": SqlType(TypeKind.CHAR),
    "boolean": BOOLEAN,
    "bool": BOOLEAN,
    "date": DATE,
    "timestamp without time zone": TIMESTAMP,
    "timestamp": TIMESTAMP,
    "timestamp with time zone": TIMESTAMPTZ,
    "timestamptz": TIMESTAMPTZ,
    "interval": INTERVAL,
    "time without time zone": TIME,
    "time": TIME,
    "uuid": UUID,
    "bytea": BYTEA,
    "jsonb": JSONB,
    "json": JSON,
    "inet": INET,
    "cidr": CIDR,
    "name": NAME,
    "unknown": UNKNOWN,
}


def enum_type(name: str, labels: tuple[str, ...]) -> SqlType:
    return SqlType(TypeKind.ENUM, name=name, labels=tuple(labels))


def array_of(element: SqlType) -> SqlType:
    return SqlType(TypeKind.ARRAY, element=element)


def unsupported(name: str) -> SqlType:
    return SqlType(TypeKind.UNSUPPORTED, name=name)


_TYPMOD = re.compile(
    r"^([a-z][a-z0-9_ ]*?)\s*(?:\(\s*(\d+)\s*(?:,\s*(-?\d+)\s*)?\))?((?:\s+[a-z ]+)?)$"
)


def from_pg_name(name: str) -> SqlType:
    """Map a Postgres type name to ``SqlType``.

    >>> from_pg_name("numeric(10,2)")
    SqlType(kind=<TypeKind.NUMERIC: 'numeric'>, precision=10, scale=2, length=None)
    >>> from_pg_name("timestamp(3) without time zone").kind
    <TypeKind.TIMESTAMP: 'timestamp without time zone'>

    Raises ``ValueError`` for types incview does not support (json, geometric types, ranges...)
    and for names it cannot resolve alone (enums and domains: ``PostgresCatalog`` resolves them
    through pg_type).
    """
    n = name.strip().lower().strip('"')
    if n.startswith("pg_catalog."):
        n = n[len("pg_catalog.") :]
    if n.endswith("[]"):
        element = from_pg_name(n[:-2])
        if element.kind in (TypeKind.ARRAY, TypeKind.UNKNOWN):
            raise ValueError(f"unsupported Postgres type {name!r}")
        return array_of(element)
    m = _TYPMOD.match(n)
    if not m:
        raise ValueError(f"unsupported Postgres type {name!r}")
    base, p, s, rest = m.group(1), m.group(2), m.group(3), m.group(4).strip()
    if rest:  # "timestamp(3) without time zone", "time(0) with time zone"
        base = f"{base} {rest}"
    t = _NAMES.get(base)
    if t is None:
        raise ValueError(f"unsupported Postgres type {name!r}")
    if t.kind is TypeKind.NUMERIC and p is not None:
        return numeric(int(p), int(s) if s is not None else 0)
    if t.kind in (TypeKind.VARCHAR, TypeKind.CHAR) and p is not None:
        return SqlType(t.kind, length=int(p))
    return t


def common_type(types: list[SqlType]) -> SqlType | None:
    """Postgres' ``select_common_type`` for the categories we support; None if there is none.

    Unknown literals adopt the others' type; within numeric, date/time and string categories the
    widest type wins (int -> numeric -> float8, date -> timestamp, varchar -> text).
    """
    known = [t for t in types if t.kind is not TypeKind.UNKNOWN]
    if not known:
        return TEXT
    first = known[0]
    if all(t == first for t in known):
        return first
    if all(t.kind is first.kind for t in known):
        if first.kind is TypeKind.ARRAY and any(t.element != first.element for t in known):
            return None  # text[] and integer[] do not match
        return first.unconstrained()
    if all(t.is_numeric_category for t in known):
        return max((t.unconstrained() for t in known), key=lambda t: _NUMERIC_RANK[t.kind])
    if all(t.is_string for t in known):
        return TEXT
    if all(t.is_datetime for t in known):
        return max((t.unconstrained() for t in known), key=lambda t: _DATETIME_RANK[t.kind])
    return None


def numeric_rank(t: SqlType) -> int:
    return _NUMERIC_RANK[t.kind]
