"""GROUP BY ROLLUP / CUBE / GROUPING SETS, expanded into the grouping sets Postgres computes.

``expand_group(group)`` turns a GROUP BY clause into the distinct grouping expressions (in
order of first appearance) and the list of grouping sets, each a tuple of indices into them,
following Postgres: ``ROLLUP (a, b)`` is ``(a, b), (a), ()``; ``CUBE (a, b)`` is every subset,
``(a, b), (a), (b), ()``; ``GROUPING SETS (...)`` lists sets, which may themselves be ROLLUP or
CUBE; a parenthesized list inside ROLLUP/CUBE is one element; several items of the clause
(``GROUP BY c, ROLLUP (a, b)``) multiply out, set by set. Duplicate sets stay (Postgres keeps
them without ``GROUP BY DISTINCT``). A plain GROUP BY gives None. ``grouping_mask`` is the value
of ``GROUPING(args)`` within one set: one bit per argument, the leftmost most significant, set
when the argument is not grouped by. ``grouping_sets_plan`` builds the plan the planner
(``engine.sql.plan_builder``) uses: one aggregate per set, under UNION ALL.
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field
from engine.sql.parse import unsupported
from engine.sql.types import INTEGER

MAX_SETS = 4096  # Postgres' own limit on grouping sets


def expand_group(
    group: exp.Group | None,
) -> tuple[list[exp.Expression], list[tuple[int, ...]]] | None:
    """The grouping expressions and sets of ``group``; None for a plain GROUP BY."""
    if group is None or not any(
        isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions
    ):
        return None
    exprs: list[exp.Expression] = []
    index: dict[str, int] = {}

    def at(e: exp.Expression) -> int:
        key = e.sql()
        if key not in index:
            index[key] = len(exprs)
            exprs.append(e)
        return index[key]

    sets: list[tuple[int, ...]] = [()]
    for item in group.expressions:
        choices = _sets_of(item, at)
        sets = [s + c for s in sets for c in choices]
        if len(sets) > MAX_SETS:
            raise unsupported(group, f"too many grouping sets (more than {MAX_SETS})")
    return exprs, [tuple(dict.fromkeys(s)) for s in sets]


def _elements(e: exp.Expression) -> list[exp.Expression]:
    """A parenthesized list as its members, anything else as itself."""
    if isinstance(e, exp.Tuple):
        return list(e.expressions)
    if isinstance(e, exp.Paren):
        return _elements(e.this)
    return [e]


def _sets_of(item: exp.Expression, at) -> list[tuple[int, ...]]:
    if isinstance(item, exp.Rollup):
        parts = [tuple(at(x) for x in _elements(e)) for e in item.expressions]
        return [sum(parts[:n], ()) for n in range(len(parts), -1, -1)]
    if isinstance(item, exp.Cube):
        parts = [tuple(at(x) for x in _elements(e)) for e in item.expressions]
        # Postgres' order: the full set first, then by dropping elements from the right
        out = []
        for keep in itertools.product((True, False), repeat=len(parts)):
            out.append(sum((p for p, k in zip(parts, keep, strict=True) if k), ()))
        return out
    if isinstance(item, exp.GroupingSets):
        out = []
        for member in item.expressions:
            if isinstance(member, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                out += _sets_of(member, at)
            else:
                out.append(tuple(at(x) for x in _elements(member)))
        return out
    return [(at(item),)]


def grouping_mask(call: exp.Grouping, exprs: list[exp.Expression], grouped: tuple[int, ...]):
    """``GROUPING(args)`` in the set ``grouped`` (indices into ``exprs``)."""
    keys = {e.sql(): i for i, e in enumerate(exprs)}
    mask = 0
    for arg in call.expressions:
        i = keys.get(arg.sql())
        if i is None:
            raise unsupported(
                arg, "arguments to GROUPING must be grouping expressions of the query level"
            )
        mask = (mask << 1) | (i not in grouped)
    return mask


def grouping_sets_plan(
    plan: lp.LogicalPlan,
    group_exprs: list[exp.Expression],
    sets: list[tuple[int, ...]],
    aggregates: list[exp.Expression],
    fields: tuple[Field, ...],
    groupings: list[exp.Grouping],
) -> tuple[lp.LogicalPlan, tuple[Field, ...], dict[str, Field]]:
    """One aggregate of ``plan`` per grouping set, each projected to the common layout (every
    grouping expression, NULL of its type where the set does not group by it; the aggregates;
    the value of each ``GROUPING(...)`` call), then UNION ALL. ``fields``: the group fields then
    the aggregate fields of a plain aggregate. Returns the plan, its fields and the field of
    each GROUPING call (by its SQL)."""
    n = len(group_exprs)
    calls = list({c.sql(): c for c in groupings}.values())
    common = (
        tuple(Field(None, f"__g{i}", f.type, True) for i, f in enumerate(fields[:n]))
        + tuple(Field(None, f.name, f.type, f.nullable) for f in fields[n:])
        + tuple(Field(None, f"__grouping{k}", INTEGER, False) for k in range(len(calls)))
    )
    branches: list[lp.LogicalPlan] = []
    for grouped in sets:
        agg = lp.Aggregate(
            plan,
            tuple(group_exprs[i] for i in grouped),
            tuple(aggregates),
            tuple(fields[i] for i in grouped) + fields[n:],
        )
        at = {i: k for k, i in enumerate(grouped)}
        exprs: list[exp.Expression] = [
            agg.fields[at[i]].ref()
            if i in at
            else exp.Cast(this=exp.Null(), to=exp.DataType.build(fields[i].type.sql()))
            for i in range(n)
        ]
        exprs += [f.ref() for f in agg.fields[len(grouped) :]]
        exprs += [exp.Literal.number(grouping_mask(c, group_exprs, grouped)) for c in calls]
        branches.append(lp.Project(agg, tuple(exprs), common))
    out = branches[0]
    for branch in branches[1:]:
        out = lp.SetOperation(out, branch, "union_all")
    first = n + len(aggregates)
    return out, common, {c.sql(): common[first + k] for k, c in enumerate(calls)}
