"""Implied filters across equi-joins: ``e.b > 30 AND e.b = n.a`` also means ``n.a > 30``.

For every join equality ``l.x = r.y`` between two columns of the same type, the simple
single-column predicates known to hold on one side (comparisons with constants, IN lists of
constants, BETWEEN, LIKE with a constant, IS NOT NULL; collected from the Filters below, through
SubqueryAlias, Project, Distinct, TopK, Window, group keys of Aggregates and inner joins) are
copied onto the other column, as a Filter over the other input; ``pushdown_filters`` then moves
them down. Only where results cannot change:

* inner (and semi) joins: both directions - a row whose key fails the predicate has no partner;
* LEFT and anti joins: only from the left (its filters and its left-only ON conjuncts) into the
  right input - dropping right rows that can never match changes nothing, while every left row
  must survive; RIGHT joins: the mirror;
* FULL and NOT IN (anti_null_aware) joins: never (the latter's NULL semantics need every right
  row).

A predicate already implied on the receiving side is not added again, so the rule is idempotent.
It must not invent predicates that are not implied.

Example::

    Inner Join: "e"."b" = "n"."a"                   Inner Join: "e"."b" = "n"."a"
      SubqueryAlias: e                                SubqueryAlias: e
        Filter: "example_table"."b" > 30       ->       Filter: "example_table"."b" > 30
          TableScan: example_table                        TableScan: example_table
      SubqueryAlias: n                                Filter: "n"."a" > 30
        TableScan: numbers_table                        SubqueryAlias: n
                                                          TableScan: numbers_table
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.rules.pushdown_filters import equi_columns, side_of
from engine.sql.rules.scope import (
    and_all,
    conjuncts,
    dedupe,
    has_subquery_or_aggregate,
    is_bare_column,
    resolve,
    substitute,
    transform_up,
)


def infer_join_filters(plan: LogicalPlan) -> LogicalPlan:
    """Add the filters implied across join equalities (see the module docstring)."""
    analysis = _Implied()

    def visit(node: LogicalPlan) -> LogicalPlan:
        if isinstance(node, lp.Join):
            return _infer(node, analysis)
        return node

    return transform_up(plan, visit)


def simple_column(p: exp.Expression) -> exp.Column | None:
    """The one column of a single-column predicate against constants, else None."""
    cols = list(p.find_all(exp.Column))
    if len(cols) != 1 or has_subquery_or_aggregate(p):
        return None
    col = cols[0]
    if isinstance(p, (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Like, exp.ILike)):
        if col is p.left or col is p.right:
            return col
        return None
    if isinstance(p, exp.In) and p.args.get("query") is None and p.this is col:
        return col
    if isinstance(p, exp.Between) and p.this is col:
        return col
    if (
        isinstance(p, exp.Not)
        and isinstance(p.this, exp.Is)
        and p.this.this is col
        and isinstance(p.this.expression, exp.Null)
    ):
        return col
    return None


class _Implied:
    """Simple predicates known to hold on every output row of a node (over its fields)."""

    def __init__(self) -> None:
        self.memo: dict[int, tuple[LogicalPlan, list[exp.Expression]]] = {}

    def of(self, node: LogicalPlan) -> list[exp.Expression]:
        hit = self.memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = dedupe(self._compute(node))
        self.memo[id(node)] = (node, out)
        return out

    @staticmethod
    def _simple(preds: list[exp.Expression]) -> list[exp.Expression]:
        return [p for p in preds if simple_column(p) is not None]

    @staticmethod
    def _remap(
        preds: list[exp.Expression], src: tuple[Field, ...], mapping: dict[int, Field]
    ) -> list[exp.Expression]:
        """Predicates over ``src`` rewritten onto ``mapping[src position]`` (others dropped)."""
        out = []
        for p in preds:
            col = simple_column(p)
            i = resolve(col, src) if col is not None else None
            if i is None or i not in mapping:
                continue
            refs = [mapping.get(j, f).ref() for j, f in enumerate(src)]
            s = substitute(p, src, refs)
            if s is not None:
                out.append(s)
        return out

    def _compute(self, node: LogicalPlan) -> list[exp.Expression]:
        if isinstance(node, lp.Filter):
            return self._simple(conjuncts(node.predicate)) + self.of(node.input)
        if isinstance(node, lp.SubqueryAlias):
            src = node.input.fields
            return self._remap(self.of(node.input), src, dict(enumerate(node.fields)))
        if isinstance(node, lp.Project):
            mapping = {}
            for e, f in zip(node.exprs, node.fields, strict=True):
                j = resolve(e, node.input.fields) if is_bare_column(e) else None
                if j is not None:
                    mapping.setdefault(j, f)
            return self._remap(self.of(node.input), node.input.fields, mapping)
        if isinstance(node, (lp.Distinct, lp.TopK, lp.Window)):
            return self.of(node.input)
        if isinstance(node, lp.Aggregate):
            mapping = {}
            for g, f in zip(node.group_by, node.fields, strict=False):
                j = resolve(g, node.input.fields) if is_bare_column(g) else None
                if j is not None:
                    mapping.setdefault(j, f)
            return self._remap(self.of(node.input), node.input.fields, mapping)
        if isinstance(node, lp.Join):
            lf, rf = node.left.fields, node.right.fields
            on = self._simple(conjuncts(node.condition))
            if node.kind in ("inner", "cross"):
                return self.of(node.left) + self.of(node.right) + on
            if node.kind == "left":
                return list(self.of(node.left))
            if node.kind == "right":
                return list(self.of(node.right))
            if node.kind == "semi":
                return self.of(node.left) + [c for c in on if side_of(c, lf, rf) == "left"]
            if node.kind in ("anti", "anti_null_aware"):
                return list(self.of(node.left))
        return []


def _infer(node: lp.Join, analysis: _Implied) -> LogicalPlan:
    kind = node.kind
    if kind not in ("inner", "semi", "left", "anti", "right") or node.condition is None:
        return node
    lf, rf = node.left.fields, node.right.fields
    on = conjuncts(node.condition)
    left_known = list(analysis.of(node.left))
    right_known = list(analysis.of(node.right))
    if kind in ("left", "anti", "semi"):
        left_known += [c for c in on if side_of(c, lf, rf) == "left" and simple_column(c)]
    if kind == "right":
        right_known += [c for c in on if side_of(c, lf, rf) == "right" and simple_column(c)]
    to_left: list[exp.Expression] = []
    to_right: list[exp.Expression] = []
    for c in on:
        pair = equi_columns(c, lf, rf)
        if pair is None:
            continue
        li, ri = pair
        if lf[li].type != rf[ri].type:
            continue
        if kind in ("inner", "semi", "left", "anti"):
            to_right += _copy(left_known, lf, li, rf, ri)
        if kind in ("inner", "semi", "right"):
            to_left += _copy(right_known, rf, ri, lf, li)
    have_l = {p.sql() for p in left_known}
    have_r = {p.sql() for p in right_known}
    new_l = [p for p in dedupe(to_left) if p.sql() not in have_l]
    new_r = [p for p in dedupe(to_right) if p.sql() not in have_r]
    if not new_l and not new_r:
        return node
    left = lp.Filter(node.left, and_all(new_l)) if new_l else node.left
    right = lp.Filter(node.right, and_all(new_r)) if new_r else node.right
    return replace(node, left=left, right=right)


def _copy(
    known: list[exp.Expression],
    src: tuple[Field, ...],
    si: int,
    dst: tuple[Field, ...],
    di: int,
) -> list[exp.Expression]:
    out = []
    for p in known:
        col = simple_column(p)
        if col is None or resolve(col, src) != si:
            continue
        if isinstance(p, exp.Not) and not dst[di].nullable:
            continue  # IS NOT NULL of a NOT NULL column says nothing
        refs = [f.ref() for f in src]
        refs[si] = dst[di].ref()
        s = substitute(p, src, refs)
        if s is not None:
            out.append(s)
    return out
