"""Projection pushdown: every node computes, and every Scan reads, only the columns its
ancestors need.

Walking from the root (whose output columns are kept exactly, in order) down, each node is told
which of its fields are needed: Projects drop unused expressions, Aggregates unused aggregate
calls (every group key stays: it defines the groups), Windows unused functions (a Window left
with none disappears), TopK its rank column when unused, SubqueryAlias narrows its
``column_names`` to what survives below, joins ask each side for the needed columns plus the
ON condition's, semi/anti joins ask the right side for the condition's columns only, and a Scan
records the surviving table columns in ``Scan.projection`` (what the source delivers, in the
table's column order). Distinct and set operations need all their columns (they compare whole
rows); a node shared by several parents (a CTE used twice) is asked for all its columns. At least
one column is kept everywhere (a zero-column row is legal SQL but a poor thing to ship).
This rule must not reorder or rename the plan's output.

Example::

    Aggregate: groupBy=[[]], aggr=[[COUNT(*)]]       Aggregate: groupBy=[[]], aggr=[[COUNT(*)]]
      Inner Join: "e"."b" = "n"."a"                    Inner Join: "e"."b" = "n"."a"
        SubqueryAlias: e                        ->       SubqueryAlias: e
          TableScan: example_table                         TableScan: example_table projection=[b]
        SubqueryAlias: n                                 SubqueryAlias: n
          TableScan: numbers_table                         TableScan: numbers_table projection=[a]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.rules.scope import FieldKey, is_bare_column, key, parent_counts, resolve

Needed = set[FieldKey] | None  # None: every field


def pushdown_projections(plan: LogicalPlan) -> LogicalPlan:
    """Prune unused columns top-down (see the module docstring)."""
    return _Prune(plan).prune(plan, None)


def columns_of(exprs: Iterable[exp.Expression], fields: tuple[Field, ...]) -> Needed:
    """Keys of the ``fields`` the expressions reference; None if one does not resolve."""
    out: set[FieldKey] = set()
    for e in exprs:
        for c in e.find_all(exp.Column):
            if isinstance(c.this, exp.Star):
                continue
            i = resolve(c, fields)
            if i is None:
                return None
            out.add(key(fields[i]))
    return out


def _union(a: Needed, b: Needed) -> Needed:
    return None if a is None or b is None else a | b


def _within(needed: Needed, fields: tuple[Field, ...]) -> Needed:
    if needed is None:
        return None
    keys = {key(f) for f in fields}
    return needed & keys


def _narrow(plan: LogicalPlan, needed: Needed) -> LogicalPlan:
    """``plan`` under a Project of the needed fields when it outputs more (a Filter or a join
    passes on the columns only its predicate or condition read)."""
    fields = plan.fields
    keys = [key(f) for f in fields]
    if needed is None or len(set(keys)) != len(keys):
        return plan
    keep = tuple(f for f, k in zip(fields, keys, strict=True) if k in needed) or fields[:1]
    if len(keep) == len(fields):
        return plan
    return lp.Project(plan, tuple(f.ref() for f in keep), keep)


class _Prune:
    def __init__(self, plan: LogicalPlan) -> None:
        self.parents = parent_counts(plan)
        self.shared: dict[int, LogicalPlan] = {}
        self._keep: list[LogicalPlan] = []

    def prune(self, node: LogicalPlan, needed: Needed) -> LogicalPlan:
        if self.parents.get(id(node), 0) > 1:
            if id(node) not in self.shared:
                self._keep.append(node)
                self.shared[id(node)] = self.dispatch(node, None)
            return self.shared[id(node)]
        return self.dispatch(node, needed)

    def input(self, node: LogicalPlan, needed: Needed) -> LogicalPlan:
        """``node`` pruned as the input of a collection that stores whole rows (a join, a top-k):
        under a Project of the needed fields when it outputs more."""
        return _narrow(self.prune(node, needed), needed)

    def dispatch(self, node: LogicalPlan, needed: Needed) -> LogicalPlan:
        method = getattr(self, "p_" + type(node).__name__, None)
        if method is None:
            kids = [self.prune(c, None) for c in node.children]
            return node.with_children(*kids) if kids else node
        return method(node, needed)

    # -- leaves ----------------------------------------------------------------------------------
    def p_Scan(self, node: lp.Scan, needed: Needed) -> LogicalPlan:
        if needed is None:
            return node
        available = (
            list(node.projection)
            if node.projection is not None
            else list(range(len(node.table_fields)))
        )
        keep = [i for i in available if key(node.table_fields[i]) in needed]
        if not keep:
            keep = available[:1]
        return replace(node, projection=tuple(keep))

    def p_Values(self, node: lp.Values, needed: Needed) -> LogicalPlan:
        return node

    # -- stateless -------------------------------------------------------------------------------
    def p_Filter(self, node: lp.Filter, needed: Needed) -> LogicalPlan:
        need_in = _union(needed, columns_of([node.predicate], node.input.fields))
        return replace(node, input=self.prune(node.input, need_in))

    def p_Project(self, node: lp.Project, needed: Needed) -> LogicalPlan:
        if needed is None:
            keep = list(range(len(node.exprs)))
        else:
            keep = [i for i, f in enumerate(node.out_fields) if key(f) in needed]
            if not keep and node.exprs:
                bare = [i for i, e in enumerate(node.exprs) if is_bare_column(e)]
                keep = (bare or [0])[:1]
        exprs = tuple(node.exprs[i] for i in keep)
        out = tuple(node.out_fields[i] for i in keep)
        need_in = columns_of(exprs, node.input.fields)
        return replace(node, input=self.prune(node.input, need_in), exprs=exprs, out_fields=out)

    def p_SubqueryAlias(self, node: lp.SubqueryAlias, needed: Needed) -> LogicalPlan:
        in_fields = node.input.fields
        in_keys = [key(f) for f in in_fields]
        if needed is None or len(set(in_keys)) != len(in_keys):
            return replace(node, input=self.prune(node.input, None))
        need_in = {in_keys[i] for i, f in enumerate(node.fields) if key(f) in needed}
        new_input = self.prune(node.input, need_in)
        if node.column_names is None:
            return replace(node, input=new_input)
        position = {k: i for i, k in enumerate(in_keys)}
        try:
            names = tuple(node.column_names[position[key(f)]] for f in new_input.fields)
        except KeyError:
            return replace(node, input=self.prune(node.input, None))
        return replace(node, input=new_input, column_names=names)

    def p_Distinct(self, node: lp.Distinct, needed: Needed) -> LogicalPlan:
        return replace(node, input=self.prune(node.input, None))

    def p_SetOperation(self, node: lp.SetOperation, needed: Needed) -> LogicalPlan:
        return replace(node, left=self.prune(node.left, None), right=self.prune(node.right, None))

    # -- joins -----------------------------------------------------------------------------------
    def p_Join(self, node: lp.Join, needed: Needed) -> LogicalPlan:
        lf, rf = node.left.fields, node.right.fields
        cond = [node.condition] if node.condition is not None else []
        cond_l = columns_of(cond, lf + rf)
        if cond_l is None:
            return node.with_children(self.prune(node.left, None), self.prune(node.right, None))
        need_l = _union(_within(needed, lf), _within(cond_l, lf))
        if node.kind in lp.SEMI_KINDS:
            need_r = _within(cond_l, rf)
        else:
            need_r = _union(_within(needed, rf), _within(cond_l, rf))
        return node.with_children(self.input(node.left, need_l), self.input(node.right, need_r))

    # -- stateful --------------------------------------------------------------------------------
    def p_Aggregate(self, node: lp.Aggregate, needed: Needed) -> LogicalPlan:
        ng = len(node.group_by)
        if needed is None:
            keep = list(range(len(node.aggregates)))
        else:
            keep = [
                i for i in range(len(node.aggregates)) if key(node.out_fields[ng + i]) in needed
            ]
            if not keep and node.aggregates:
                keep = [0]
        aggs = tuple(node.aggregates[i] for i in keep)
        out = node.out_fields[:ng] + tuple(node.out_fields[ng + i] for i in keep)
        need_in = columns_of(list(node.group_by) + list(aggs), node.input.fields)
        return replace(node, input=self.prune(node.input, need_in), aggregates=aggs, out_fields=out)

    def p_TopK(self, node: lp.TopK, needed: Needed) -> LogicalPlan:
        rank = node.rank_field
        if needed is not None and rank is not None and key(rank) not in needed:
            rank = None
        keys = list(node.partition_by) + [k.expr for k in node.order_by]
        need_in = _union(_within(needed, node.input.fields), columns_of(keys, node.input.fields))
        return replace(node, input=self.input(node.input, need_in), rank_field=rank)

    def p_Window(self, node: lp.Window, needed: Needed) -> LogicalPlan:
        in_fields = node.input.fields
        if needed is None:
            keep = list(range(len(node.functions)))
        else:
            keep = [i for i, f in enumerate(node.out_fields) if key(f) in needed]
            if not keep:
                return self.prune(node.input, _within(needed, in_fields))
        funcs = tuple(node.functions[i] for i in keep)
        out = tuple(node.out_fields[i] for i in keep)
        keys = list(node.partition_by) + [k.expr for k in node.order_by] + list(funcs)
        need_in = _union(_within(needed, in_fields), columns_of(keys, in_fields))
        return replace(node, input=self.prune(node.input, need_in), functions=funcs, out_fields=out)
