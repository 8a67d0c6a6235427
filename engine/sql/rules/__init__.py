"""Logical rewrite rules, one per module, applied in order by ``optimize``.

Each rule is a pure function ``LogicalPlan -> LogicalPlan`` with a docstring example (see
sqlglot's optimizer for the model). ``RULES`` fixes their order.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.sql.logical_plan import LogicalPlan

Rule = Callable[[LogicalPlan], LogicalPlan]

RULES: tuple[Rule, ...] = ()


def optimize(plan: LogicalPlan, rules: tuple[Rule, ...] = RULES) -> LogicalPlan:
    """Apply ``rules`` in order."""
    for rule in rules:
        plan = rule(plan)
    return plan
