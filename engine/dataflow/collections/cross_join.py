"""CrossJoinCollection: every left row paired with every right row (CROSS JOIN, or a join whose
condition has no equality), optionally filtered by a residual predicate.

It is the inner join with an empty key: all rows of both inputs sit under one key, so each change
on one side reads the whole other side. That is right for the small, constant-like inputs the
planner gives it (a scalar subquery's one row, a tiny dimension table); it must not be planned for
two large inputs, where an equi-join key should be found instead.
"""

from __future__ import annotations

from engine.dataflow.collections.join import InnerJoinCollection, describe_join
from engine.dataflow.errs import BatchFn


class CrossJoinCollection(InnerJoinCollection):
    def __init__(self, residual: BatchFn | None = None, description: str = "") -> None:
        super().__init__((), (), residual, description)

    def describe(self) -> str:
        return describe_join("CrossJoin", (), (), self.residual, self.description)
