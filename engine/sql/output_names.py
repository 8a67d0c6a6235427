"""Postgres' names for a query's output columns (its ``FigureColname`` rules).

The result table has exactly the query's output columns, so their names must be the ones Postgres
would give: the alias if any; a column's name; a function's name (``count``, ``sum``); for a cast,
the name of what is cast (or the type's name for a cast literal); ``case`` for CASE; otherwise
``?column?``. Computed on the *unqualified* AST (qualification invents ``_col_N`` aliases).
This module must not resolve tables or types.
"""

from __future__ import annotations

from sqlglot import exp

_TYPE_NAMES = {
    "INT": "int4",
    "INTEGER": "int4",
    "BIGINT": "int8",
    "SMALLINT": "int2",
    "TEXT": "text",
    "VARCHAR": "varchar",
    "DECIMAL": "numeric",
    "NUMERIC": "numeric",
    "DOUBLE": "float8",
    "FLOAT": "float8",
    "REAL": "float4",
    "BOOLEAN": "bool",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "TIMESTAMPTZ": "timestamptz",
    "INTERVAL": "interval",
}

# sqlglot class -> Postgres function name, where the class name is not the function name
_FUNCTION_NAMES = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
    exp.Coalesce: "coalesce",
    exp.Nullif: "nullif",
    exp.Greatest: "greatest",
    exp.Least: "least",
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Length: "length",
    exp.Substring: "substring",
    exp.Trim: "btrim",
    exp.Round: "round",
    exp.Abs: "abs",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
    exp.Extract: "extract",
    exp.DateTrunc: "date_trunc",
    exp.TimestampTrunc: "date_trunc",
    exp.Concat: "concat",
    exp.RowNumber: "row_number",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.GroupConcat: "string_agg",
    exp.StrPosition: "strpos",
    exp.SplitPart: "split_part",
    exp.Lag: "lag",
    exp.Lead: "lead",
}


def output_name(e: exp.Expression) -> str:
    """The column name Postgres gives the select-list item ``e``."""
    if isinstance(e, exp.Alias):
        return e.alias
    return _figure(e) or "?column?"


def _figure(e: exp.Expression) -> str | None:
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, (exp.Paren,)):
        return _figure(e.this)
    if isinstance(e, (exp.Cast, exp.TryCast)):
        inner = _figure(e.this)
        if inner:
            return inner
        to = e.args.get("to")
        return _TYPE_NAMES.get(to.this.name if to is not None and hasattr(to.this, "name") else "")
    if isinstance(e, exp.Case):
        return "case"
    if isinstance(e, exp.Window):
        return _figure(e.this)
    if isinstance(e, exp.Filter):
        return _figure(e.this)
    if isinstance(e, exp.Anonymous):
        return e.name.lower()
    for cls, name in _FUNCTION_NAMES.items():
        if type(e) is cls:
            return name
    if isinstance(e, exp.Func) and not isinstance(e, (exp.Binary, exp.Unary)):
        return e.sql_name().lower()
    return None
