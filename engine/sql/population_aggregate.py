"""Population GROUP BYs computed by Postgres: the partial aggregates of a GROUP BY over one table.

A view's population reads every source row and runs it through the dataflow; a GROUP BY over a
single table (filters above the scan, nothing else) can instead have Postgres return, per group,
exactly the numbers its reduce keeps (row count, per aggregate the count and the exact sum), read
under the same snapshot: TPC-H Q1 reads 4 rows instead of 6M, at Postgres' own (parallel) speed.
``aggregate_query`` renders that query, or says None when the GROUP BY is not one it can render
with certainly the same meaning; ``ColumnarReduceCollection.preload`` takes its result.

Only what cannot differ between Postgres and incview is rendered: group keys that are plain
columns (read as the population reads them, ``arrow_snapshot``); count(*), count(x), sum(x),
avg(x) with FILTERs; arguments and predicates built from numeric (declared precision) and
integer columns, numeric literals, + - * of numerics (integer arithmetic can overflow: that is
the errs stream's, not the query's), comparisons of numbers, dates and timestamps (without time
zone: a timestamptz literal reads in the session's zone) with date/timestamp literals and such a
literal plus or minus an interval literal (``population_filter.time_constant``),
BETWEEN, IN of numbers, IS [NOT] NULL, AND/OR/NOT. No text comparison (Postgres compares by the
database's collation), no division, no function. Every predicate above the scan must render (a
weaker WHERE would count rows the view does not). A query that fails, or sums that do not fit
the reduce's record (NaN, Infinity, more digits), send the population back to reading rows: the
caller's part. This module must not change results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from engine.dataflow.aggregates import Aggregate
from engine.postgres.arrow_snapshot import read_as
from engine.postgres.pgoutput import quoted
from engine.sql import logical_plan as lp
from engine.sql.population_filter import COMPARISON_OPS, is_number, time_constant
from engine.sql.types import TypeKind

_INTS = (TypeKind.SMALLINT, TypeKind.INTEGER, TypeKind.BIGINT)
_KINDS = ("count_star", "count", "sum", "avg")
_NUMBERS = ("num", "int", "lit")
_TIMES = ("date", "ts")


@dataclass(frozen=True)
class AggregateQuery:
    """The query (``sql``) over ``table`` ("schema.table") returning per group: the keys (Arrow
    types ``key_types``), then the aggregates; ``layout`` says which result column holds the
    row count, then per aggregate its count and, for sum and avg, its sum as text (equal ones
    are computed once)."""

    table: str
    sql: str
    key_names: tuple[str, ...]
    key_types: tuple[pa.DataType, ...]
    layout: tuple[int, ...]


def aggregate_query(
    plan: lp.Aggregate,
    columns: Sequence[exp.Expression],
    aggregates: Sequence[Aggregate],
    ngroup: int,
) -> AggregateQuery | None:
    """The partial-aggregate query of the reduce computing ``plan`` (``columns``: its input's
    expressions, group keys first; ``aggregates`` over them), or None."""
    chain, node = [], plan.input
    while isinstance(node, lp.Filter | lp.SubqueryAlias):
        if isinstance(node, lp.SubqueryAlias) and node.column_names is not None:
            return None
        chain.append(node)
        node = node.input
    if not isinstance(node, lp.Scan):
        return None
    scan = node
    where = []
    for f in chain:
        if isinstance(f, lp.Filter):
            p = _predicate(f.predicate, _Scope(f.input.fields, scan))
            if p is None:
                return None
            where.append(p)
    scope = _Scope(plan.input.fields, scan)
    items, key_names, key_types = [], [], []
    for key in columns[:ngroup]:
        field = scope.field(key) if isinstance(key, exp.Column) else None
        read = read_as(field.type) if field is not None else None
        if read is None or field.type.kind in (TypeKind.DOUBLE, TypeKind.REAL):
            return None
        items.append(read[0].format(quoted(field.name)))
        key_names.append(field.name)
        key_types.append(read[1])
    parts = ["count(*)"]
    for a in aggregates:
        if a.kind not in _KINDS:
            return None
        filt = ""
        if a.filter is not None:
            p = _predicate(columns[a.filter], scope)
            if p is None:
                return None
            filt = f" FILTER (WHERE {p})"
        if a.kind == "count_star":
            parts.append(f"count(*){filt}")
            continue
        arg = _value(columns[a.arg], scope)  # type: ignore[index]
        if arg is None or (a.kind != "count" and arg[1] not in _NUMBERS):
            return None
        parts.append(f"count({arg[0]}){filt}" if arg[2] else f"count(*){filt}")
        if a.kind != "count":
            parts.append(f"(sum({arg[0]}){filt})::text")
    distinct = list(dict.fromkeys(parts))  # each aggregate computed once (count(*) of NOT NULLs)
    items += distinct
    sql = f"SELECT {', '.join(items)} FROM {quoted(scan.schema)}.{quoted(scan.table)}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    if ngroup:
        sql += " GROUP BY " + ", ".join(str(i + 1) for i in range(ngroup))
    layout = tuple(ngroup + distinct.index(p) for p in parts)
    table = f"{scan.schema}.{scan.table}"
    return AggregateQuery(table, sql, tuple(key_names), tuple(key_types), layout)


class _Scope:
    """Resolves a column of a node's ``fields`` to the scanned table's field (same positions:
    filters and aliases keep them)."""

    def __init__(self, fields: Sequence[lp.Field], scan: lp.Scan) -> None:
        self.fields = fields
        self.scan_fields = scan.fields

    def field(self, col: exp.Column) -> lp.Field | None:
        hits = [
            i
            for i, f in enumerate(self.fields)
            if f.name == col.name and (not col.table or col.table == f.qualifier)
        ]
        return self.scan_fields[hits[0]] if len(hits) == 1 else None


def _kind(field: lp.Field) -> str | None:
    t = field.type
    if t.kind in _INTS:
        return "int"
    if t.kind is TypeKind.NUMERIC and t.precision is not None:
        return "num"
    return {TypeKind.DATE: "date", TypeKind.TIMESTAMP: "ts", TypeKind.BOOLEAN: "bool"}.get(t.kind)


def _value(e: exp.Expression, scope: _Scope) -> tuple[str, str, bool] | None:
    """(SQL, kind, nullable) of a value expression: kind num/int/lit (numbers), date, ts, bool."""
    if isinstance(e, exp.Paren):
        return _value(e.this, scope)
    if isinstance(e, exp.Column):
        field = scope.field(e)
        kind = _kind(field) if field is not None else None
        if kind is None:
            return None
        return quoted(field.name), kind, field.nullable  # type: ignore[union-attr]
    if isinstance(e, exp.Literal) and not e.is_string:
        return (e.this, "lit", False) if is_number(e.this) else None
    if isinstance(e, exp.Neg):
        inner = _value(e.this, scope)
        return (f"(-{inner[0]})", *inner[1:]) if inner and inner[1] in ("num", "lit") else None
    if isinstance(e, exp.Boolean):
        return ("true" if e.this else "false", "bool", False)
    constant = time_constant(e)  # a date/timestamp literal, +- an interval literal
    if constant is not None:
        return constant, "ts", False
    if isinstance(e, exp.Add | exp.Sub | exp.Mul):
        a, b = _value(e.this, scope), _value(e.expression, scope)
        if a is None or b is None:
            return None
        op = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}[type(e)]
        kinds, nullable = {a[1], b[1]}, a[2] or b[2]
        if kinds <= {"num", "lit"}:  # numeric arithmetic: exact, cannot fail
            return f"({a[0]} {op} {b[0]})", "num" if "num" in kinds else "lit", nullable
        return None
    return None


def _predicate(e: exp.Expression, scope: _Scope) -> str | None:
    """SQL of a boolean expression, or None."""
    if isinstance(e, exp.Paren):
        return _predicate(e.this, scope)
    if isinstance(e, exp.And | exp.Or):
        a, b = _predicate(e.this, scope), _predicate(e.expression, scope)
        op = "AND" if isinstance(e, exp.And) else "OR"
        return f"({a} {op} {b})" if a and b else None
    if isinstance(e, exp.Not):
        inner = _predicate(e.this, scope)
        return f"(NOT {inner})" if inner else None
    if type(e) in COMPARISON_OPS:
        a, b = _value(e.this, scope), _value(e.expression, scope)
        if a and b and _comparable(a[1], b[1]):
            return f"({a[0]} {COMPARISON_OPS[type(e)]} {b[0]})"  # type: ignore[index]
        return None
    if isinstance(e, exp.Between):
        v, lo, hi = (_value(e.args[k], scope) for k in ("this", "low", "high"))
        if v and lo and hi and _comparable(v[1], lo[1]) and _comparable(v[1], hi[1]):
            return f"({v[0]} BETWEEN {lo[0]} AND {hi[0]})"
        return None
    if isinstance(e, exp.In) and not e.args.get("query") and e.expressions:
        v = _value(e.this, scope)
        items = [_value(x, scope) for x in e.expressions]
        if v and v[1] in _NUMBERS and all(i and i[1] in _NUMBERS for i in items):
            return f"({v[0]} IN ({', '.join(i[0] for i in items)}))"  # type: ignore[index]
        return None
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
        v = _value(e.this, scope)
        return f"({v[0]} IS NULL)" if v else None
    value = _value(e, scope)
    return value[0] if value and value[1] == "bool" else None


def _comparable(a: str, b: str) -> bool:
    if a in _NUMBERS and b in _NUMBERS:
        return True
    if a in _TIMES and b in _TIMES:
        return True
    return a == b == "bool"
