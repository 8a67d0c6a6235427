"""Builds the logical plan of a view from its SQL: parse, check, qualify, translate.

``build_plan(sql, catalog)`` returns a ``BuiltView``: the (unoptimized) ``LogicalPlan``, the
output column names Postgres would give, and the source tables. Translation works on sqlglot's
qualified AST (stars expanded, every column qualified with its FROM alias) scope by scope:
FROM/JOIN -> WHERE (subquery predicates become semi/anti joins, scalar subqueries become cross or
left joins with an aggregate: decorrelation) -> GROUP BY/aggregates -> HAVING -> windows ->
SELECT -> DISTINCT -> ORDER BY ... LIMIT as top-k. A CTE is built once and shared by every use.
Anything unsupported raises ``UnsupportedSQL`` with a position and, where possible, a rewrite.
This module must not optimize (rules/) or execute (physical planning).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify

from engine.dataflow.aggregates import MOMENT_KINDS
from engine.errors import UnsupportedSQL
from engine.sql import logical_plan as lp
from engine.sql.calls import aggregate_call, find_aggregates, sort_keys, window_call
from engine.sql.catalog import Catalog, SourceTable
from engine.sql.constant_relations import (
    constant_relation,
    is_constant_relation,
    name_constant_relations,
)
from engine.sql.exists_mark import exists_mark
from engine.sql.functions import MORE_THAN_ONE_ROW, RAISE_FUNCTION
from engine.sql.grouping_sets import expand_group, grouping_sets_plan
from engine.sql.in_mark import in_mark
from engine.sql.logical_plan import Field, LogicalPlan, SortKey
from engine.sql.output_names import output_name
from engine.sql.parse import DIALECT, parse_query, unsupported
from engine.sql.result_types import aggregate_type
from engine.sql.source_views import inline_source_views, is_system_schema
from engine.sql.types import TEXT, SqlType, TypeKind, common_type


def _in_subquery(n: exp.Expression) -> bool:
    return isinstance(n, exp.In) and n.args.get("query") is not None


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


def conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    if e is None:
        return []
    if isinstance(e, exp.And):
        return conjuncts(e.left) + conjuncts(e.right)
    if isinstance(e, exp.Paren) and isinstance(e.this, exp.And):
        return conjuncts(e.this)
    return [e]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = exp.And(this=out, expression=p)
    return out


def qualifiers(e: exp.Expression) -> set[str]:
    """The table qualifiers of the columns ``e`` references (not inside nested subqueries)."""
    out = set()
    for c in e.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Select))):
        if isinstance(c, exp.Column) and c.table:
            out.add(c.table)
    return out


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


class _Builder:
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
                ),
                alias,
            )
        if isinstance(node, exp.Subquery):
            inner = self.query(node.this, None)
            cols = node.args.get("alias") and node.args["alias"].columns
            return lp.SubqueryAlias(inner, alias, tuple(c.name for c in cols) if cols else None)
        raise unsupported(node, f"unsupported FROM item {type(node).__name__}")

    # -- WHERE and subqueries -------------------------------------------------------------------
    def where_clause(self, where: exp.Where | None, plan: LogicalPlan) -> LogicalPlan:
        if where is None:
            return plan
        plain: list[exp.Expression] = []
        subquery_preds: list[exp.Expression] = []
        for c in conjuncts(where.this):
            if self._subquery_predicate(c) is not None:
                subquery_preds.append(c)
            else:
                plain.append(c)
        holder = [plan]
        plain = [self.replace_exists(c, holder) for c in plain]
        plain = [self._replace_scalar_subqueries(c, holder) for c in plain]
        plan = holder[0]
        pred = and_all(plain)
        if pred is not None:
            self._check_boolean(pred, plan.fields, "WHERE")
            plan = lp.Filter(plan, pred)
        for c in subquery_preds:
            plan = self._semi_anti(c, plan)
        return plan

    @staticmethod
    def _subquery_predicate(c: exp.Expression) -> tuple[str, exp.Expression] | None:
        negated = False
        inner = c
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Not):
            negated, inner = True, inner.this
            while isinstance(inner, exp.Paren):
                inner = inner.this
        if isinstance(inner, exp.Exists):
            return ("anti" if negated else "semi", inner)
        if isinstance(inner, exp.In) and inner.args.get("query") is not None:
            return ("anti_in" if negated else "semi_in", inner)
        return None

    def _semi_anti(self, c: exp.Expression, plan: LogicalPlan) -> LogicalPlan:
        kind, node = self._subquery_predicate(c)  # type: ignore[misc]
        if kind in ("semi", "anti"):
            right, cond = self.exists_subquery(node, plan)
            if cond is None:
                plan, value = self.uncorrelated_exists(right, plan)
                return lp.Filter(plan, value if kind == "semi" else exp.Not(this=value))
            return lp.Join(plan, right, kind, cond)
        query = node.args["query"]
        sub = query.this if isinstance(query, exp.Subquery) else query
        if self.outer_references(sub):
            raise unsupported(
                node, "a correlated IN (subquery) is not supported", "Rewrite it as EXISTS"
            )
        right = self.query(sub, None)
        if len(right.fields) != 1:
            raise unsupported(node, "IN (subquery) must select exactly one column")
        alias = f"__sq{next(self._names)}"
        right = lp.SubqueryAlias(right, alias, ("v",))
        cond = exp.EQ(this=node.this, expression=lp.column("v", alias))
        return lp.Join(plan, right, "semi" if kind == "semi_in" else "anti_null_aware", cond)

    def exists_subquery(
        self, node: exp.Exists, plan: LogicalPlan
    ) -> tuple[LogicalPlan, exp.Expression | None]:
        """The plan of an EXISTS' subquery (FROM and local WHERE) and its correlation with
        ``plan`` as a join condition (None: uncorrelated); refuses set operations."""
        sub = node.this.this if isinstance(node.this, exp.Subquery) else node.this
        if not isinstance(sub, exp.Select):
            raise unsupported(node, "EXISTS over a set operation is not supported")
        return self._correlated(sub, plan.fields)

    def uncorrelated_exists(
        self, right: LogicalPlan, plan: LogicalPlan
    ) -> tuple[LogicalPlan, exp.Expression]:
        """``plan`` CROSS JOIN the one-row count of an uncorrelated EXISTS' subquery ``right``,
        and the EXISTS' value (the count is > 0): every outer row sees the same answer."""
        alias = f"__exn{next(self._names)}"
        counts = lp.Aggregate(
            right,
            (),
            (exp.Count(this=exp.Star()),),
            (Field(None, "n", aggregate_type("count_star", None), False),),
        )
        value = exp.GT(this=lp.column("n", alias), expression=exp.Literal.number(0))
        return lp.Join(plan, lp.SubqueryAlias(counts, alias), "cross"), exp.Paren(this=value)

    def outer_references(self, sub: exp.Expression) -> list[exp.Column]:
        """The columns of ``sub`` that name a table outside it (a correlated subquery). A column
        may name any FROM item of its own SELECT or of the SELECTs around it inside ``sub``: the
        columns of a derived table's or a UNION branch's own SELECT are theirs, not outer."""
        found: list[exp.Column] = []

        def visit(node: exp.Expression, visible: frozenset[str]) -> None:
            if isinstance(node, exp.Select):
                visible = visible | self._scope_aliases(node)
            for child in node.iter_expressions():
                if isinstance(child, exp.Column):
                    if child.table and child.table not in visible:
                        found.append(child)
                else:
                    visit(child, visible)

        visit(sub, frozenset())
        return found

    @staticmethod
    def _scope_aliases(sel: exp.Expression) -> set[str]:
        aliases: set[str] = set()
        from_ = sel.args.get("from_")
        items = ([from_.this] if from_ is not None else []) + [
            j.this for j in sel.args.get("joins") or ()
        ]
        while items:
            it = items.pop()
            if isinstance(it, exp.Subquery) and isinstance(it.this, (exp.Table, exp.Subquery)):
                if it.alias:
                    aliases.add(it.alias)
                else:  # a parenthesized join tree: the names inside are in scope
                    items.append(it.this)
                continue
            aliases.add(it.alias_or_name)
            items += [j.this for j in it.args.get("joins") or ()]
        return aliases

    def _correlated(self, sub: exp.Select, outer_fields: tuple[Field, ...]):
        """Plan of ``sub``'s FROM + local WHERE, and the correlated conjuncts as a join condition
        (inner columns re-qualified with a fresh alias so they cannot clash with the outer ones)."""
        for key in ("group", "having", "with_"):
            if sub.args.get(key) is not None:
                raise unsupported(
                    sub.args[key], f"{key.upper()} inside a correlated subquery is not supported"
                )
        inner_aliases = self._scope_aliases(sub)
        outer_quals = {f.qualifier for f in outer_fields}
        local, correlated = [], []
        where = sub.args.get("where")
        for c in conjuncts(where.this if where is not None else None):
            quals = qualifiers(c)
            if quals - inner_aliases:
                if not (quals - inner_aliases) <= outer_quals:
                    raise unsupported(
                        c, "a reference to a column that is neither inside nor outside the subquery"
                    )
                correlated.append(c)
            else:
                local.append(c)
        for e in sub.expressions:
            if qualifiers(e) - inner_aliases:
                raise unsupported(
                    e, "correlated references are only supported in the subquery's WHERE"
                )
        inner = self.from_clause(sub)
        if local:
            inner = self.where_clause(exp.Where(this=and_all(local)), inner)
        if not correlated:
            return inner, None
        alias = f"__sq{next(self._names)}"
        renamed = tuple(f"{f.qualifier}.{f.name}" for f in inner.fields)
        inner = lp.SubqueryAlias(inner, alias, renamed)
        cond = and_all([self._requalify(c, inner_aliases, alias) for c in correlated])
        return inner, cond

    @staticmethod
    def _requalify(e: exp.Expression, inner_aliases: set[str], alias: str) -> exp.Expression:
        def fix(n):
            if isinstance(n, exp.Column) and n.table in inner_aliases:
                return lp.column(f"{n.table}.{n.name}", alias)
            return n

        return e.copy().transform(fix)

    def replace_exists(self, e: exp.Expression, holder: list[LogicalPlan]) -> exp.Expression:
        """Each EXISTS in ``e`` (under OR, NOT or CASE, in the select list) becomes a mark of a
        LEFT JOIN with the subquery's distinct correlation keys (holder[0] is updated)."""
        if not any(isinstance(n, exp.Exists) or _in_subquery(n) for n in e.walk()):
            return e

        def fix(n):
            if isinstance(n, exp.Exists):
                holder[0], mark = exists_mark(self, n, holder[0])
                return mark
            if _in_subquery(n):
                holder[0], mark = in_mark(self, n, holder[0])
                return mark
            return n

        return e.copy().transform(fix)

    def _replace_scalar_subqueries(
        self, e: exp.Expression, holder: list[LogicalPlan]
    ) -> exp.Expression:
        """Each scalar subquery in ``e`` becomes a column of a joined plan (holder[0] is updated)."""
        if not any(
            isinstance(n, exp.Subquery) and not isinstance(n.parent, (exp.In, exp.Exists))
            for n in e.walk()
        ):
            return e

        def fix(n):
            if isinstance(n, exp.Subquery) and not isinstance(n.parent, (exp.In, exp.Exists)):
                holder[0], ref = self._scalar_subquery(n, holder[0])
                return ref
            return n

        return e.copy().transform(fix)

    def _scalar_subquery(
        self, node: exp.Subquery, plan: LogicalPlan
    ) -> tuple[LogicalPlan, exp.Expression]:
        sub = node.this
        if not isinstance(sub, exp.Select):
            raise unsupported(node, "a scalar subquery must be a SELECT")
        if len(sub.expressions) != 1:
            raise unsupported(node, "a scalar subquery must select exactly one column")
        inner_aliases = self._scope_aliases(sub)
        correlated = any(
            qualifiers(c) - inner_aliases
            for c in conjuncts(sub.args.get("where") and sub.args["where"].this)
        )
        alias = f"__sq{next(self._names)}"
        item = sub.expressions[0]
        item = item.this if isinstance(item, exp.Alias) else item
        if not correlated:
            right = self.query(sub, None)
            single = (
                isinstance(right, lp.Project)
                and isinstance(right.input, lp.Aggregate)
                and not right.input.group_by
            )
            if not single:
                raise unsupported(
                    node,
                    "a scalar subquery must return exactly one row; incview accepts aggregates without GROUP BY",
                    "Use an aggregate such as max(...) in the subquery",
                )
            right = lp.SubqueryAlias(right, alias, ("v",))
            return lp.Join(plan, right, "cross"), lp.column("v", alias)
        # correlated: SELECT agg(...) FROM ... WHERE local AND inner_expr = outer_expr
        if sub.args.get("group"):
            raise unsupported(
                node, "a correlated scalar subquery must compute one aggregate without GROUP BY"
            )
        aggs = find_aggregates(item)
        if aggs and (len(aggs) != 1 or aggs[0] is not item):
            raise unsupported(
                node,
                "a correlated scalar subquery must select a single aggregate call or an "
                "expression without aggregates",
                "e.g. (SELECT sum(x) FROM t WHERE t.k = o.k)",
            )
        if sub.args.get("distinct"):
            raise unsupported(node, "DISTINCT in a correlated scalar subquery")
        inner_plan, cond = self._correlated(sub, plan.fields)
        inner_keys, outer_keys = self._correlation_keys(cond)
        if not aggs:
            return self._single_value(node, plan, item, inner_plan, inner_keys, outer_keys, alias)
        call = aggregate_call(item)
        agg_expr = self._requalify_to(item, inner_plan)
        types = self.types_of(inner_keys, inner_plan.fields)
        arg_type = (
            self.types_of([self._requalify_to(call.arg, inner_plan)], inner_plan.fields)[0]
            if call.arg is not None
            else None
        )
        out = tuple(Field(None, f"k{i}", t) for i, t in enumerate(types)) + (
            Field(None, "v", aggregate_type(call.kind, arg_type)),
        )
        agg = lp.Aggregate(inner_plan, tuple(inner_keys), (agg_expr,), out)
        right = lp.SubqueryAlias(agg, alias)
        cond = and_all(
            [exp.EQ(this=o, expression=lp.column(f"k{i}", alias)) for i, o in enumerate(outer_keys)]
        )
        ref: exp.Expression = lp.column("v", alias)
        if call.kind in ("count", "count_star", "count_distinct"):
            ref = exp.Coalesce(this=ref, expressions=[exp.Literal.number(0)])
        return lp.Join(plan, right, "left", cond), ref

    @staticmethod
    def _correlation_keys(cond: exp.Expression) -> tuple[list, list]:
        """(inner keys, outer keys) of a correlated scalar subquery's equalities."""
        inner_keys, outer_keys = [], []
        for c in conjuncts(cond):
            if not isinstance(c, exp.EQ):
                raise unsupported(c, "a correlated scalar subquery may only correlate by equality")
            sides = [c.left, c.right]
            inner_side = [
                s
                for s in sides
                if qualifiers(s) and all(q.startswith("__sq") for q in qualifiers(s))
            ]
            if len(inner_side) != 1:
                raise unsupported(
                    c, "each correlation must compare an inner expression with an outer one"
                )
            inner_keys.append(inner_side[0])
            outer_keys.append(sides[1] if sides[0] is inner_side[0] else sides[0])
        return inner_keys, outer_keys

    def _single_value(self, node, plan, item, inner_plan, inner_keys, outer_keys, alias):
        """``(SELECT expr FROM ... WHERE inner = outer)``: a LEFT JOIN to, per correlation key,
        the number of rows and one value (their min: any will do when there is one row); more
        than one row is Postgres' error, raised in the errs stream for that outer row."""
        value = self._requalify_to(item, inner_plan)
        t = self.types_of([value], inner_plan.fields)[0]
        if not t.ordered:
            raise unsupported(node, f"a correlated scalar subquery selecting a {t} value")
        types = self.types_of(inner_keys, inner_plan.fields)
        count = exp.Count(this=exp.Star())
        out = tuple(Field(None, f"k{i}", typ) for i, typ in enumerate(types)) + (
            Field(None, "n", aggregate_type("count_star", None), False),
            Field(None, "v", aggregate_type("min", t)),
        )
        agg = lp.Aggregate(inner_plan, tuple(inner_keys), (count, exp.Min(this=value)), out)
        right = lp.SubqueryAlias(agg, alias)
        cond = and_all(
            [exp.EQ(this=o, expression=lp.column(f"k{i}", alias)) for i, o in enumerate(outer_keys)]
        )
        v: exp.Expression = lp.column("v", alias)
        if t != t.unconstrained() and t.kind.name == "NUMERIC":  # min drops numeric's typmod
            v = exp.Cast(this=v, to=exp.DataType.build(t.sql(), dialect="postgres"))
        too_many = exp.Anonymous(
            this=RAISE_FUNCTION,
            expressions=[exp.Literal.string(MORE_THAN_ONE_ROW), v.copy()],
        )
        ref = exp.Case(
            ifs=[exp.If(this=exp.GT(this=lp.column("n", alias), expression=exp.Literal.number(1)),
                        true=too_many)],
            default=v,
        )  # fmt: skip
        return lp.Join(plan, right, "left", cond), ref

    @staticmethod
    def _requalify_to(e: exp.Expression, inner_plan: LogicalPlan) -> exp.Expression:
        alias = inner_plan.fields[0].qualifier if inner_plan.fields else None

        def fix(n):
            if isinstance(n, exp.Column) and n.table and alias and not n.table.startswith("__sq"):
                return lp.column(f"{n.table}.{n.name}", alias)
            return n

        return e.copy().transform(fix)

    # -- GROUP BY -------------------------------------------------------------------------------
    def aggregate(
        self,
        plan: LogicalPlan,
        group: exp.Group | None,
        aggs: list[exp.Expression],
        groupings: list[exp.Grouping] = (),
    ):
        """GROUP BY (ROLLUP/CUBE/GROUPING SETS: ``engine.sql.grouping_sets``); returns the plan
        and a rewrite of expressions over its output."""
        expanded = expand_group(group)
        group_exprs = list(group.expressions) if group is not None else []
        if expanded is None and groupings:  # GROUPING in a plain GROUP BY: one set, all grouped
            expanded = (group_exprs, [tuple(range(len(group_exprs)))])
        if expanded is not None:
            group_exprs = expanded[0]
        unique_aggs: dict[str, exp.Expression] = {}
        for a in aggs:
            unique_aggs.setdefault(a.sql(), a)
        agg_list = list(unique_aggs.values())
        gtypes = self.types_of(group_exprs, plan.fields)
        out: list[Field] = []
        for i, (g, t) in enumerate(zip(group_exprs, gtypes, strict=True)):
            if isinstance(g, exp.Column):
                out.append(Field(g.table or None, g.name, t, self._nullable(g, plan.fields)))
            else:
                out.append(Field(None, f"__g{i}", t))
        for i, a in enumerate(agg_list):
            call = aggregate_call(a)
            arg_t = self.types_of([call.arg], plan.fields)[0] if call.arg is not None else None
            if call.filter is not None:
                self.types_of([call.filter], plan.fields)
            kind = call.kind
            moments = kind in MOMENT_KINDS
            if (
                (kind in ("sum", "avg") or moments)
                and arg_t is not None
                and not (
                    arg_t.is_numeric_category or (arg_t.kind.name == "INTERVAL" and not moments)
                )
            ):
                raise unsupported(a, f"{kind} of a {arg_t} value")
            out.append(
                Field(
                    None,
                    f"__agg{i}",
                    aggregate_type(kind, arg_t),
                    kind not in ("count", "count_star", "count_distinct"),
                )
            )
        grouping_map: dict[str, Field] = {}
        if expanded is None:
            node = lp.Aggregate(plan, tuple(group_exprs), tuple(agg_list), tuple(out))
        else:
            node, common, grouping_map = grouping_sets_plan(
                plan, group_exprs, expanded[1], agg_list, tuple(out), list(groupings)
            )
            out = list(common)
        group_map = {g.sql(): f for g, f in zip(group_exprs, out, strict=False)}
        agg_map = {
            a.sql(): f
            for a, f in zip(
                agg_list, out[len(group_exprs) : len(group_exprs) + len(agg_list)], strict=True
            )
        }
        agg_map.update(grouping_map)

        def rewrite(e: exp.Expression) -> exp.Expression:
            def fix(n):
                if isinstance(n, (exp.Ordered, exp.Identifier)):
                    return n  # "x NULLS FIRST" prints like "x": never replace the sort wrapper
                key = n.sql()
                if key in agg_map:
                    return agg_map[key].ref()
                if key in group_map and not isinstance(n, exp.Literal):
                    return group_map[key].ref()
                return n

            new = e.copy().transform(fix)
            allowed = {(f.qualifier, f.name) for f in out}
            for c in new.find_all(exp.Column):
                if (c.table or None, c.name) not in allowed:
                    raise unsupported(
                        c,
                        f"column {c.sql()} must appear in GROUP BY or be used in an aggregate function",
                    )
            return new

        return node, rewrite

    # -- windows --------------------------------------------------------------------------------
    def windows(self, plan: LogicalPlan, windows: list[exp.Window]):
        by_spec: dict[tuple, list[exp.Window]] = {}
        for w in windows:
            by_spec.setdefault(window_call(w).spec, []).append(w)
        mapping: dict[str, Field] = {}
        n = 0
        for group in by_spec.values():
            first = window_call(group[0])
            funcs, out = [], []
            for w in group:
                if w.sql() in mapping:
                    continue
                call = window_call(w)
                arg_t = self.types_of([call.arg], plan.fields)[0] if call.arg is not None else None
                self.types_of(
                    list(call.partition_by) + [k.expr for k in call.order_by], plan.fields
                )
                t = aggregate_type(call.kind, arg_t)
                f = Field(None, f"__w{n}", t)
                n += 1
                funcs.append(w)
                out.append(f)
                mapping[w.sql()] = f
            if funcs:
                plan = lp.Window(plan, first.partition_by, first.order_by, tuple(funcs), tuple(out))

        def rewrite(e: exp.Expression) -> exp.Expression:
            return e.copy().transform(
                lambda x: (
                    mapping[x.sql()].ref()
                    if isinstance(x, exp.Window) and x.sql() in mapping
                    else x
                )
            )

        return plan, rewrite

    # -- DISTINCT ON / ORDER BY / LIMIT ---------------------------------------------------------
    def _distinct_on(self, sel, plan, exprs, names, distinct) -> LogicalPlan:
        on = [self._qualify_free(e, plan.fields) for e in distinct.args["on"].expressions]
        order = tuple(
            SortKey(self._qualify_free(k.expr, plan.fields), k.descending, k.nulls_first)
            for k in sort_keys(sel.args.get("order"))
        )
        if sel.args.get("limit") is not None:
            raise unsupported(sel.args["limit"], "DISTINCT ON with LIMIT is not supported")
        order = tuple(k for k in order if k.expr.sql() not in {e.sql() for e in on})
        top = lp.TopK(plan, tuple(on), order, 1)
        return self._project(top, exprs, names)

    def _order_limit(self, node, plan: LogicalPlan, out_fields, pre) -> LogicalPlan:
        order = node.args.get("order")
        limit = node.args.get("limit")
        offset = node.args.get("offset")
        if limit is None and offset is None:
            return plan  # ORDER BY alone does not change a table's content
        if order is None:
            raise unsupported(
                limit or offset,
                "LIMIT/OFFSET without ORDER BY picks arbitrary rows",
                "Add an ORDER BY",
            )
        n = self._constant_int(limit.expression if limit is not None else None, "LIMIT")
        k = self._constant_int(offset.expression if offset is not None else None, "OFFSET") or 0
        keys = sort_keys(order)
        names = {f.name for f in out_fields}
        if all(
            isinstance(key.expr, exp.Column) and not key.expr.table and key.expr.name in names
            for key in keys
        ):
            return lp.TopK(
                plan,
                (),
                tuple(
                    SortKey(lp.column(key.expr.name), key.descending, key.nulls_first)
                    for key in keys
                ),
                n,
                k,
            )
        if pre is None:
            raise unsupported(order, "ORDER BY must name output columns here")
        inner, exprs, onames, _ = pre
        alias_map = {nm: e for nm, e in zip(onames, exprs, strict=True)}

        def fix(x):
            if isinstance(x, exp.Column) and not x.table and x.name in alias_map:
                return alias_map[x.name].copy()
            return x

        keys = tuple(
            SortKey(key.expr.copy().transform(fix), key.descending, key.nulls_first) for key in keys
        )
        self.types_of([key.expr for key in keys], inner.fields)
        return self._project(lp.TopK(inner, (), keys, n, k), exprs, onames)

    @staticmethod
    def _qualify_free(e: exp.Expression, fields: tuple[Field, ...]) -> exp.Expression:
        """Qualify bare column names that name exactly one of ``fields`` (qualify skips some spots)."""

        def fix(n):
            if isinstance(n, exp.Column) and not n.table:
                matches = [f for f in fields if f.name == n.name]
                if len(matches) == 1:
                    return matches[0].ref()
            return n

        return e.copy().transform(fix)

    @staticmethod
    def _constant_int(e: exp.Expression | None, what: str) -> int | None:
        if e is None:
            return None
        if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
            return int(e.this)
        if isinstance(e, exp.Null):
            return None
        raise unsupported(e, f"{what} must be an integer constant")

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
