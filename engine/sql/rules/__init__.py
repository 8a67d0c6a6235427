"""Logical rewrite rules, one per module, applied in order by ``optimize``.

Each rule is a pure function ``LogicalPlan -> LogicalPlan`` with a docstring example (see
sqlglot's optimizer for the model); shared analysis lives in ``scope``. ``RULES`` fixes their
order: constants first (so TRUE filters vanish and literals are canonical), then the top-k
pattern (while the rank filter still sits right above its window), filter pushdown, the filters
implied across equi-joins and a second pushdown to move those down too, semi and anti joins
onto the join input they test (so join ordering sees them on their leaf), join ordering (on the
final conditions), semi joins on a unique right input as inner joins (after ordering, so the
join order stays the one chosen for the semi join), anti joins on keys as left joins with the
right's distinct keys (likewise), projection pushdown (after filters found their place: their columns are
needed only where they are), the top-k pattern once more (pruning may have left a ranking
Window with a single function) and pruning its rank column, then fusing and passthrough removal to clean up what the others
left. Every rule must preserve results exactly; ``tests/sql/test_rules.py`` checks each on
fixtures and all of them together against the unoptimized plan on random data.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.anti_join_as_outer_join import anti_join_as_outer_join
from engine.sql.rules.fold_constants import fold_constants
from engine.sql.rules.fuse_stateless import fuse_stateless
from engine.sql.rules.infer_join_filters import infer_join_filters
from engine.sql.rules.order_joins import order_joins
from engine.sql.rules.pushdown_filters import pushdown_filters
from engine.sql.rules.pushdown_projections import pushdown_projections
from engine.sql.rules.pushdown_semi_joins import pushdown_semi_joins
from engine.sql.rules.remove_passthrough import remove_passthrough
from engine.sql.rules.unique_semi_join import unique_semi_join
from engine.sql.rules.window_to_top_k import window_to_top_k

Rule = Callable[[LogicalPlan], LogicalPlan]

RULES: tuple[Rule, ...] = (
    fold_constants,
    window_to_top_k,
    pushdown_filters,
    infer_join_filters,
    pushdown_filters,
    pushdown_semi_joins,
    order_joins,
    unique_semi_join,
    anti_join_as_outer_join,
    pushdown_projections,
    window_to_top_k,
    pushdown_projections,
    fuse_stateless,
    remove_passthrough,
)


def optimize(plan: LogicalPlan, rules: tuple[Rule, ...] = RULES) -> LogicalPlan:
    """Apply ``rules`` in order."""
    for rule in rules:
        plan = rule(plan)
    return plan
