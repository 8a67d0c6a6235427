"""WHERE and its subqueries: conjuncts with EXISTS / IN / NOT EXISTS / NOT IN subqueries become
semi and anti joins (correlated ones decorrelated on their equality keys), scalar subqueries
become cross or left joins with an aggregate (more than one row: an error, as in Postgres).

A part of the logical plan builder (``plan_builder._Builder``).
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.calls import aggregate_call, find_aggregates
from engine.sql.exists_mark import exists_mark
from engine.sql.functions import MORE_THAN_ONE_ROW, RAISE_FUNCTION
from engine.sql.in_mark import in_mark
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.parse import unsupported
from engine.sql.plan_expressions import and_all, conjuncts, qualifiers
from engine.sql.result_types import aggregate_type


def _in_subquery(n: exp.Expression) -> bool:
    return isinstance(n, exp.In) and n.args.get("query") is not None


class SubqueryBuilding:
    """``_Builder``'s WHERE and subqueries."""

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
