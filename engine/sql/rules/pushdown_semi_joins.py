"""Semi and anti joins move below the inner joins whose one input holds the columns they test.

``(A JOIN B) SEMI JOIN S`` equals ``(A SEMI JOIN S) JOIN B`` when the semi join's condition reads
only A's columns (and S's): a joined row (a, b) is kept exactly when a has a partner in S, so
filtering A first keeps the same pairs, each as often. An anti join (``NOT EXISTS``, ``NOT IN``)
likewise: its answer for a row depends on a and S alone. A Filter between them commutes with the
semi join too. TPC-H Q18's ``o_orderkey IN (SELECT l_orderkey ... HAVING sum(l_quantity) >
300)`` then keeps the few dozen qualifying orders of 1.5M before customers and lineitems join
them, instead of filtering six million joined lines at the top (and keeping them, wide, in the
last join's state); ``unique_semi_join`` then makes it an inner join on orders.

Runs before ``order_joins``, which takes the semi join standing on its input as one leaf
(estimated as that input: ``row_estimates``). Only where names resolve the same below: every
column of the condition must name the same field among (the input's fields + S's) as among (the
join's fields + S's). Never into a node shared by several parents (a CTE read twice), nor
through outer joins, SubqueryAlias or Projects (the columns would need renaming).

Example::

    Semi Join: "o"."k" = "__sq1"."v"              Inner Join: "o"."k" = "l"."k"
      Inner Join: "o"."k" = "l"."k"        ->       Semi Join: "o"."k" = "__sq1"."v"
        SubqueryAlias: o                              SubqueryAlias: o
        SubqueryAlias: l                              SubqueryAlias: __sq1
      SubqueryAlias: __sq1                          SubqueryAlias: l
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.rules.scope import resolve, transform_up

_THROUGH = ("inner", "cross")


def pushdown_semi_joins(plan: LogicalPlan) -> LogicalPlan:
    """Semi/anti joins onto the join input that holds their columns (see the module docstring)."""
    shared: set[int] = set()
    return transform_up(plan, lambda node: _push(node, shared), shared)


def _push(node: LogicalPlan, shared: set[int]) -> LogicalPlan:
    if not (
        isinstance(node, lp.Join) and node.kind in lp.SEMI_KINDS and node.condition is not None
    ):
        return node
    columns = list(node.condition.find_all(exp.Column))
    scope = node.left.fields + node.right.fields
    fields = [_field(c, scope) for c in columns]
    if any(f is None for f in fields):
        return node
    moved = _below(node.left, node, columns, fields, shared)
    return node if moved is None else moved


def _below(
    target: LogicalPlan,
    semi: lp.Join,
    columns: list[exp.Column],
    fields: list[Field | None],
    shared: set[int],
) -> LogicalPlan | None:
    """``target`` with ``semi`` applied below it, as low as it goes; None if it cannot go below
    ``target`` (then it stays where it is)."""
    if id(target) in shared:
        return None
    if isinstance(target, lp.Filter):
        inner = _below(target.input, semi, columns, fields, shared)
        return None if inner is None else target.with_children(inner)
    if not (isinstance(target, lp.Join) and target.kind in _THROUGH):
        return None
    sides = [target.left, target.right]
    for i, side in enumerate(sides):
        scope = side.fields + semi.right.fields
        if [_field(c, scope) for c in columns] == fields:
            pushed = _below(side, semi, columns, fields, shared)
            sides[i] = pushed or lp.Join(side, semi.right, semi.kind, semi.condition)
            return target.with_children(*sides)
    return None


def _field(column: exp.Column, scope: tuple[Field, ...]) -> Field | None:
    i = resolve(column, scope)
    return None if i is None else scope[i]
