"""What the semi and anti join rewrites (``unique_semi_join``, ``anti_join_as_outer_join``) share:
the key equalities of a join condition, and a right input's distinct keys.

Not a rule itself (``RULES`` lists the rules); only analysis and plan pieces both of them build.
"""

from __future__ import annotations

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.rules.pushdown_filters import equi_columns
from engine.sql.rules.scope import conjuncts, resolve


def equi_keys(node: lp.Join) -> tuple[set[int], bool] | None:
    """The right positions of the condition's ``left_column = right_column`` conjuncts and
    whether other conjuncts (a residual) remain; None when a key equality compares columns of
    different types or floats (DISTINCT or GROUP BY and the join's equality could then disagree
    on which values are equal), or when there is no key at all."""
    left, right = node.left.fields, node.right.fields
    keys: set[int] = set()
    residual = False
    for c in conjuncts(node.condition):
        pair = equi_columns(c, left, right)
        if pair is None:
            residual = True
            continue
        lf, rf = left[pair[0]], right[pair[1]]
        if lf.type != rf.type or rf.type.is_float:
            return None
        keys.add(pair[1])
    return (keys, residual) if keys else None


def distinct_keys(right: LogicalPlan, picked: tuple[int, ...]) -> LogicalPlan | None:
    """``SELECT DISTINCT`` of the columns at ``picked`` of ``right``; None when one of their
    names is ambiguous there."""
    fields: tuple[Field, ...] = right.fields
    if any(resolve(fields[i].ref(), fields) != i for i in picked):
        return None
    return lp.Distinct(
        lp.Project(right, tuple(fields[i].ref() for i in picked), tuple(fields[i] for i in picked))
    )
