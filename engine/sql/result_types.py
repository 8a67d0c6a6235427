"""Postgres result types of aggregate and window functions, given their argument types.

count -> bigint; sum(smallint|integer) -> bigint, sum(bigint|numeric) -> numeric,
sum(real|double) -> double; avg(integers|numeric) -> numeric, avg(floats) -> double;
min/max/lag/lead -> the argument's type; bool_and/bool_or -> boolean; string_agg -> text;
row_number/rank/dense_rank -> bigint; percent_rank/cume_dist -> double; ntile -> integer;
first_value/last_value/nth_value -> the argument's type. This module must not look at anything but types.
"""

from __future__ import annotations

from engine.dataflow.aggregates import MOMENT_KINDS
from engine.errors import UnsupportedSQL
from engine.sql.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INTEGER,
    NUMERIC,
    TEXT,
    SqlType,
    TypeKind,
    array_of,
)

_INTS = (TypeKind.SMALLINT, TypeKind.INTEGER)


def aggregate_type(kind: str, arg: SqlType | None) -> SqlType:
    if kind in ("count", "count_star", "count_distinct", "row_number", "rank", "dense_rank"):
        return BIGINT
    if kind in ("percent_rank", "cume_dist"):
        return DOUBLE
    if kind == "ntile":
        return INTEGER
    if kind in ("bool_and", "bool_or"):
        return BOOLEAN
    if kind == "string_agg":
        return TEXT
    if kind == "array_agg":
        if arg is None or arg.kind in (TypeKind.ARRAY, TypeKind.UNSUPPORTED):
            raise UnsupportedSQL(f"array_agg of {arg} values is not supported")
        if arg.kind is TypeKind.UNKNOWN:
            return array_of(TEXT)
        # Postgres' array_agg drops the typmod: numeric(8,2) -> numeric[]
        return array_of(SqlType(arg.kind, name=arg.name, labels=arg.labels))
    if arg is None:
        raise ValueError(f"{kind} needs an argument type")
    if kind == "sum":
        if arg.kind in _INTS:
            return BIGINT
        if arg.kind in (TypeKind.BIGINT, TypeKind.NUMERIC):
            return NUMERIC
        if arg.kind in (TypeKind.REAL, TypeKind.DOUBLE):
            return DOUBLE
        if arg.kind is TypeKind.INTERVAL:
            return arg
    if kind in MOMENT_KINDS:
        if arg.kind in (*_INTS, TypeKind.BIGINT, TypeKind.NUMERIC):
            return NUMERIC
        if arg.kind in (TypeKind.REAL, TypeKind.DOUBLE):
            return DOUBLE
    if kind == "avg":
        if arg.kind is TypeKind.INTERVAL:
            return arg
        if arg.kind in (*_INTS, TypeKind.BIGINT, TypeKind.NUMERIC):
            return NUMERIC
        if arg.kind in (TypeKind.REAL, TypeKind.DOUBLE):
            return DOUBLE
    if kind in ("min", "max") and not arg.ordered:
        raise UnsupportedSQL(
            f"{kind} of {arg} values is not supported: incview cannot order {arg} values as "
            "Postgres does"
        )
    if kind in ("min", "max", "lag", "lead", "first_value", "last_value", "nth_value"):
        return arg.unconstrained() if arg.kind is TypeKind.NUMERIC else arg
    raise ValueError(f"{kind} is not defined for {arg}")
