"""The scale every value of a numeric expression has, where Postgres fixes it statically.

Postgres numeric values carry their own display scale. A column of type numeric(p, s) holds only
values of scale s; ``+`` and ``-`` give the larger scale of their operands, ``*`` the sum of
them, an integer has scale 0, a literal its written decimals, a cast to numeric(p, s) scale
s and a cast to plain numeric the scale of its operand. Everything else (division, functions,
unconstrained columns) has a value-dependent scale: ``value_scale`` returns None there. The
columnar collections use a known scale to hold numerics as exact scaled integers. This module
must not evaluate anything.

>>> from sqlglot import parse_one
>>> from engine.sql.types import SqlType, TypeKind
>>> num = SqlType(TypeKind.NUMERIC, 15, 2)
>>> value_scale(parse_one("a * (1 - b)"), lambda c: num)
4
>>> value_scale(parse_one("CAST(a AS numeric)"), lambda c: num)
2
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from engine.sql.types import SqlType, TypeKind

ColumnType = Callable[[exp.Column], SqlType | None]


def value_scale(e: exp.Expression, column_type: ColumnType) -> int | None:
    """The scale of every value of ``e``, or None when it is not fixed by the types."""
    if isinstance(e, exp.Paren):
        return value_scale(e.this, column_type)
    if isinstance(e, exp.Column):
        return _type_scale(column_type(e))
    if isinstance(e, exp.Literal):
        if not e.is_number:
            return None
        text = e.this.lower()
        if "e" in text:
            return None
        return len(text.partition(".")[2])
    if isinstance(e, exp.Neg):
        return value_scale(e.this, column_type)
    if isinstance(e, (exp.Add, exp.Sub, exp.Mul)):
        left = value_scale(e.left, column_type)
        right = value_scale(e.right, column_type)
        if left is None or right is None:
            return None
        return left + right if isinstance(e, exp.Mul) else max(left, right)
    if isinstance(e, exp.Cast):
        to = e.to
        if to.this == exp.DataType.Type.DECIMAL:
            params = [p.this for p in to.expressions]
            if len(params) == 2:
                return int(params[1].this) if isinstance(params[1], exp.Literal) else None
            if len(params) == 1:
                return 0
            return value_scale(e.this, column_type)  # plain numeric keeps each value's scale
        if to.this in (exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT):
            return 0
    return None


def _type_scale(t: SqlType | None) -> int | None:
    if t is None:
        return None
    if t.is_integer:
        return 0
    if t.kind is TypeKind.NUMERIC and t.precision is not None:
        return t.scale or 0
    return None
