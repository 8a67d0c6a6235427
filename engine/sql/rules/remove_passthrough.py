"""Passthrough removal (Tremor's RFC, seed 004): drop nodes that do nothing.

Removed: Filters whose predicate is TRUE; identity Projects (the input's columns, same names and
types, same order); a SubqueryAlias over a SubqueryAlias (the outer one re-qualifies everything);
a SubqueryAlias whose fields already carry its alias and names (``FROM t`` over the scan of
``t``); a Project under a SubqueryAlias that only renames its input's columns in order (folded
into the alias' ``column_names``); a Project that only reorders its input's columns when its
parent is a Project or Aggregate (which read columns by name, not position - ``order_joins``
leaves these); Distinct over an input that is already duplicate-free (an Aggregate, or a Project
keeping all of an Aggregate's group keys, a UNION/EXCEPT/INTERSECT without ALL, another
Distinct, or Filter/SubqueryAlias/TopK over one of those).

Kept: anything under several parents (a CTE used twice), Projects that rename columns where the
parent reads positions (the plan's output, set operations), FALSE filters.

Example::

    Distinct                                     Projection: "t1"."c", "__agg0" AS n
      Projection: "t1"."c", "__agg0" AS n    ->    Aggregate: groupBy=[["t1"."c"]], aggr=[[COUNT(*)]]
        Aggregate: groupBy=[["t1"."c"]], ...          TableScan: t1
          TableScan: t1
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.scope import (
    is_bare_column,
    key,
    parent_counts,
    resolve,
    transform_up,
)
from engine.sql.unique_rows import unique_on


def remove_passthrough(plan: LogicalPlan) -> LogicalPlan:
    """Drop passthrough nodes (see the module docstring)."""
    shared: set[int] = set()
    counts = parent_counts(plan)

    def is_shared(n: LogicalPlan) -> bool:
        return counts.get(id(n), 0) > 1 or id(n) in shared

    def visit(node: LogicalPlan) -> LogicalPlan:
        return _remove(node, is_shared)

    return transform_up(plan, visit, shared)


def _positional(p: lp.Project) -> bool:
    """Expression i is input column i, for every column of the input, with the same type."""
    fields = p.input.fields
    if len(p.exprs) != len(fields):
        return False
    return all(
        is_bare_column(e) and resolve(e, fields) == i and f.type == fields[i].type
        for i, (e, f) in enumerate(zip(p.exprs, p.out_fields, strict=True))
    )


def _same_fields(a, b) -> bool:
    return len(a) == len(b) and all(
        key(x) == key(y) and x.type == y.type for x, y in zip(a, b, strict=True)
    )


def _reorder_only(p: lp.Project) -> bool:
    """A permutation of the input's columns, keeping their names, qualifiers and types."""
    fields = p.input.fields
    keys = [key(f) for f in fields]
    if len(p.exprs) != len(fields) or len(set(keys)) != len(keys):
        return False
    seen = set()
    for e, f in zip(p.exprs, p.out_fields, strict=True):
        i = resolve(e, fields) if is_bare_column(e) else None
        if i is None or i in seen or key(f) != keys[i] or f.type != fields[i].type:
            return False
        seen.add(i)
    return True


def duplicate_free(node: LogicalPlan) -> bool:
    """True if ``node`` can never output the same row twice (by its own GROUP BY, DISTINCT...;
    not by a table's key: no rewrite rests on the catalog's keys)."""
    return unique_on(node, set(range(len(node.fields))), source_keys=False)


def _remove(node: LogicalPlan, is_shared) -> LogicalPlan:
    if isinstance(node, lp.Filter):
        if isinstance(node.predicate, exp.Boolean) and node.predicate.this is True:
            return node.input
        return node
    if (
        isinstance(node, lp.Project)
        and _positional(node)
        and _same_fields(node.out_fields, node.input.fields)
    ):
        return node.input
    if isinstance(node, (lp.Project, lp.Aggregate)):
        inner = node.input
        if isinstance(inner, lp.Project) and not is_shared(inner) and _reorder_only(inner):
            return replace(node, input=inner.input)
        return node
    if isinstance(node, lp.SubqueryAlias):
        inner = node.input
        if isinstance(inner, lp.SubqueryAlias) and not is_shared(inner):
            names = node.column_names or inner.column_names
            return _remove(replace(node, input=inner.input, column_names=names), is_shared)
        if isinstance(inner, lp.Project) and not is_shared(inner) and _positional(inner):
            names = node.column_names or tuple(f.name for f in inner.out_fields)
            if names == tuple(f.name for f in inner.input.fields):
                names = None
            return _remove(replace(node, input=inner.input, column_names=names), is_shared)
        if _same_fields(node.fields, inner.fields):
            return inner
        return node
    if isinstance(node, lp.Distinct) and duplicate_free(node.input):
        return node.input
    return node
