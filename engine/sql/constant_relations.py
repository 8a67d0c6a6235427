"""Constant relations in FROM: VALUES lists, ``generate_series`` and ``unnest(ARRAY[...])``.

Each becomes a ``Values`` plan node (a ``ConstantCollection``: its rows are emitted once, when the
view is populated, and never change). ``name_constant_relations(query)`` first gives every such
FROM item the alias and column names Postgres gives it (``(VALUES ...) v`` has columns
``column1, column2, ...``; ``generate_series(1, 3) g`` has one column ``g``; without an alias the
function's name names both), so that sqlglot's qualify resolves the names as Postgres does.
``constant_relation(node)`` then evaluates the item with the expression compiler, with column
types as Postgres infers them (``select_common_type``: ``VALUES (1), (NULL)`` is integer,
``VALUES (1), (2.5)`` numeric, all-unknown literals text). For example::

    SELECT * FROM (VALUES (1, 'a'), (2, NULL)) AS v(i, s)
    -> Values: 2 row(s)  [v.i integer not null, v.s text]

This module must not read tables: an argument that refers to a column (an implicit LATERAL in
Postgres) or holds a subquery is refused, with the construct and its position.
"""

from __future__ import annotations

from decimal import Decimal

from sqlglot import exp

from engine.dataflow.errs import error_message
from engine.errors import UnsupportedSQL
from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field
from engine.sql.parse import unsupported
from engine.sql.types import (
    BIGINT,
    INTEGER,
    NUMERIC,
    TIMESTAMP,
    TIMESTAMPTZ,
    SqlType,
    TypeKind,
    common_type,
)

MAX_ROWS = 1_000_000  # a constant relation is held in memory and in the plan
_LATERAL_HINT = "Use constants, or join the table to a constant relation and filter on the column"


def is_constant_relation(node: exp.Expression) -> bool:
    return isinstance(node, (exp.Values, exp.Unnest)) or _is_series(node)


def _is_series(node: exp.Expression) -> bool:
    return isinstance(node, exp.Table) and isinstance(node.this, exp.ExplodingGenerateSeries)


def name_constant_relations(query: exp.Expression) -> None:
    """Give each constant relation in ``query`` (in place) Postgres' alias and column names."""
    for node in list(query.find_all(exp.Values, exp.Unnest, exp.Table)):
        if isinstance(node, exp.Values):
            width = len(node.expressions[0].expressions) if node.expressions else 0
            _name(node, "*VALUES*", [f"column{i + 1}" for i in range(width)])
        elif isinstance(node, exp.Unnest) and isinstance(node.parent, (exp.From, exp.Join)):
            alias = node.args.get("alias")
            if len(node.expressions) > 1 and not (alias and alias.columns):
                raise unsupported(
                    node,
                    "unnest of several arrays needs a column list",
                    "Name the columns: unnest(...) AS u(a, b)",
                )
            _name(node, "unnest", [alias.name if alias and alias.name else "unnest"])
        elif _is_series(node):
            alias = node.args.get("alias")
            _name(
                node, "generate_series", [alias.name if alias and alias.name else "generate_series"]
            )


def _name(node: exp.Expression, default_alias: str, default_columns: list[str]) -> None:
    """Set the alias ``default_alias`` if there is none, and complete the column list."""
    alias = node.args.get("alias")
    if alias is None or not alias.name:
        alias = exp.TableAlias(this=exp.to_identifier(default_alias, quoted=True))
        node.set("alias", alias)
    given = list(alias.columns)
    rest = [exp.to_identifier(c) for c in default_columns[len(given) :]]
    alias.set("columns", given + rest)


def constant_relation(node: exp.Expression) -> lp.LogicalPlan:
    """The ``Values`` plan of a constant relation (named by ``name_constant_relations``)."""
    alias = node.args["alias"]
    names = [c.name for c in alias.columns]
    if isinstance(node, exp.Values):
        rows, types = _values(node)
    elif isinstance(node, exp.Unnest):
        rows, types = _unnest(node)
    else:
        rows, types = _series(node)
    if len(names) > len(types):
        raise unsupported(
            alias,
            f"{alias.name} has {len(types)} column(s) available but {len(names)} are named",
        )
    names += [f"column{i + 1}" for i in range(len(names), len(types))]
    nullable = [any(r[i] is None for r in rows) for i in range(len(types))]
    fields = tuple(
        Field(alias.name, n, t, nl) for n, t, nl in zip(names, types, nullable, strict=True)
    )
    return lp.Values(tuple(rows), fields)


# -- VALUES and ARRAY[...]: one common type per column, each entry cast to it ----------------------
def _values(node: exp.Values) -> tuple[list[tuple], list[SqlType]]:
    tuples = [t.expressions if isinstance(t, exp.Tuple) else [t] for t in node.expressions]
    width = len(tuples[0])
    for t, entry in zip(tuples, node.expressions, strict=True):
        if len(t) != width:
            raise unsupported(entry, "VALUES lists must all be the same length")
    columns = [[t[i] for t in tuples] for i in range(width)]
    evaluated = [_common_column(col, node, "VALUES") for col in columns]
    rows = [tuple(col[0][r] for col in evaluated) for r in range(len(tuples))]
    return rows, [t for _, t in evaluated]


def _common_column(
    exprs: list[exp.Expression], node: exp.Expression, what: str
) -> tuple[list, SqlType]:
    """The values of ``exprs`` cast to their common type, and that type."""
    for e in exprs:
        _check_constant(e, what)
    own = _types(exprs)
    seen = [_literal_type(e, t) for e, t in zip(exprs, own, strict=True)]
    target = common_type(seen)
    if target is None:
        kinds = sorted({str(t) for t in seen if t.kind is not TypeKind.UNKNOWN})
        raise unsupported(node, f"{what} types {' and '.join(kinds)} cannot be matched")
    cast = [
        e if t == target else exp.Cast(this=e.copy(), to=exp.DataType.build(target.sql()))
        for e, t in zip(exprs, own, strict=True)
    ]
    return _evaluate(cast, node, what), target


def _literal_type(e: exp.Expression, compiled: SqlType) -> SqlType:
    """Postgres' type of ``e`` for type resolution: NULL and quoted literals are ``unknown``."""
    if isinstance(e, exp.Null) or (isinstance(e, exp.Literal) and e.is_string):
        return SqlType(TypeKind.UNKNOWN)
    return compiled


def _check_constant(e: exp.Expression, what: str) -> None:
    for n in e.walk():
        if isinstance(n, exp.Column):
            raise unsupported(
                n, f"{what} in FROM must be constant: it refers to column {n.sql()}", _LATERAL_HINT
            )
        if isinstance(n, (exp.Subquery, exp.Select)):
            raise unsupported(n, f"{what} in FROM must be constant: it holds a subquery")


def _types(exprs: list[exp.Expression]) -> list[SqlType]:
    from engine.sql.expression_compiler import compile_expressions

    return list(compile_expressions(list(exprs), []).types)


def _evaluate(exprs: list[exp.Expression], node: exp.Expression, what: str) -> list:
    """The values of constant ``exprs``; an evaluation error refuses the view (Postgres would fail
    on every read of it)."""
    from engine.sql.expression_compiler import compile_expressions

    fn = compile_expressions(list(exprs), []).fn
    try:
        (row,) = fn([()])
    except UnsupportedSQL:
        raise
    except Exception as e:  # noqa: BLE001 - a SQL runtime error of a constant
        raise unsupported(
            node, f"{what} raises an error when evaluated: {error_message(e)}"
        ) from None
    return list(row)


def _unnest(node: exp.Unnest) -> tuple[list[tuple], list[SqlType]]:
    if node.args.get("offset"):
        raise unsupported(node, "unnest ... WITH ORDINALITY is not supported")
    columns, types = [], []
    for arr in node.expressions:
        if not isinstance(arr, exp.Array):
            raise unsupported(
                arr,
                "unnest in FROM needs an ARRAY[...] constructor of constants",
                "Write unnest(ARRAY[1, 2, 3])",
            )
        if not arr.expressions:
            raise unsupported(arr, "cannot determine the type of an empty array")
        if any(isinstance(e, exp.Array) for e in arr.expressions):
            raise unsupported(arr, "unnest of a multidimensional array is not supported")
        values, t = _common_column(list(arr.expressions), arr, "unnest")
        columns.append(values)
        types.append(t)
    n = max(len(c) for c in columns)
    rows = [tuple(c[i] if i < len(c) else None for c in columns) for i in range(n)]
    return rows, types


# -- generate_series ----------------------------------------------------------------------------
# Postgres' generate_series over time: a date goes to timestamp with time zone (its preferred
# type), so the series is evaluated in the view's TimeZone (engine.sql.time_zone)
_TIME_SERIES = {
    TypeKind.TIMESTAMP: TIMESTAMP,
    TypeKind.TIMESTAMPTZ: TIMESTAMPTZ,
    TypeKind.DATE: TIMESTAMPTZ,
}


def _is_interval(node: exp.Expression) -> bool:
    if isinstance(node, exp.Interval):
        return True
    return isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.INTERVAL)


def _time_series(call: exp.Expression, args: list, target: SqlType) -> tuple[list, list]:
    """``generate_series(start, stop, step interval)`` over timestamps: the step added again and
    again (a month after Jan 31 is Feb 29, then Mar 29), as Postgres does."""
    from engine.sql.expression_compiler import ColumnRef, compile_expressions

    if len(args) != 3:
        raise unsupported(call, "generate_series over timestamps needs an interval step")
    bounds = [exp.Cast(this=a.copy(), to=exp.DataType.build(target.sql())) for a in args[:2]]
    step = exp.Cast(this=args[2].copy(), to=exp.DataType.build("interval"))
    start, stop = _evaluate(bounds, call, "generate_series")
    if start is None or stop is None:
        return [], [target]
    plus = compile_expressions(
        [exp.Add(this=exp.column("v"), expression=step)], [ColumnRef("v", None, target, False)]
    ).fn
    nxt = plus([(start,)])[0][0]
    if nxt == start:
        raise unsupported(call, "generate_series raises an error: step size cannot equal zero")
    up = nxt > start
    rows, v = [], start
    while (v <= stop) if up else (v >= stop):
        if len(rows) >= MAX_ROWS:
            raise unsupported(
                call,
                f"generate_series makes more than {MAX_ROWS} rows (a constant relation's limit)",
            )
        rows.append((v,))
        v = plus([(v,)])[0][0]
    return rows, [target]


_SERIES_TYPE = {
    TypeKind.SMALLINT: INTEGER,
    TypeKind.INTEGER: INTEGER,
    TypeKind.BIGINT: BIGINT,
    TypeKind.NUMERIC: NUMERIC,
}


def _series(node: exp.Table) -> tuple[list[tuple], list[SqlType]]:
    call = node.this
    if node.args.get("ordinality"):
        raise unsupported(node, "generate_series ... WITH ORDINALITY is not supported")
    args = [call.args["start"], call.args["end"]]
    if call.args.get("step") is not None:
        args.append(call.args["step"])
    for a in args:
        _check_constant(a, "generate_series")
    if len(args) == 3 and _is_interval(args[2]):  # over time: the bounds' type decides
        bound_types = [_literal_type(a, t) for a, t in zip(args[:2], _types(args[:2]), strict=True)]
        c = common_type(bound_types)
        time_target = _TIME_SERIES.get(c.kind) if c is not None else None
        if time_target is None:
            raise unsupported(
                call,
                f"generate_series over {' and '.join(sorted({str(t) for t in bound_types}))} "
                "values with an interval step",
            )
        return _time_series(call, args, time_target)
    seen = [_literal_type(a, t) for a, t in zip(args, _types(args), strict=True)]
    common = common_type(seen)
    target = _SERIES_TYPE.get(common.kind) if common is not None else None
    if common is not None and common.kind is TypeKind.UNKNOWN:
        target = INTEGER
    if target is None:
        raise unsupported(
            call,
            f"generate_series over {' and '.join(sorted({str(t) for t in seen}))} values is not "
            "supported (only integer, bigint and numeric series)",
        )
    cast = [exp.Cast(this=a.copy(), to=exp.DataType.build(target.sql())) for a in args]
    start, stop, *rest = _evaluate(cast, call, "generate_series")
    step = rest[0] if rest else (Decimal(1) if target is NUMERIC else 1)
    if start is None or stop is None or step is None:
        return [], [target]
    if step == 0:
        raise unsupported(call, "generate_series raises an error: step size cannot equal zero")
    empty = start > stop if step > 0 else start < stop
    count = 0 if empty else int((stop - start) / step) + 1
    if count > MAX_ROWS:
        raise unsupported(
            call,
            f"generate_series makes {count} rows; a constant relation is limited to {MAX_ROWS}",
        )
    if target is NUMERIC:  # repeated addition, as Postgres: 1, 1.5, 2.0 (scales as it prints them)
        rows, v = [], start
        for _ in range(count):
            rows.append((v,))
            v += step
        return rows, [target]
    return [(v,) for v in range(start, stop + (1 if step > 0 else -1), step)], [target]
