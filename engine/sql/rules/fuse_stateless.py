"""Fuse chains of stateless nodes so the physical planner emits one step where it would emit
several: ``Filter(Filter(x))`` becomes one Filter (conjuncts ANDed, repeats dropped),
``Project(Project(x))`` one Project (the inner expressions substituted into the outer ones), and
``Filter(Project(x))`` becomes ``Project(Filter(x))`` when the predicate only reads columns the
Project passes through unchanged (bare columns or constants), which lets the Filter meet and
merge with a Filter below.

Refused: fusing into a node shared by several parents (a CTE used twice: it would be computed
twice), and substituting an inner expression that is not a bare column or constant into an
outer Project that references it more than once (it would be evaluated twice per row).

What remains is fused at build time anyway: ``engine.dataflow.graph.Dataflow._fuse`` turns
every chain of stateless single-input collections (filter, map) into one
``FusedChainCollection``, a synchronous callback (Epsio's "synchronous transfer"); this rule
makes those chains shorter and lets EXPLAIN show the logical shape that is actually run.

Example::

    Filter: "t"."b" = 1                          Filter: "t"."a" > 1 AND "t"."b" = 1
      Filter: "t"."a" > 1                  ->      TableScan: t
        TableScan: t
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.scope import (
    and_all,
    conjuncts,
    dedupe,
    has_subquery_or_aggregate,
    is_bare_column,
    parent_counts,
    resolve,
    substitute,
    transform_up,
)


def fuse_stateless(plan: LogicalPlan) -> LogicalPlan:
    """Merge adjacent Filters and Projects (see the module docstring)."""
    shared: set[int] = set()
    counts = parent_counts(plan)

    def is_shared(n: LogicalPlan) -> bool:
        return counts.get(id(n), 0) > 1 or id(n) in shared

    def visit(node: LogicalPlan) -> LogicalPlan:
        return _fuse(node, is_shared)

    return transform_up(plan, visit, shared)


def _trivial(e: exp.Expression) -> bool:
    """Cheap to evaluate twice and typed the same wherever it is written."""
    return (
        is_bare_column(e)
        or isinstance(e, exp.Boolean)
        or (isinstance(e, exp.Literal) and not e.is_string)
    )


def _untyped(e: exp.Expression) -> bool:
    """A string literal or NULL: its type depends on the context it is written in."""
    return isinstance(e, exp.Null) or (isinstance(e, exp.Literal) and e.is_string)


def _merge_filters(outer: lp.Filter, inner: lp.Filter) -> lp.Filter:
    preds = dedupe(conjuncts(inner.predicate) + conjuncts(outer.predicate))
    return lp.Filter(inner.input, and_all(preds))


def _fuse(node: LogicalPlan, is_shared) -> LogicalPlan:
    if (
        isinstance(node, (lp.Filter, lp.Project))
        and isinstance(node.input, lp.SubqueryAlias)
        and not is_shared(node.input)
        and isinstance(node.input.input, (lp.Filter, lp.Project))
        and not is_shared(node.input.input)
    ):
        # look through the alias: rewrite the outer node onto the alias' input, then fuse
        alias = node.input
        refs = [f.ref() for f in alias.input.fields]
        if isinstance(node, lp.Filter):
            pred = substitute(node.predicate, alias.fields, refs)
            if pred is not None:
                fused = _fuse(lp.Filter(alias.input, pred), is_shared)
                if isinstance(fused, (lp.Filter, lp.Project)) and fused is not alias.input:
                    return replace(alias, input=fused)
        elif isinstance(alias.input, lp.Project):
            exprs = [substitute(e, alias.fields, refs) for e in node.exprs]
            if all(e is not None for e in exprs):
                fused = _fuse(replace(node, input=alias.input, exprs=tuple(exprs)), is_shared)
                if fused.input is not alias.input:
                    return fused
        return node
    if isinstance(node, lp.Filter):
        inner = node.input
        if isinstance(inner, lp.Filter) and not is_shared(inner):
            return _merge_filters(node, inner)
        if isinstance(inner, lp.Project) and not is_shared(inner):
            cols = list(node.predicate.find_all(exp.Column))
            idx = [resolve(c, inner.fields) for c in cols]
            if cols and all(i is not None and _trivial(inner.exprs[i]) for i in idx):
                pred = substitute(node.predicate, inner.fields, list(inner.exprs))
                if pred is not None:
                    below: LogicalPlan = lp.Filter(inner.input, pred)
                    x = inner.input
                    if isinstance(x, lp.Filter) and not is_shared(x):
                        below = _merge_filters(below, x)
                    return replace(inner, input=below)
        return node
    if isinstance(node, lp.Project):
        inner = node.input
        if not isinstance(inner, lp.Project) or is_shared(inner):
            return node
        uses: Counter[int] = Counter()
        for e in node.exprs:
            for c in e.find_all(exp.Column):
                i = resolve(c, inner.fields)
                if i is None:
                    return node
                uses[i] += 1
        for i, n in uses.items():
            e = inner.exprs[i]
            if has_subquery_or_aggregate(e) or _untyped(e) or (n > 1 and not _trivial(e)):
                return node
        exprs = []
        for e in node.exprs:
            s = substitute(e, inner.fields, list(inner.exprs))
            if s is None:
                return node
            exprs.append(s)
        return lp.Project(inner.input, tuple(exprs), node.out_fields)
    return node
