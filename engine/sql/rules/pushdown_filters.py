"""Predicate pushdown: split filter conjuncts and move each as far down as its columns allow.

A conjunct travels through Project (its columns replaced by the projected expressions),
SubqueryAlias (re-qualified to the input's fields), Distinct, union/except/intersect (into both
sides, when the branch column types match), into the matching side of inner and cross joins
(a conjunct over both sides of a cross join makes it an inner join with that condition), below
Aggregate only when it references group keys alone, below TopK and Window only when it references
partition keys alone. Outer joins are handled conservatively: above a LEFT join only conjuncts on
the left side go down (never into the NULL-padded right side); ON conjuncts that reference only
the right side of a LEFT join go into the right input (and the mirror for RIGHT joins); a FULL
join stops everything. Semi joins accept left-only and right-only ON conjuncts on their sides,
anti joins right-only ones, NOT IN (anti_null_aware) joins nothing: its NULL semantics depend
on every right row. Each equi-join key column of an inner join (and the non-preserved side of an
outer join) gets ``IS NOT NULL`` on its side: a NULL key never matches.

At a Scan the conjuncts stay above it as a Filter (the running phase sees every change) AND,
when Postgres can evaluate them without raising (comparisons, IS NULL, IN lists, BETWEEN, LIKE
of columns and constants), they are recorded in ``Scan.filters`` over the table's bare column
names: the population COPY's WHERE (Epsio's ``partial_filters``). Nodes shared by several
parents (a CTE used twice) receive nothing: the filter stays above each use. This rule must not
change results.

Example (seed 000)::

    Aggregate: groupBy=[[]], aggr=[[COUNT(*)]]             Aggregate: groupBy=[[]], aggr=[[COUNT(*)]]
      Filter: "e"."b" > 30                                   Inner Join: "e"."b" = "n"."a"
        Inner Join: "e"."b" = "n"."a"                          SubqueryAlias: e
          SubqueryAlias: e                          ->           Filter: "example_table"."b" IS NOT NULL
            TableScan: example_table                                     AND "example_table"."b" > 30
          SubqueryAlias: n                                         TableScan: example_table,
            TableScan: numbers_table                                 partial_filters=["b" IS NOT NULL, "b" > 30]
                                                               SubqueryAlias: n
                                                                 Filter: "numbers_table"."a" IS NOT NULL
                                                                   TableScan: numbers_table, partial_filters=[...]
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.population_filter import time_constant
from engine.sql.rules.scope import (
    and_all,
    conjuncts,
    dedupe,
    has_subquery_or_aggregate,
    is_bare_column,
    parent_counts,
    resolve,
    substitute,
)


def pushdown_filters(plan: LogicalPlan) -> LogicalPlan:
    """Push every Filter conjunct as deep as it may go (see the module docstring)."""
    return _Pushdown(plan).run()


def side_of(e: exp.Expression, left: tuple[Field, ...], right: tuple[Field, ...]) -> str:
    """'left', 'right', 'both', 'none' (no columns) or 'unknown' (unresolvable/ambiguous)."""
    cols = list(e.find_all(exp.Column))
    if not cols:
        return "none"
    if has_subquery_or_aggregate(e):
        return "unknown"
    sides = set()
    for c in cols:
        in_l, in_r = resolve(c, left) is not None, resolve(c, right) is not None
        if in_l == in_r:
            return "unknown"
        sides.add("left" if in_l else "right")
    return sides.pop() if len(sides) == 1 else "both"


def equi_columns(
    c: exp.Expression, left: tuple[Field, ...], right: tuple[Field, ...]
) -> tuple[int, int] | None:
    """(left position, right position) if ``c`` is ``left_column = right_column``."""
    if not isinstance(c, exp.EQ) or not (is_bare_column(c.left) and is_bare_column(c.right)):
        return None
    a, b = c.left, c.right
    la, rb = resolve(a, left), resolve(b, right)
    if la is not None and rb is not None and resolve(a, right) is None and resolve(b, left) is None:
        return la, rb
    lb, ra = resolve(b, left), resolve(a, right)
    if lb is not None and ra is not None and resolve(b, right) is None and resolve(a, left) is None:
        return lb, ra
    return None


def not_null(f: Field) -> exp.Expression:
    return exp.Not(this=exp.Is(this=f.ref(), expression=exp.Null()))


_SCAN_SAFE = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Paren,
    exp.And,
    exp.Or,
    exp.Not,
    exp.EQ,
    exp.NEQ,
    exp.LT,
    exp.LTE,
    exp.GT,
    exp.GTE,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Neg,
    exp.DataType,
)


def scan_safe(e: exp.Expression) -> bool:
    """Can Postgres evaluate ``e`` in the population COPY's WHERE without raising?"""
    if isinstance(e, exp.Add | exp.Sub):  # a date literal +- an interval literal only
        return time_constant(e) is not None
    if isinstance(e, exp.Cast):
        return isinstance(e.this, (exp.Literal, exp.Null))
    if not isinstance(e, _SCAN_SAFE):
        return False
    if isinstance(e, exp.In) and e.args.get("query") is not None:
        return False
    return all(scan_safe(c) for c in e.iter_expressions())


def _untyped(e: exp.Expression) -> bool:
    """A string literal or NULL: its type depends on where it is written (keep it in place)."""
    return isinstance(e, exp.Null) or (isinstance(e, exp.Literal) and e.is_string)


class _Pushdown:
    def __init__(self, plan: LogicalPlan) -> None:
        self.plan = plan
        self.parents = parent_counts(plan)
        self.shared: dict[int, LogicalPlan] = {}
        self._keep: list[LogicalPlan] = []

    def run(self) -> LogicalPlan:
        return self.push(self.plan, [])

    @staticmethod
    def wrap(node: LogicalPlan, preds: list[exp.Expression]) -> LogicalPlan:
        preds = dedupe(preds)
        return lp.Filter(node, and_all(preds)) if preds else node

    def push(self, node: LogicalPlan, preds: list[exp.Expression]) -> LogicalPlan:
        """``node`` rebuilt with ``preds`` (over ``node.fields``) applied as deep as possible."""
        if self.parents.get(id(node), 0) > 1:
            if id(node) not in self.shared:
                self._keep.append(node)
                self.shared[id(node)] = self.dispatch(node, [])
            return self.wrap(self.shared[id(node)], preds)
        return self.dispatch(node, preds)

    def dispatch(self, node: LogicalPlan, preds: list[exp.Expression]) -> LogicalPlan:
        method = getattr(self, "p_" + type(node).__name__, None)
        if method is None:  # unknown node: push nothing into it, still visit its children
            kids = [self.push(c, []) for c in node.children]
            return self.wrap(node.with_children(*kids) if kids else node, preds)
        return method(node, preds)

    # -- stateless -------------------------------------------------------------------------------
    def p_Filter(self, node: lp.Filter, preds):
        return self.push(node.input, dedupe(preds + conjuncts(node.predicate)))

    def p_Project(self, node: lp.Project, preds):
        down, stay = [], []
        for p in preds:
            s = None
            if p.find(exp.Column) is not None and not any(
                has_subquery_or_aggregate(node.exprs[i]) or _untyped(node.exprs[i])
                for c in p.find_all(exp.Column)
                if (i := resolve(c, node.fields)) is not None
            ):
                s = substitute(p, node.fields, list(node.exprs))
            (down if s is not None else stay).append(s if s is not None else p)
        return self.wrap(replace(node, input=self.push(node.input, down)), stay)

    def p_SubqueryAlias(self, node: lp.SubqueryAlias, preds):
        refs = [f.ref() for f in node.input.fields]
        down, stay = [], []
        for p in preds:
            s = substitute(p, node.fields, refs)
            (down if s is not None else stay).append(s if s is not None else p)
        return self.wrap(replace(node, input=self.push(node.input, down)), stay)

    def p_Distinct(self, node: lp.Distinct, preds):
        return replace(node, input=self.push(node.input, preds))

    # -- leaves ----------------------------------------------------------------------------------
    def p_Scan(self, node: lp.Scan, preds):
        preds = dedupe(preds)
        if not preds:
            return node
        table_refs = [lp.column(f.name) for f in node.fields]
        scan_filters = []
        for p in preds:
            if p.find(exp.Column) is not None and scan_safe(p):
                s = substitute(p, node.fields, table_refs)
                if s is not None:
                    scan_filters.append(s)
        scan_filters += node.filters
        return self.wrap(replace(node, filters=tuple(dedupe(scan_filters))), preds)

    def p_Values(self, node: lp.Values, preds):
        return self.wrap(node, preds)

    # -- joins -----------------------------------------------------------------------------------
    def p_Join(self, node: lp.Join, preds):
        lf, rf = node.left.fields, node.right.fields
        kind = node.kind
        to_left: list[exp.Expression] = []
        to_right: list[exp.Expression] = []
        stay: list[exp.Expression] = []
        cond: list[exp.Expression] = []
        above = {"left": to_left}
        if kind in ("inner", "cross"):
            above = {"left": to_left, "right": to_right, "both": cond}
        elif kind == "right":
            above = {"right": to_right}
        elif kind == "full":
            above = {}
        for p in preds:
            above.get(side_of(p, lf, rf), stay).append(p)
        on_routes: dict[str, list] = {}
        if kind in ("inner", "cross"):
            on_routes = {"left": to_left, "right": to_right}
        elif kind in ("left", "anti"):
            on_routes = {"right": to_right}
        elif kind == "right":
            on_routes = {"left": to_left}
        elif kind == "semi":
            on_routes = {"left": to_left, "right": to_right}
        kept_on: list[exp.Expression] = []
        for c in conjuncts(node.condition):
            on_routes.get(side_of(c, lf, rf), kept_on).append(c)
        # NULL keys never match an equality: the sides that may drop them
        null_sides = {
            "inner": (True, True),
            "cross": (True, True),
            "semi": (True, True),
            "left": (False, True),
            "anti": (False, True),
            "right": (True, False),
        }.get(kind, (False, False))
        # key columns by position, so the result does not depend on the conditions' order
        # (a second optimize pass after order_joins must give the same plan)
        null_l: set[int] = set()
        null_r: set[int] = set()
        for c in kept_on + cond:
            pair = equi_columns(c, lf, rf)
            if pair is None:
                continue
            if null_sides[0] and lf[pair[0]].nullable:
                null_l.add(pair[0])
            if null_sides[1] and rf[pair[1]].nullable:
                null_r.add(pair[1])
        infer_l = [not_null(lf[i]) for i in sorted(null_l)]
        infer_r = [not_null(rf[i]) for i in sorted(null_r)]
        left = self.push(node.left, dedupe(infer_l + to_left))
        right = self.push(node.right, dedupe(infer_r + to_right))
        condition = and_all(dedupe(kept_on + cond))
        new_kind = kind
        if kind == "cross" and condition is not None:
            new_kind = "inner"
        joined = replace(node, left=left, right=right, kind=new_kind, condition=condition)
        return self.wrap(joined, stay)

    # -- stateful --------------------------------------------------------------------------------
    def p_Aggregate(self, node: lp.Aggregate, preds):
        ng = len(node.group_by)
        down, stay = [], []
        for p in preds:
            idx = [resolve(c, node.fields) for c in p.find_all(exp.Column)]
            if ng and idx and all(i is not None and i < ng for i in idx):
                s = substitute(p, node.fields[:ng], list(node.group_by))
                if s is not None and not has_subquery_or_aggregate(s):
                    down.append(s)
                    continue
            stay.append(p)
        return self.wrap(replace(node, input=self.push(node.input, down)), stay)

    def _partition_preds(self, node, partition_by, preds):
        fields = node.input.fields
        keys = {resolve(e, fields) for e in partition_by if is_bare_column(e)} - {None}
        down, stay = [], []
        for p in preds:
            idx = [resolve(c, fields) for c in p.find_all(exp.Column)]
            ok = idx and all(i is not None and i in keys for i in idx)
            # a column named like an appended (rank/window) field must not leak below
            ok = ok and all(resolve(c, node.fields) is not None for c in p.find_all(exp.Column))
            (down if ok else stay).append(p)
        return down, stay

    def p_TopK(self, node: lp.TopK, preds):
        down, stay = self._partition_preds(node, node.partition_by, preds)
        return self.wrap(replace(node, input=self.push(node.input, down)), stay)

    def p_Window(self, node: lp.Window, preds):
        down, stay = self._partition_preds(node, node.partition_by, preds)
        return self.wrap(replace(node, input=self.push(node.input, down)), stay)

    def p_SetOperation(self, node: lp.SetOperation, preds):
        lf, rf = node.left.fields, node.right.fields
        to_l, to_r, stay = [], [], []
        for p in preds:
            idx = [resolve(c, node.fields) for c in p.find_all(exp.Column)]
            if (
                idx
                and all(i is not None and lf[i].type == rf[i].type for i in idx)
                and not has_subquery_or_aggregate(p)
            ):
                sl = substitute(p, node.fields, [f.ref() for f in lf])
                sr = substitute(p, node.fields, [f.ref() for f in rf])
                if sl is not None and sr is not None:
                    to_l.append(sl)
                    to_r.append(sr)
                    continue
            stay.append(p)
        new = replace(node, left=self.push(node.left, to_l), right=self.push(node.right, to_r))
        return self.wrap(new, stay)
