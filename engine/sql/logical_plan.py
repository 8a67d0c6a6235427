"""The typed logical plan: frozen dataclasses, one per relational operator, and their printer.

Expressions inside the plan are sqlglot expressions whose column references are qualified
(``exp.Column(name, table=qualifier)``) against the *input* node's fields. Every node knows its
output ``fields`` (qualifier, name, SQL type, nullability), so rules can reason about columns and
the physical planner can turn references into row positions. Nodes are immutable: rules build
new trees (``dataclasses.replace``). This module must not plan, optimize or execute.

The printer follows seed 000's EXPLAIN style::

    Aggregate: groupBy=[[]], aggr=[[count(*)]]
      Inner Join: e.b = n.a
        SubqueryAlias: e
          TableScan: example_table projection=[b], partial_filters=[b > 30]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from dataclasses import fields as dc_fields
from typing import Any

from sqlglot import exp


@dataclass(frozen=True)
class Field:
    """One output column of a plan node."""

    qualifier: str | None
    name: str
    type: Any  # engine.sql.types.SqlType
    nullable: bool = True

    def ref(self) -> exp.Column:
        return column(self.name, self.qualifier)


def column(name: str, qualifier: str | None = None) -> exp.Column:
    ident = exp.to_identifier(name, quoted=True)
    table = exp.to_identifier(qualifier, quoted=True) if qualifier else None
    return exp.Column(this=ident, table=table)


def column_index(e: exp.Expression, fields: tuple[Field, ...]) -> int | None:
    """Position of the field a bare column reference names, or None if ``e`` is not one (or
    names no field, or several)."""
    if not isinstance(e, exp.Column):
        return None
    q = e.table or None
    hits = [i for i, f in enumerate(fields) if f.name == e.name and (q is None or f.qualifier == q)]
    return hits[0] if len(hits) == 1 else None


@dataclass(frozen=True)
class SortKey:
    expr: exp.Expression
    descending: bool = False
    nulls_first: bool | None = None  # None: Postgres default (first iff descending)

    def sql(self) -> str:
        s = self.expr.sql(dialect="postgres") + (" DESC" if self.descending else "")
        if self.nulls_first is not None and self.nulls_first != self.descending:
            s += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return s


class LogicalPlan:
    """Base of plan nodes: ``fields`` and ``children``."""

    fields: tuple[Field, ...]

    @property
    def children(self) -> tuple[LogicalPlan, ...]:
        return tuple(
            getattr(self, f.name)
            for f in dc_fields(self)
            if isinstance(getattr(self, f.name), LogicalPlan)
        )

    def with_children(self, *children: LogicalPlan) -> LogicalPlan:
        names = [f.name for f in dc_fields(self) if isinstance(getattr(self, f.name), LogicalPlan)]
        return replace(self, **dict(zip(names, children, strict=True)))

    def walk(self) -> Iterator[LogicalPlan]:
        """Every node, parents before children (shared nodes once per path)."""
        yield self
        for c in self.children:
            yield from c.walk()

    def label(self) -> str:
        raise NotImplementedError


def _sql(e: exp.Expression) -> str:
    return e.sql(dialect="postgres")


def _list(exprs) -> str:
    return ", ".join(_sql(e) for e in exprs)


@dataclass(frozen=True)
class Scan(LogicalPlan):
    """A source table. ``projection``: positions of the table's columns actually read (None: all);
    ``filters``: predicates pushed into the population scan (in terms of the table's columns);
    ``row_estimate``: the catalog's row count when known, ``column_distinct``: per table field,
    its estimated number of distinct values when known (join ordering statistics); ``keys``: the
    table's unique keys as positions in ``table_fields`` (``engine.sql.unique_rows``)."""

    schema: str
    table: str
    table_fields: tuple[Field, ...]
    projection: tuple[int, ...] | None = None
    filters: tuple[exp.Expression, ...] = ()
    row_estimate: int | None = None
    column_distinct: tuple[float | None, ...] = ()
    keys: tuple[tuple[int, ...], ...] = ()

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        if self.projection is None:
            return self.table_fields
        return tuple(self.table_fields[i] for i in self.projection)

    def label(self) -> str:
        s = f"TableScan: {self.table if self.schema == 'public' else self.schema + '.' + self.table}"
        if self.projection is not None:
            s += " projection=[" + ", ".join(f.name for f in self.fields) + "]"
        if self.filters:
            s += ", partial_filters=[" + _list(self.filters) + "]"
        return s


@dataclass(frozen=True)
class SubqueryAlias(LogicalPlan):
    """Re-qualifies its input's fields with ``alias`` (a FROM alias, derived table or CTE use)."""

    input: LogicalPlan
    alias: str
    column_names: tuple[str, ...] | None = None

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        names = self.column_names or tuple(f.name for f in self.input.fields)
        return tuple(
            Field(self.alias, n, f.type, f.nullable)
            for n, f in zip(names, self.input.fields, strict=True)
        )

    def label(self) -> str:
        return f"SubqueryAlias: {self.alias}"


@dataclass(frozen=True)
class Filter(LogicalPlan):
    input: LogicalPlan
    predicate: exp.Expression

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        return self.input.fields

    def label(self) -> str:
        return f"Filter: {_sql(self.predicate)}"


@dataclass(frozen=True)
class Project(LogicalPlan):
    """Computes ``exprs`` over the input; output fields are named ``names`` (unqualified)."""

    input: LogicalPlan
    exprs: tuple[exp.Expression, ...]
    out_fields: tuple[Field, ...]

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        return self.out_fields

    def label(self) -> str:
        parts = []
        for e, f in zip(self.exprs, self.out_fields, strict=True):
            s = _sql(e)
            parts.append(s if s.strip('"').endswith(f.name) else f"{s} AS {f.name}")
        return "Projection: " + ", ".join(parts)


JOIN_KINDS = ("inner", "left", "right", "full", "cross", "semi", "anti", "anti_null_aware")
#: the join kinds that output the left input's rows (some of them) and fields only
SEMI_KINDS = ("semi", "anti", "anti_null_aware")


@dataclass(frozen=True)
class Join(LogicalPlan):
    """``kind`` in JOIN_KINDS. semi/anti output the left fields only; anti_null_aware is NOT IN."""

    left: LogicalPlan
    right: LogicalPlan
    kind: str
    condition: exp.Expression | None = None

    def __post_init__(self) -> None:
        if self.kind not in JOIN_KINDS:
            raise ValueError(f"unknown join kind {self.kind!r}")

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        left, right = self.left.fields, self.right.fields
        if self.kind in SEMI_KINDS:
            return left
        if self.kind in ("right", "full"):
            left = tuple(replace(f, nullable=True) for f in left)
        if self.kind in ("left", "full"):
            right = tuple(replace(f, nullable=True) for f in right)
        return left + right

    def label(self) -> str:
        name = {
            "inner": "Inner Join",
            "left": "Left Join",
            "right": "Right Join",
            "full": "Full Join",
            "cross": "Cross Join",
            "semi": "Semi Join",
            "anti": "Anti Join",
            "anti_null_aware": "Anti Join (NOT IN)",
        }[self.kind]
        return f"{name}: {_sql(self.condition)}" if self.condition is not None else name


@dataclass(frozen=True)
class Aggregate(LogicalPlan):
    """GROUP BY ``group_by`` computing ``aggregates`` (sqlglot aggregate calls, FILTER included).
    Output: one field per group expression, then one per aggregate."""

    input: LogicalPlan
    group_by: tuple[exp.Expression, ...]
    aggregates: tuple[exp.Expression, ...]
    out_fields: tuple[Field, ...]

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        return self.out_fields

    def label(self) -> str:
        return f"Aggregate: groupBy=[[{_list(self.group_by)}]], aggr=[[{_list(self.aggregates)}]]"


@dataclass(frozen=True)
class Distinct(LogicalPlan):
    input: LogicalPlan

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        return self.input.fields

    def label(self) -> str:
        return "Distinct"


SET_KINDS = ("union_all", "union", "except", "except_all", "intersect", "intersect_all")


@dataclass(frozen=True)
class SetOperation(LogicalPlan):
    """UNION [ALL] / EXCEPT [ALL] / INTERSECT [ALL]; fields (names, types) are the left's."""

    left: LogicalPlan
    right: LogicalPlan
    kind: str

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        return tuple(
            replace(lf, qualifier=None, nullable=lf.nullable or rf.nullable)
            for lf, rf in zip(self.left.fields, self.right.fields, strict=True)
        )

    def label(self) -> str:
        return self.kind.replace("_", " ").upper()


@dataclass(frozen=True)
class TopK(LogicalPlan):
    """ORDER BY ... LIMIT/OFFSET per partition; ``rank_kind`` row_number/rank/dense_rank (the
    ``WHERE rn <= k`` pattern), ``rank_field`` appended when the rank is selected."""

    input: LogicalPlan
    partition_by: tuple[exp.Expression, ...]
    order_by: tuple[SortKey, ...]
    limit: int | None
    offset: int = 0
    rank_kind: str = "row_number"
    rank_field: Field | None = None

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        return self.input.fields + ((self.rank_field,) if self.rank_field else ())

    def label(self) -> str:
        s = "TopK:"
        if self.partition_by:
            s += f" partition=[{_list(self.partition_by)}]"
        s += " order=[" + ", ".join(k.sql() for k in self.order_by) + "]"
        if self.rank_kind != "row_number":
            s += f" {self.rank_kind}"
        if self.limit is not None:
            s += f" limit={self.limit}"
        if self.offset:
            s += f" offset={self.offset}"
        return s


@dataclass(frozen=True)
class Window(LogicalPlan):
    """Window functions sharing one PARTITION BY / ORDER BY; appends one field per function."""

    input: LogicalPlan
    partition_by: tuple[exp.Expression, ...]
    order_by: tuple[SortKey, ...]
    functions: tuple[exp.Expression, ...]
    out_fields: tuple[Field, ...]

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        return self.input.fields + self.out_fields

    def label(self) -> str:
        s = f"Window: [{_list(self.functions)}]"
        if self.partition_by:
            s += f" partition=[{_list(self.partition_by)}]"
        if self.order_by:
            s += " order=[" + ", ".join(k.sql() for k in self.order_by) + "]"
        return s


@dataclass(frozen=True)
class Values(LogicalPlan):
    """Constant rows (SELECT without FROM)."""

    rows: tuple[tuple[Any, ...], ...]
    out_fields: tuple[Field, ...]

    @property
    def fields(self) -> tuple[Field, ...]:  # type: ignore[override]
        return self.out_fields

    def label(self) -> str:
        return f"Values: {len(self.rows)} row(s)"


def format_plan(plan: LogicalPlan) -> str:
    """Indented tree, as in seed 000; a node shared by several parents is printed once."""
    lines: list[str] = []
    seen: dict[int, int] = {}

    def show(node: LogicalPlan, depth: int) -> None:
        pad = "  " * depth
        if id(node) in seen and node.children:
            lines.append(f"{pad}-> shared #{seen[id(node)]}: {node.label()}")
            return
        seen[id(node)] = len(seen) + 1
        lines.append(pad + node.label())
        for c in node.children:
            show(c, depth + 1)

    show(plan, 0)
    return "\n".join(lines)
