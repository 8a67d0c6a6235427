"""An anti join on key equalities becomes a LEFT JOIN with the right's distinct keys, keeping the
left rows that found none.

``NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)`` is an anti join whose condition
is key equalities only. Left-joined to the right input's DISTINCT keys, each left row meets at
most one partner, and it has none exactly when no right row matches it (a NULL key matches
nothing, so it is padded and kept); a Filter on the right key being NULL keeps those, a Project
the left's columns. The outer join and the distinct run columnar (``ColumnarOuterJoinCollection``,
``ColumnarDistinctCollection``) where the types allow, while the anti join keeps its rows in a
row arrangement: TPC-H Q22's anti join over the orders was most of its population. A right input
already unique on the keys is joined as it is.

Only where the results cannot change (as ``unique_semi_join``): every conjunct compares two bare
columns of the same type, not a float (DISTINCT and the join's equality then agree on which
values are equal); any other conjunct (a residual) leaves the anti join alone, and so does NOT IN
(the null-aware anti join: a NULL on the right changes every answer); the left's columns and the
probed right key must resolve to themselves above the join.

Example::

    Anti Join: "o"."c" = "c"."k"                    Projection: "c"."k", "c"."n"
      TableScan: customer                    ->       Filter: "o"."c" IS NULL
      SubqueryAlias: o                                  Left Join: "o"."c" = "c"."k"
        TableScan: orders                                 TableScan: customer
                                                          Distinct
                                                            Projection: "o"."c"
                                                              SubqueryAlias: o ...
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.join_keys import distinct_keys, equi_keys
from engine.sql.rules.scope import resolve, transform_up
from engine.sql.unique_rows import unique_on


def anti_join_as_outer_join(plan: LogicalPlan) -> LogicalPlan:
    """Anti joins on key equalities -> LEFT JOIN + IS NULL filter (see the module docstring)."""
    return transform_up(plan, _rewrite)


def _rewrite(node: LogicalPlan) -> LogicalPlan:
    if not (isinstance(node, lp.Join) and node.kind == "anti" and node.condition is not None):
        return node
    found = equi_keys(node)
    if found is None or found[1]:  # a residual: a match depends on more than the keys
        return node
    keys = found[0]
    left, right = node.left.fields, node.right.fields
    picked = tuple(sorted(keys))
    partners = node.right
    if not unique_on(partners, keys, source_keys=False):
        partners = distinct_keys(partners, picked)
        if partners is None:
            return node
    joined = lp.Join(node.left, partners, "left", node.condition)
    both = joined.fields
    refs = tuple(f.ref() for f in left)
    if any(resolve(r, both) != i for i, r in enumerate(refs)):
        return node
    probe = right[picked[0]].ref()
    if resolve(probe, both) != len(left) + partners.fields.index(right[picked[0]]):
        return node
    unmatched = lp.Filter(joined, exp.Is(this=probe, expression=exp.Null()))
    return lp.Project(unmatched, refs, left)
