"""IN (subquery) where it is not a top-level AND condition of WHERE: a three-valued mark.

A top-level ``[NOT] IN (subquery)`` of WHERE is a semi or null-aware anti join
(``plan_builder._semi_anti``). Under OR, NOT or CASE, or in the select list, ``x IN (SELECT v
...)`` is a value of each outer row with Postgres' three values: TRUE when some ``v = x``;
otherwise NULL when the subquery has rows and ``x`` is NULL or some ``v`` is NULL; otherwise
FALSE. ``in_mark`` builds it from two joins: the outer plan LEFT JOIN the subquery's DISTINCT
values with a constant TRUE mark on ``x = v`` (a match), CROSS JOIN the one-row aggregate
``count(*), count(v)`` of the subquery (rows at all, NULLs among them). The subquery must be
uncorrelated; a correlated one is built from three EXISTS marks instead (``_correlated_in``).
This module only builds plans.
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.parse import unsupported
from engine.sql.result_types import aggregate_type
from engine.sql.types import BOOLEAN


def in_mark(builder, node: exp.In, plan: LogicalPlan) -> tuple[LogicalPlan, exp.Expression]:
    """``plan`` joined with what ``node``'s value needs, and that value."""
    query = node.args["query"]
    sub = query.this if isinstance(query, exp.Subquery) else query
    if builder.outer_references(sub):
        return _correlated_in(builder, node, sub, plan)
    right = builder.query(sub, None)
    if len(right.fields) != 1:
        raise unsupported(node, "IN (subquery) must select exactly one column")
    n = next(builder._names)
    values, stats, mark = f"__in{n}", f"__ins{n}", f"__inm{n}"
    right = lp.SubqueryAlias(right, values, ("v",))
    v = lp.column("v", values)
    (v_type,) = builder.types_of([v], right.fields)
    marked = lp.Distinct(
        lp.Project(right, (v, exp.true()), (Field(mark, "v", v_type), Field(mark, "m", BOOLEAN)))
    )
    count_type = aggregate_type("count_star", None)
    counts = lp.Aggregate(
        right,
        (),
        (exp.Count(this=exp.Star()), exp.Count(this=v.copy())),
        (Field(None, "n", count_type, False), Field(None, "nv", count_type, False)),
    )
    counts = lp.SubqueryAlias(counts, stats)
    outer = node.this
    joined = lp.Join(
        lp.Join(plan, marked, "left", exp.EQ(this=outer.copy(), expression=lp.column("v", mark))),
        counts,
        "cross",
    )
    rows = lp.column("n", stats)
    unknown = exp.or_(
        exp.Is(this=outer.copy(), expression=exp.Null()),
        exp.GT(this=rows.copy(), expression=lp.column("nv", stats)),
    )
    value = exp.Case(
        ifs=[
            exp.If(this=exp.Not(this=exp.Is(this=lp.column("m", mark), expression=exp.Null())),
                   true=exp.true()),
            exp.If(this=exp.EQ(this=rows, expression=exp.Literal.number(0)), true=exp.false()),
            exp.If(this=unknown, true=exp.Null()),
        ],
        default=exp.false(),
    )  # fmt: skip
    return joined, exp.Paren(this=value)


def _correlated_in(builder, node: exp.In, sub: exp.Expression, plan: LogicalPlan):
    """A correlated ``x IN (SELECT v FROM ... WHERE w)``: the same three values from three
    EXISTS marks (``exists_mark``): a match (``w AND v = x``), rows at all (``w``), a NULL
    among them (``w AND v IS NULL``). ``v`` must be a column for the marks' equalities."""
    if not isinstance(sub, exp.Select) or len(sub.expressions) != 1:
        raise unsupported(node, "IN (subquery) must select exactly one column")
    item = sub.expressions[0]
    v = item.this if isinstance(item, exp.Alias) else item
    outer = node.this

    def exists(extra: exp.Expression | None) -> exp.Exists:
        s = sub.copy()
        s.set("expressions", [exp.Literal.number(1)])
        if extra is not None:
            s = s.where(extra, copy=False)
        return exp.Exists(this=s)

    value = exp.Case(
        ifs=[
            exp.If(this=exists(exp.EQ(this=v.copy(), expression=outer.copy())), true=exp.true()),
            exp.If(this=exp.Not(this=exists(None)), true=exp.false()),
            exp.If(
                this=exp.or_(
                    exp.Is(this=outer.copy(), expression=exp.Null()),
                    exists(exp.Is(this=v.copy(), expression=exp.Null())),
                ),
                true=exp.Null(),
            ),
        ],
        default=exp.false(),
    )
    holder = [plan]
    value = builder.replace_exists(value, holder)
    return holder[0], exp.Paren(this=value)
