"""GROUP BY (grouping sets, aggregates, HAVING), window functions, DISTINCT ON, and ORDER BY ...
LIMIT/OFFSET as a top-k.

A part of the logical plan builder (``plan_builder._Builder``).
"""

from __future__ import annotations

from sqlglot import exp

from engine.dataflow.aggregates import MOMENT_KINDS
from engine.sql import logical_plan as lp
from engine.sql.calls import aggregate_call, sort_keys, window_call
from engine.sql.grouping_sets import expand_group, grouping_sets_plan
from engine.sql.logical_plan import Field, LogicalPlan, SortKey
from engine.sql.parse import unsupported
from engine.sql.result_types import aggregate_type


class GroupingBuilding:
    """``_Builder``'s GROUP BY, windows, DISTINCT ON / ORDER BY / LIMIT."""

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
