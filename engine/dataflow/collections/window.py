"""WindowCollection: each input row extended with window function values over its partition.

``SELECT *, f1 OVER w, f2 OVER w ... WINDOW w AS (PARTITION BY ... ORDER BY ...)`` for the kinds of
``engine.dataflow.window_functions`` (one shared window per collection; the planner stacks
collections for several windows). State is every input row, sorted per partition
(``state.sorted_partitions``). A time recomputes only the partitions its delta touches: the old
output from the committed rows, the new output from those rows merged with the delta, and emits
only the rows whose output changed. Rows tied on every ORDER BY column (peers) are numbered, and
seen by lag/lead, in a deterministic order (the row's key encoding), where SQL leaves it
unspecified. A touched partition is read whole and held in memory: this collection must not be
used where partitions are too large for that, and must not read untouched partitions.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.state.sorted_partitions import (
    Entry,
    SortedPartitions,
    order_description,
    order_spec,
)
from engine.dataflow.state.store import StateStore
from engine.dataflow.window_functions import WindowFunction, window_columns

__all__ = ["WindowCollection", "WindowFunction"]


class WindowCollection(StatefulCollection):
    updates_output = True

    def __init__(
        self,
        partition_key: Sequence[int],
        order_by: Sequence[int],
        descending: Sequence[bool],
        nulls_first: Sequence[bool | None] | None = None,
        functions: Sequence[WindowFunction] = (),
    ) -> None:
        super().__init__()
        if not functions:
            raise ValueError("WindowCollection needs at least one window function")
        self.partition_key = tuple(partition_key)
        self.order_by, self.descending, self.nulls_first = order_spec(
            "Window", order_by, descending, nulls_first
        )
        self.functions = tuple(functions)
        self.rows: SortedPartitions | None = None

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        assert self.table is not None
        self.rows = SortedPartitions(
            self.table, self.partition_key, self.order_by, self.descending, self.nulls_first
        )

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        state = self.rows
        assert state is not None
        acc: dict[Row, int] = {}
        for prefix, changes in state.changes(deltas[0]).items():
            old = list(state.committed(prefix))
            new = list(state.merged(old, changes))
            self._output(old, -1, acc)
            self._output(new, 1, acc)
            state.stage(changes)
        return DiffBatch.from_counts(acc)

    def _output(self, entries: list[Entry], sign: int, acc: dict[Row, int]) -> None:
        """Add the partition's output rows, times ``sign``, to ``acc``."""
        if not entries:
            return
        rows: list[Row] = []
        groups: list[tuple[int, int]] = []
        peer = None
        start = 0
        for _, row, count, p in entries:
            if p != peer:
                if rows:
                    groups.append((start, len(rows)))
                start = len(rows)
                peer = p
            if count == 1:
                rows.append(row)
            else:
                rows.extend([row] * count)
        groups.append((start, len(rows)))
        columns = window_columns(rows, groups, self.functions)
        get = acc.get
        for out in map(tuple.__add__, rows, zip(*columns, strict=True)):
            acc[out] = get(out, 0) + sign

    def describe(self) -> str:
        funcs = ", ".join(f.describe() for f in self.functions)
        return (
            f"Window: partition={list(self.partition_key)} "
            f"order={order_description(self.order_by, self.descending, self.nulls_first)} "
            f"functions=[{funcs}]"
        )
