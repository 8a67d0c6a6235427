"""EXISTS where it is not a top-level AND condition of WHERE: a mark from a LEFT JOIN.

A top-level ``[NOT] EXISTS`` of WHERE is a semi/anti join (``plan_builder._semi_anti``). Under
OR, NOT or CASE, or in the select list, the EXISTS is a boolean value of each outer row instead:
``exists_mark`` joins the outer plan, LEFT, with the DISTINCT correlation keys of the
subquery's rows (its FROM and local WHERE) plus a constant TRUE mark, on the correlation
equalities, and the EXISTS becomes ``mark IS NOT NULL``. The keys are distinct, so each outer
row meets at most one of them and keeps its multiplicity; a NULL outer key matches nothing,
which makes the EXISTS false, as in Postgres. So the correlation must be a conjunction of
equalities between an outer expression and an inner column; anything else is refused with
its position. An uncorrelated EXISTS is the same value for every outer row: the subquery's row
count, CROSS JOINed (``uncorrelated_exists``). This module only builds plans.
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.parse import unsupported
from engine.sql.plan_expressions import and_all, conjuncts, qualifiers
from engine.sql.types import BOOLEAN


def exists_mark(builder, node: exp.Exists, plan: LogicalPlan) -> tuple[LogicalPlan, exp.Expression]:
    """``plan`` LEFT JOIN the marked keys of ``node``'s subquery, and the EXISTS' value."""
    right, cond = builder.exists_subquery(node, plan)
    if cond is None:
        return builder.uncorrelated_exists(right, plan)
    inner = right.alias
    pairs: list[tuple[exp.Expression, exp.Expression]] = []
    for c in conjuncts(cond):
        eq = c.this if isinstance(c, exp.Paren) else c
        if isinstance(eq, exp.EQ):
            for outer, col in ((eq.this, eq.expression), (eq.expression, eq.this)):
                if (
                    isinstance(col, exp.Column)
                    and col.table == inner
                    and qualifiers(outer)
                    and inner not in qualifiers(outer)
                ):
                    pairs.append((outer, col))
                    break
            else:
                eq = None
        if not isinstance(eq, exp.EQ):
            raise unsupported(
                c,
                "under OR, NOT or CASE and in the select list, EXISTS must be correlated by "
                "equalities between an outer expression and a column of the subquery",
                "Make it a top-level AND condition of WHERE, or correlate it by equalities",
            )
    mark = f"__ex{next(builder._names)}"
    keys = [col for _, col in pairs]
    types = builder.types_of(keys, right.fields)
    out = tuple(Field(mark, f"k{i}", t) for i, t in enumerate(types)) + (
        Field(mark, "m", BOOLEAN, False),
    )
    marked = lp.Distinct(lp.Project(right, (*keys, exp.true()), out))
    on = and_all(
        [
            exp.EQ(this=outer, expression=lp.column(f"k{i}", mark))
            for i, (outer, _) in enumerate(pairs)
        ]
    )
    value = exp.Not(this=exp.Is(this=lp.column("m", mark), expression=exp.Null()))
    return lp.Join(plan, marked, "left", on), exp.Paren(this=value)
