"""TopKCollection: per partition, the rows at positions offset .. offset+limit-1 in ORDER BY order.

It maintains ``ORDER BY ... LIMIT/OFFSET`` (empty ``partition_key``: one global partition) and the
``WHERE row_number()/rank()/dense_rank() OVER (PARTITION BY ... ORDER BY ...) <= k`` pattern.
``rank_kind="row_number"`` counts duplicates by multiplicity and breaks ties among equal sort keys
deterministically by the row's key encoding (see ``state.sorted_partitions``); ``"rank"`` and
``"dense_rank"`` keep every row whose rank r satisfies offset < r <= offset+limit, ties included;
``emit_rank`` appends that number (absolute within the partition) as a last column. State is every
input row, sorted per partition; a time reads, per touched partition, only the first
offset+limit rows before and after its delta (plus the rows the delta deletes from that range,
and, for rank kinds, the whole last tie group) - never the whole partition unless ``limit`` is
None. It must not emit anything but the exact difference between the old and new selections.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import tee

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.collection import StatefulCollection
from engine.dataflow.state.sorted_partitions import (
    Entry,
    SortedPartitions,
    order_description,
    order_spec,
)
from engine.dataflow.state.store import StateStore, StateTable

RANK_KINDS = ("row_number", "rank", "dense_rank")

Selection = list[tuple[Row, int]]


class TopKCollection(StatefulCollection):
    updates_output = True

    def __init__(
        self,
        partition_key: Sequence[int],
        order_by: Sequence[int],
        descending: Sequence[bool],
        nulls_first: Sequence[bool | None] | None = None,
        limit: int | None = None,
        offset: int = 0,
        rank_kind: str = "row_number",
        emit_rank: bool = False,
    ) -> None:
        super().__init__()
        if rank_kind not in RANK_KINDS:
            raise ValueError(f"TopK rank_kind must be one of {RANK_KINDS}, got {rank_kind!r}")
        if limit is not None and limit < 0:
            raise ValueError(f"TopK limit must be >= 0 or None, got {limit}")
        if offset < 0:
            raise ValueError(f"TopK offset must be >= 0, got {offset}")
        self.partition_key = tuple(partition_key)
        self.order_by, self.descending, self.nulls_first = order_spec(
            "TopK", order_by, descending, nulls_first
        )
        self.limit = limit
        self.offset = offset
        self.rank_kind = rank_kind
        self.emit_rank = emit_rank
        #: the last selected position (row_number) or rank value; None: unbounded
        self._hi = None if limit is None else offset + limit
        self.rows: SortedPartitions | None = None
        self.bounds: StateTable | None = None
        #: partitions whose selection was left as it was this time (their changes lay past it)
        self.skipped = 0

    def open(self, store: StateStore | None) -> None:
        super().open(store)
        assert self.table is not None and store is not None
        self.rows = SortedPartitions(
            self.table, self.partition_key, self.order_by, self.descending, self.nulls_first
        )
        if self.rank_kind == "row_number" and self._hi is not None and self._hi > self.offset:
            self.bounds = store.table(f"{self.name}.bounds", "point")

    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        state = self.rows
        assert state is not None
        select = self._select_row_number if self.rank_kind == "row_number" else self._select_ranked
        acc: dict[Row, int] = {}
        get = acc.get
        by_partition = state.changes(deltas[0])
        bounds = self._read_bounds(list(by_partition))
        for prefix, changes in by_partition.items():
            bound = bounds.get(prefix)
            if bound is not None and all(c[0] > bound for c in changes):
                self.skipped += 1  # every change lies past the selection's last entry
                state.stage(changes)
                continue
            old_scan, new_scan = tee(state.committed(prefix))
            for r, c in select(old_scan):
                acc[r] = get(r, 0) - c
            last: list[bytes] = []
            for r, c in select(state.merged(new_scan, changes), last):
                acc[r] = get(r, 0) + c
            state.stage(changes)
            self._stage_bound(prefix, bound, last[0] if last else None)
        return DiffBatch.from_counts(acc)

    # -- where a partition's selection ends (row_number with a limit) ----------------------------
    # Per partition, the key of the entry holding position offset+limit. A change whose key comes
    # after it can neither enter the selection nor move a selected row, so a time whose changes
    # to a partition all lie past it skips that partition's scan. The bounds are in their own
    # column family, committed with the rest of the state; a partition holding fewer rows than
    # offset+limit has none (it is always scanned), and a state without bounds reads as that.
    def _read_bounds(self, prefixes: list[bytes]) -> dict[bytes, bytes]:
        if self.bounds is None or not prefixes:
            return {}
        got = self.bounds.get_many(prefixes)
        return {p: b for p, b in zip(prefixes, got, strict=True) if b is not None}

    def _stage_bound(self, prefix: bytes, old: bytes | None, new: bytes | None) -> None:
        if self.bounds is None or old == new:
            return
        if new is None:
            self.bounds.delete(prefix)
        else:
            self.bounds.put(prefix, new)

    # -- selections (consume only as many entries as they need) -------------------------------
    def _select_row_number(self, entries: Iterable[Entry], last: list | None = None) -> Selection:
        """The selected (row, count)s; appends to ``last`` the key of the entry holding the last
        selected position, if the partition reaches it."""
        lo, hi = self.offset, self._hi
        out: Selection = []
        if hi is not None and hi <= lo:
            return out
        pos = 0
        for key, row, count, _ in entries:
            end = pos + count
            if end > lo:
                a = pos if pos > lo else lo
                b = end if hi is None or end < hi else hi
                if self.emit_rank:
                    out.extend((row + (p + 1,), 1) for p in range(a, b))
                else:
                    out.append((row, b - a))
            pos = end
            if hi is not None and pos >= hi:
                if last is not None:
                    last.append(key)
                break
        return out

    def _select_ranked(self, entries: Iterable[Entry], last: list | None = None) -> Selection:
        """The selected (row, count)s, ties included (``last`` is left empty: ranked selections
        keep no bound)."""
        lo, hi = self.offset, self._hi
        out: Selection = []
        if hi is not None and hi <= lo:
            return out
        dense = self.rank_kind == "dense_rank"
        emit = self.emit_rank
        pos = 0
        groups = 0
        value = 0
        peer_of_group = None
        for _, row, count, peer in entries:
            if peer != peer_of_group:
                peer_of_group = peer
                groups += 1
                value = groups if dense else pos + 1
                if hi is not None and value > hi:
                    break
            if value > lo:
                out.append((row + (value,) if emit else row, count))
            pos += count
        return out

    def describe(self) -> str:
        s = (
            f"TopK: partition={list(self.partition_key)} "
            f"order={order_description(self.order_by, self.descending, self.nulls_first)}"
        )
        if self.rank_kind != "row_number":
            s += f" {self.rank_kind}"
        if self.limit is not None:
            s += f" limit={self.limit}"
        if self.offset:
            s += f" offset={self.offset}"
        if self.emit_rank:
            s += " emit_rank"
        return s
