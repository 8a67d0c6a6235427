"""A semi join becomes an inner join with a right input unique on the join keys.

``x IN (SELECT k FROM t GROUP BY k HAVING ...)`` is a semi join whose right input holds each key
at most once. Joining it as an inner join gives every left row at most one partner, so the inner
join's rows are the semi join's with the right's columns appended; a Project keeps the left's.
A right input that is not unique (``EXISTS (SELECT 1 FROM lineitem WHERE l_orderkey = o_orderkey
...)``) stays a semi join: the physical planner gives it the columnar semi join over the right's
key columns (``ColumnarSemiJoinCollection``: per key the left rows and the right rows' count)
where the types allow. Joining the right's DISTINCT keys instead stored those keys twice, in the
distinct and in the inner join (TPC-H Q4 at SF 1: population ~5.7 -> ~3.3 s side by side, the
machine busy; docs/planner.md).

Unique means: the right input's rows never agree on the right-hand columns of the equalities
(``engine.sql.unique_rows.unique_on`` without the tables' keys: an Aggregate's group keys, all
of it without GROUP BY; all columns of a Distinct or of a UNION, EXCEPT or INTERSECT without
ALL; through Filter, SubqueryAlias, TopK, Window, semi joins, inner joins of unique inputs and
Projects that keep the columns; a primary key is not used, so the plan never depends on one).
Only where the results cannot change:

* every key equality compares two bare columns of the same type, not a float (DISTINCT/GROUP BY
  and the join's equality then agree on which values are equal; a NULL key matches nothing);
* other conjuncts of the condition stay as the inner join's residual when the right input is
  unique (at most one partner still); with a residual, a non-unique right stays a semi join (the
  residual may read right columns besides the keys);
* the left's columns resolve to themselves above the inner join (no name the right shadows).

Example::

    Semi Join: "o"."k" = "__sq1"."v"                  Projection: "o"."k", "o"."price"
      TableScan: orders                        ->       Inner Join: "o"."k" = "__sq1"."v"
      SubqueryAlias: __sq1                                TableScan: orders
        Projection: "l"."k"                               SubqueryAlias: __sq1
          Filter: "__agg0" > 300                            Projection: "l"."k"
            Aggregate: groupBy=[["l"."k"]], ...               Filter: ...
"""

from __future__ import annotations

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.join_keys import equi_keys
from engine.sql.rules.scope import resolve, transform_up
from engine.sql.unique_rows import unique_on


def unique_semi_join(plan: LogicalPlan) -> LogicalPlan:
    """Semi joins on a unique right input -> inner join + Project (see the module docstring)."""
    return transform_up(plan, _rewrite)


def _rewrite(node: LogicalPlan) -> LogicalPlan:
    if not (isinstance(node, lp.Join) and node.kind == "semi" and node.condition is not None):
        return node
    found = equi_keys(node)
    if found is None:
        return node
    keys, _ = found
    left = node.left.fields
    unique = node.right
    if not unique_on(unique, keys, source_keys=False):
        return node
    joined = lp.Join(node.left, unique, "inner", node.condition)
    both = joined.fields
    refs = tuple(f.ref() for f in left)
    if any(resolve(r, both) != i for i, r in enumerate(refs)):
        return node
    return lp.Project(joined, refs, left)
