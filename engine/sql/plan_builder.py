"""Builds the logical plan of a view from its SQL: parse, check, qualify, translate.

``build_plan(sql, catalog)`` returns a ``BuiltView``: the (unoptimized) ``LogicalPlan``, the
output column names Postgres would give, and the source tables. Translation works on sqlglot's
qualified AST (stars expanded, every column qualified with its FROM alias) scope by scope:
FROM/JOIN -> WHERE (subquery predicates become semi/anti joins, scalar subqueries become cross or
left joins with an aggregate: decorrelation) -> GROUP BY/aggregates -> HAVING -> windows ->
SELECT -> DISTINCT -> ORDER BY ... LIMIT as top-k. A CTE is built once and shared by every use.
Anything unsupported raises ``UnsupportedSQL`` with a position and, where possible, a rewrite.
Its parts: WHERE and subqueries (``plan_subqueries``), GROUP BY, windows, DISTINCT ON and ORDER
BY ... LIMIT (``plan_grouping``). This module must not optimize (rules/) or execute (physical
planning).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify

from engine.errors import UnsupportedSQL
from engine.sql import logical_plan as lp
from engine.sql.calls import find_aggregates
from engine.sql.catalog import Catalog, SourceTable
from engine.sql.constant_relations import (
    constant_relation,
    is_constant_relation,
    name_constant_relations,
)
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.output_names import output_name
from engine.sql.parse import DIALECT, parse_query, unsupported
from engine.sql.plan_grouping import GroupingBuilding
from engine.sql.plan_subqueries import SubqueryBuilding
from engine.sql.source_views import inline_source_views, is_system_schema
from engine.sql.types import TEXT, SqlType, TypeKind, common_type

NON_DETERMINISTIC = {
    "now": "now() changes with time",
    "random": "random() differs on every evaluation",
    "clock_timestamp": "clock_timestamp() changes with time",
    "statement_timestamp": "statement_timestamp() changes with time",
    "transaction_timestamp": "transaction_timestamp() changes with time",
    "timeofday": "timeofday() changes with time",
    "gen_random_uuid": "gen_random_uuid() differs on every evaluation",
    "uuid_generate_v4": "uuid_generate_v4() differs on every evaluation",
    "nextval": "nextval() changes state on every call",
    "txid_current": "txid_current() depends on the transaction",
    "pg_backend_pid": "pg_backend_pid() depends on the session",
}
_NON_DETERMINISTIC_NODES = {
    exp.CurrentTimestamp: "now",
    exp.CurrentDate: "current_date",
    exp.CurrentTime: "current_time",
    exp.Rand: "random",
}
# schemas of system catalogs (and every pg_* schema) and incview's own catalog
# (engine.postgres.view_catalog): their changes reach no publication, a view over them never moves
_DETERMINISM_HINT = (
    "A view must be a deterministic function of its source tables; store the value in a column "
    "or compare against a constant instead"
)


# Postgres' system columns (every table has them; they are not part of a row's value)
SYSTEM_COLUMNS = frozenset({"ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"})


@dataclass(frozen=True)
class BuiltView:
    plan: LogicalPlan
    output_names: tuple[str, ...]
    sources: tuple[SourceTable, ...]
    # source views planned over their definitions (engine.sql.source_views): name -> definition
    source_views: Mapping[str, str] = field(default_factory=dict)


def build_plan(sql: str, catalog: Catalog) -> BuiltView:
    """The unoptimized logical plan of ``sql`` against ``catalog``."""
    return _Builder(catalog).build(sql)


def _set_operation_type(lt: SqlType, rt: SqlType, node: exp.Expression) -> SqlType:
    """Postgres' result type of a set operation's column: the common type, with the typmod only
    when both sides have the same one; varchar wins over text when it comes first (both are
    implicitly castable to each other, so Postgres keeps the first)."""
    if lt == rt:
        return lt if lt.kind is not TypeKind.UNKNOWN else TEXT
    t = common_type([lt, rt])
    if t is None:
        raise unsupported(
            node, f"{type(node).__name__.upper()} types {lt} and {rt} cannot be matched"
        )
    first = lt if lt.kind is not TypeKind.UNKNOWN else rt
    if first.kind is TypeKind.VARCHAR and t.kind is TypeKind.TEXT:
        return SqlType(TypeKind.VARCHAR)
    return SqlType(t.kind)


def _coerce_branch(plan: LogicalPlan, types: list[SqlType]) -> LogicalPlan:
    """``plan`` with its columns cast to ``types`` where they differ (a set operation's branch)."""
    if all(f.type == t for f, t in zip(plan.fields, types, strict=True)):
        return plan
    exprs = []
    for f, t in zip(plan.fields, types, strict=True):
        ref = f.ref()
        exprs.append(ref if f.type == t else exp.Cast(this=ref, to=exp.DataType.build(t.sql())))
    out = tuple(Field(None, f.name, t, f.nullable) for f, t in zip(plan.fields, types, strict=True))
    return lp.Project(plan, tuple(exprs), out)


class _Builder(SubqueryBuilding, GroupingBuilding):
    """Translates one view's qualified AST to a logical plan, scope by scope (its WHERE and
    subqueries, and its grouping and ordering, are the mixins it is made of)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.sources: dict[str, SourceTable] = {}
        self.ctes: dict[str, LogicalPlan] = {}
        self._names = itertools.count(1)
        self._top_names: tuple[str, ...] | None = None

    # -- entry ----------------------------------------------------------------------------------
    def build(self, sql: str) -> BuiltView:
        raw = parse_query(sql)
        self._check_constructs(raw)
        raw, self.source_views = inline_source_views(raw, self.catalog, self._check_constructs)
        name_constant_relations(raw)
        names = self._output_names(raw)
        schema = self._resolve_tables(raw)
        try:
            q = qualify(raw.copy(), schema=schema, dialect=DIALECT, validate_qualify_columns=True)
        except OptimizeError as e:
            raise self._resolution_error(str(e), raw) from None
        self._top_names = names
        plan = self.query(q, outer=None)
        names = tuple(f.name for f in plan.fields)
        seen = set()
        for n in names:
            if n in seen:
                raise UnsupportedSQL(
                    f"the view's output has two columns named {n!r}; the result table needs distinct "
                    f"column names: give each output column its own alias (... AS name)"
                )
            seen.add(n)
        return BuiltView(plan, names, tuple(self.sources.values()), self.source_views)

    def _resolution_error(self, msg: str, raw: exp.Expression) -> UnsupportedSQL:
        """sqlglot's qualify error as a message naming the column, its position and the fix."""
        m = re.search(r"[Cc]olumn '([^']+)' could not be resolved|[Uu]nknown column: (\S+)", msg)
        if m is None:
            text = re.sub(r"\.?\s*Line: (\d+), Col: (\d+)", r" at line \1, column \2", msg)
            return UnsupportedSQL(text[0].lower() + text[1:])
        name = (m.group(1) or m.group(2)).strip(".")
        node = next((c for c in raw.find_all(exp.Column) if c.name == name), None)
        owners = [t.name for t in self.sources.values() if any(c.name == name for c in t.columns)]
        if node is not None and not node.table and len(owners) > 1:
            return unsupported(
                node,
                f"column reference {name!r} is ambiguous (tables {', '.join(sorted(owners))} "
                "have it)",
                "Qualify it with the table's name or alias",
            )
        if name.lower() in SYSTEM_COLUMNS and not owners:
            return unsupported(
                node,
                f"system column {name} is not deterministic: it says where and by which "
                "transaction a row version is stored, which VACUUM, updates and restores change "
                "without changing the row's value",
                "Select the table's own columns (a primary key identifies a row)",
            )
        where = f" of table {node.table}" if node is not None and node.table else ""
        return unsupported(
            node, f"unknown column {name!r}{where}", "Check the name against the table's columns"
        )

    def _output_names(self, raw: exp.Expression) -> tuple[str, ...]:
        first = raw
        while isinstance(first, (exp.Union, exp.Except, exp.Intersect)):
            first = first.left
        if any(
            isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
            for e in first.expressions
        ):
            return ()
        return tuple(output_name(e) for e in first.expressions)

    def _check_constructs(self, raw: exp.Expression) -> None:
        for node in raw.walk():
            for cls, name in _NON_DETERMINISTIC_NODES.items():
                if type(node) is cls:
                    raise unsupported(node, f"{name} is not deterministic", _DETERMINISM_HINT)
            if isinstance(node, exp.Anonymous) and node.name.lower() in NON_DETERMINISTIC:
                raise unsupported(node, NON_DETERMINISTIC[node.name.lower()], _DETERMINISM_HINT)
            if isinstance(node, exp.With) and node.args.get("recursive"):
                raise unsupported(node, "WITH RECURSIVE is not supported")
            if isinstance(node, exp.Lateral) or (
                isinstance(node, exp.Join) and node.args.get("lateral")
            ):
                raise unsupported(
                    node, "LATERAL is not supported", "Rewrite the lateral subquery as a join"
                )
            if isinstance(node, exp.Join) and _join_lacks_condition(node):
                raise unsupported(
                    node,
                    "syntax error: JOIN without a join condition",
                    "Add ON <condition> or USING (...), or write CROSS JOIN",
                )
            if isinstance(node, exp.Table) and node.args.get("only"):
                raise unsupported(
                    node,
                    "FROM ONLY is not supported: incview maintains a parent table together with "
                    "its partitions and inheritance children",
                    "Remove ONLY (the view then holds the children's rows too), or read a column "
                    "that tells the parent's own rows apart",
                )
            if isinstance(node, exp.TableSample):
                raise unsupported(
                    node,
                    "TABLESAMPLE is not deterministic (it picks a random sample)",
                    "Filter on a column instead",
                )
            if (
                isinstance(node, exp.Select)
                and isinstance(node.args.get("distinct"), exp.Distinct)
                and node.args["distinct"].args.get("on") is not None
                and not node.args.get("order")
            ):
                raise unsupported(
                    node.args["distinct"],
                    "DISTINCT ON without ORDER BY keeps an arbitrary row of each group",
                    "Add an ORDER BY that starts with the DISTINCT ON expressions and makes the "
                    "choice unique",
                )
            if isinstance(node, exp.Lock):
                raise unsupported(node, "FOR UPDATE/SHARE has no meaning in a view")
            if (
                isinstance(node, exp.Select)
                and node.args.get("limit") is not None
                and not node.args.get("order")
            ):
                raise unsupported(
                    node.args["limit"],
                    "LIMIT without ORDER BY picks arbitrary rows",
                    "Add an ORDER BY that makes the choice deterministic (ending with a unique key)",
                )

    def _resolve_tables(self, raw: exp.Expression) -> dict:
        cte_names = {c.alias_or_name for c in raw.find_all(exp.CTE)}
        schema: dict[str, dict[str, dict[str, str]]] = {}
        for t in raw.find_all(exp.Table):
            if (not t.db and t.name in cte_names) or is_constant_relation(t):
                continue
            if t.args.get("catalog"):
                raise unsupported(t, "cross-database references are not supported")
            if not t.name:
                raise unsupported(
                    t,
                    "a function in FROM (a set-returning or table function) is not supported",
                    "Read from tables, or from a view over them",
                )
            if is_system_schema(t.db):
                what = "incview's own catalog" if t.db == "incview" else "a system catalog"
                raise unsupported(
                    t,
                    f"{t.db}.{t.name} is in {what} (schema {t.db}), whose changes are not "
                    "published to incview: a view can only read user tables",
                )
            src = self.catalog.lookup(t.db or None, t.name)
            if src is None:
                where = f"{t.db}.{t.name}" if t.db else t.name
                hint = "Check the name, or create the table first"
                if not t.db and t.name.startswith("pg_"):
                    hint = "System catalogs (pg_catalog) cannot be a view's sources"
                raise unsupported(t, f"unknown table {where}", hint)
            self.sources[src.qualified_name] = src
            schema.setdefault(src.schema, {})[src.name] = {
                c.name: c.type.sql() for c in src.columns
            }
        return schema

    # -- queries --------------------------------------------------------------------------------
    def query(self, node: exp.Expression, outer: list[Field] | None) -> LogicalPlan:
        with_ = node.args.get("with_")
        if with_ is not None:
            # the view's output names belong to the main query, not to a CTE planned before it
            # (a one-column CTE under a one-column view took the view's column name)
            top, self._top_names = self._top_names, None
            for cte in with_.expressions:
                plan = self.query(cte.this, outer=None)
                cols = cte.args.get("alias") and cte.args["alias"].columns
                if cols:
                    plan = lp.SubqueryAlias(plan, "__cte", tuple(c.name for c in cols))
                self.ctes[cte.alias_or_name] = plan
            self._top_names = top
        if isinstance(node, (exp.Union, exp.Except, exp.Intersect)):
            top, self._top_names = self._top_names, None
            return self.set_operation(node, top)
        if isinstance(node, exp.Subquery):
            return self.query(node.this, outer)
        if isinstance(node, exp.Select):
            return self.select(node)
        raise unsupported(node, f"unsupported query form {type(node).__name__}")

    def set_operation(
        self, node: exp.Expression, names: tuple[str, ...] | None = None
    ) -> LogicalPlan:
        self._top_names = names  # the left branch names the columns
        left = self.query(node.left, None)
        self._top_names = None
        right = self.query(node.right, None)
        if len(left.fields) != len(right.fields):
            raise unsupported(
                node,
                f"each side of {type(node).__name__.upper()} must have the same number of columns",
            )
        types = [
            _set_operation_type(lf.type, rf.type, node)
            for lf, rf in zip(left.fields, right.fields, strict=True)
        ]
        left, right = _coerce_branch(left, types), _coerce_branch(right, types)
        distinct = node.args.get("distinct", True)
        kind = {exp.Union: "union", exp.Except: "except", exp.Intersect: "intersect"}[type(node)]
        plan: LogicalPlan = lp.SetOperation(left, right, kind if distinct else f"{kind}_all")
        return self._order_limit(node, plan, plan.fields, None)

    # -- SELECT ---------------------------------------------------------------------------------
    def select(self, sel: exp.Select) -> LogicalPlan:
        top, self._top_names = self._top_names, None  # before nested SELECTs are built
        plan = self.from_clause(sel)
        plan = self.where_clause(sel.args.get("where"), plan)
        exprs = [e.this if isinstance(e, exp.Alias) else e for e in sel.expressions]
        names = [e.alias_or_name for e in sel.expressions]
        if top is not None and len(top) == len(names):
            names = list(top)  # the outermost SELECT: Postgres' names, not qualify's _col_N
        having = sel.args.get("having")
        order = sel.args.get("order")
        group = sel.args.get("group")
        holder = [plan]  # scalar subqueries in the select list join their plans in here
        exprs = [self.replace_exists(e, holder) for e in exprs]
        exprs = [self._replace_scalar_subqueries(e, holder) for e in exprs]
        plan = holder[0]
        aggs = [
            a
            for e in exprs + ([having.this] if having is not None else [])
            for a in find_aggregates(e)
        ]
        if order is not None:
            for o in order.expressions:
                aggs += find_aggregates(o.this)
        groupings = [
            g
            for e in exprs
            + ([having.this] if having is not None else [])
            + ([o.this for o in order.expressions] if order is not None else [])
            for g in e.find_all(exp.Grouping)
        ]
        if groupings and group is None:
            raise unsupported(groupings[0], "GROUPING needs a GROUP BY")
        if group is not None or aggs:
            plan, rewrite = self.aggregate(plan, group, aggs, groupings)
            exprs = [rewrite(e) for e in exprs]
            if having is not None:
                cond = rewrite(having.this)
                self._check_boolean(cond, plan.fields, "HAVING")
                plan = lp.Filter(plan, cond)
            if order is not None:
                order = order.copy()
                for o in order.expressions:
                    if not (
                        isinstance(o.this, exp.Column) and not o.this.table and o.this.name in names
                    ):
                        o.set("this", rewrite(o.this))
                sel = sel.copy()
                sel.set("order", order)
        elif having is not None:
            raise unsupported(having, "HAVING without GROUP BY or aggregates")
        windows = [w for e in exprs for w in e.find_all(exp.Window)]
        if windows:
            plan, wrewrite = self.windows(plan, windows)
            exprs = [wrewrite(e) for e in exprs]
        distinct = sel.args.get("distinct")
        if distinct is not None and distinct.args.get("on"):
            return self._distinct_on(sel, plan, exprs, names, distinct)
        pre_project_fields = plan.fields
        project = self._project(plan, exprs, names)
        if distinct is not None:
            return self._order_limit(sel, lp.Distinct(project), project.fields, None)
        return self._order_limit(
            sel, project, project.fields, (plan, exprs, names, pre_project_fields)
        )

    def _project(
        self, plan: LogicalPlan, exprs: list[exp.Expression], names: list[str]
    ) -> lp.Project:
        types = self.types_of(exprs, plan.fields)
        out = tuple(
            Field(None, n, t, self._nullable(e, plan.fields))
            for n, t, e in zip(names, types, exprs, strict=True)
        )
        return lp.Project(plan, tuple(exprs), out)

    @staticmethod
    def _nullable(e: exp.Expression, fields: tuple[Field, ...]) -> bool:
        if isinstance(e, exp.Column):
            for f in fields:
                if f.name == e.name and f.qualifier == (e.table or None):
                    return f.nullable
        return True

    # -- FROM -----------------------------------------------------------------------------------
    def from_clause(self, sel: exp.Select) -> LogicalPlan:
        from_ = sel.args.get("from_")
        if from_ is None:
            return lp.Values(((),), ())
        return self.join_chain(from_.this, sel.args.get("joins") or ())

    def join_chain(self, first: exp.Expression, joins) -> LogicalPlan:
        """``first`` joined with each of ``joins`` in turn (left-deep, as written); a join's right
        side may itself be a parenthesized join tree (``table_source``)."""
        plan = self.table_source(first)
        for join in joins:
            right = self.table_source(join.this)
            side = (join.args.get("side") or "").lower()
            kind = (join.args.get("kind") or "").lower()
            on = join.args.get("on")
            if join.args.get("using"):
                raise unsupported(
                    join, "JOIN ... USING could not be resolved", "Write the join with ON"
                )
            if on is not None:
                self._check_boolean(on, plan.fields + right.fields, "JOIN/ON")
            if side in ("left", "right", "full"):
                if on is None:
                    raise unsupported(join, f"{side.upper()} JOIN needs an ON condition")
                plan = lp.Join(plan, right, side, on)
            elif kind == "cross" or on is None:
                plan = lp.Join(plan, right, "cross")
            elif kind in ("", "inner"):
                plan = lp.Join(plan, right, "inner", on)
            else:
                raise unsupported(join, f"{kind.upper()} JOIN is not supported")
        return plan

    def table_source(self, node: exp.Expression) -> LogicalPlan:
        alias = node.alias_or_name
        if is_constant_relation(node):
            return constant_relation(node)
        if isinstance(node, exp.Table) and node.args.get("joins"):
            # the inside of a parenthesized join tree: "(r JOIN s ON ...)"
            first = node.copy()
            first.set("joins", None)
            return self.join_chain(first, node.args["joins"])
        if isinstance(node, exp.Subquery) and isinstance(node.this, (exp.Table, exp.Subquery)):
            # parentheses around a join tree or a table: the names inside stay visible
            inner = self.table_source(node.this)
            if node.alias:
                cols = node.args["alias"].columns
                return lp.SubqueryAlias(inner, node.alias, tuple(c.name for c in cols) or None)
            return inner
        if isinstance(node, exp.Table):
            if not node.db and node.name in self.ctes:
                return lp.SubqueryAlias(self.ctes[node.name], alias)
            src = self.catalog.lookup(node.db or None, node.name)
            assert src is not None  # checked in _resolve_tables
            fields = tuple(Field(src.name, c.name, c.type, c.nullable) for c in src.columns)
            return lp.SubqueryAlias(
                lp.Scan(
                    src.schema,
                    src.name,
                    fields,
                    row_estimate=src.row_estimate,
                    column_distinct=tuple(c.distinct for c in src.columns),
                    keys=_key_positions(src),
                ),
                alias,
            )
        if isinstance(node, exp.Subquery):
            inner = self.query(node.this, None)
            cols = node.args.get("alias") and node.args["alias"].columns
            return lp.SubqueryAlias(inner, alias, tuple(c.name for c in cols) if cols else None)
        raise unsupported(node, f"unsupported FROM item {type(node).__name__}")

    # -- types ----------------------------------------------------------------------------------
    def _check_boolean(self, cond: exp.Expression, fields: tuple[Field, ...], clause: str) -> None:
        """Type-check a condition now (Postgres rejects ``text = 1`` when the view is created)."""
        if any(isinstance(n, (exp.Subquery, exp.Exists)) for n in cond.walk()):
            return  # subqueries are planned (and checked) separately
        (t,) = self.types_of([cond], fields)
        if t.kind not in (TypeKind.BOOLEAN, TypeKind.UNKNOWN):
            raise unsupported(cond, f"argument of {clause} must be type boolean, not type {t}")

    def types_of(self, exprs: list[exp.Expression], fields: tuple[Field, ...]) -> list[SqlType]:
        """Postgres types of ``exprs`` over ``fields`` (raises UnsupportedSQL for what cannot compile)."""
        if not exprs:
            return []
        from engine.sql.expression_compiler import ColumnRef, compile_expressions

        cols = [ColumnRef(f.name, f.qualifier, f.type, f.nullable) for f in fields]
        return list(compile_expressions(list(exprs), cols).types)


def _join_lacks_condition(join: exp.Join) -> bool:
    """A ``JOIN`` keyword (not a comma, CROSS or NATURAL join) with no ON/USING, or an empty ON:
    Postgres rejects both as syntax errors. sqlglot records ``pivots`` only for keyword joins."""
    if "on" in join.args and join.args["on"] is None:
        return True
    if "pivots" not in join.args:
        return False  # FROM a, b
    if (join.args.get("kind") or "").upper() == "CROSS" or join.args.get("method"):
        return False
    return join.args.get("on") is None and not join.args.get("using")


def _key_positions(src: SourceTable) -> tuple[tuple[int, ...], ...]:
    """``src``'s unique keys as positions of its columns (a key naming a column the catalog does
    not list is left out)."""
    names = [c.name for c in src.columns]
    return tuple(tuple(names.index(c) for c in key) for key in src.keys if set(key) <= set(names))
