"""The one contract every collection implements, and the base of stateful collections.

A collection receives ``on_diffs(port, batch)`` for each micro-batch on an input port and
``on_time_end(t)`` once *every* input port has seen ``TimeEnd(t)``; both return the diffs to send
downstream. Stateless collections (filter, map, union...) answer ``on_diffs`` at once and hold
nothing. Stateful collections buffer their input until ``on_time_end`` and then apply the whole
time's consolidated delta against their *committed* state (``ΔA⋈B + A⋈ΔB + ΔA⋈ΔB`` style),
staging writes that the dataflow commits atomically after the sink (see ``state.store``).

Scalar evaluation errors are not raised: a collection reports them as diffs of ``(message,)``
rows through ``report_errors``; the dataflow gathers them into the view's errs collection.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from engine.dataflow.batch import DiffBatch
from engine.dataflow.state.store import StateStore, StateTable


class Collection(ABC):
    """A node of the dataflow. Subclasses set ``arity`` (number of input ports) and ``stateful``."""

    arity: int = 1  # class default; variadic collections (union) set it per instance
    stateful: ClassVar[bool] = False
    #: whether the collection computes on Arrow columns (a columnar batch is worth reading)
    takes_columns: ClassVar[bool] = False

    def __init__(self) -> None:
        self.name: str = type(self).__name__
        self._errors: list[DiffBatch] = []

    def open(self, store: StateStore | None) -> None:  # noqa: B027 (optional hook)
        """Called once by the dataflow before the first message (stateful: open the table)."""

    @abstractmethod
    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        """Diffs arriving on ``port``; returns the diffs to send downstream now."""

    def on_time_end(self, time: int) -> DiffBatch:
        """Every input has closed ``time``; returns the remaining output for it."""
        return DiffBatch()

    def describe(self) -> str:
        """One line for EXPLAIN's physical plan."""
        return self.name

    # -- errs stream ----------------------------------------------------------------------------
    def report_errors(self, errs: DiffBatch) -> None:
        if errs:
            self._errors.append(errs)

    def take_errors(self) -> DiffBatch:
        if not self._errors:
            return DiffBatch()
        out = DiffBatch.concat(self._errors)
        self._errors = []
        return out


class StatefulCollection(Collection):
    """Buffers each port's diffs during a time, then ``process``es the consolidated deltas once."""

    stateful: ClassVar[bool] = True
    #: RocksDB tuning of this collection's column family: "point" (bloom filters) or "prefix"
    tuning: ClassVar[str] = "prefix"

    def __init__(self) -> None:
        super().__init__()
        self.table: StateTable | None = None
        self._pending: list[list[DiffBatch]] = [[] for _ in range(self.arity)]
        # past this many buffered diffs on a port, consolidate them (0: never); set by
        # Dataflow.bound_memory. Counts how often it happened (compactions).
        self.compact_rows = 0
        self.compactions = 0
        self._pending_rows = [0] * self.arity  # diffs buffered per port (a running count)

    def open(self, store: StateStore | None) -> None:
        if store is None:
            raise ValueError(f"{self.name} is stateful and needs a StateStore")
        self.table = store.table(self.name, self.tuning)  # type: ignore[arg-type]

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        if batch:
            pending = self._pending[port]
            pending.append(batch)
            # counted as they come (a sum over the pending batches per batch was quadratic in
            # a time of many small transactions); a time's first batch starts the count anew,
            # however the time's end reset the list
            n = len(batch) if len(pending) == 1 else self._pending_rows[port] + len(batch)
            self._pending_rows[port] = n
            # at least doubled since the last compaction: amortized linear when the diffs do not
            # cancel or repeat
            if self.compact_rows and n > self.compact_rows and n > 2 * len(pending[0]):
                pending[:] = [DiffBatch.concat(pending).consolidate()]
                self._pending_rows[port] = len(pending[0])
                self.compactions += 1
        return DiffBatch()

    def on_time_end(self, time: int) -> DiffBatch:
        deltas = [DiffBatch.concat(p).consolidate() for p in self._pending]
        self._pending = [[] for _ in range(self.arity)]
        if not any(deltas) and not self.always_process:
            return DiffBatch()
        return self.process(time, deltas)

    #: call ``process`` even when no input changed (e.g. a global aggregate's first output)
    always_process: ClassVar[bool] = False
    #: whether its output changes rows it output before time after time even when its input
    #: only grows (a reduce's groups, a top-k's selection): population defers what it feeds
    #: (``dataflow.deferred_updates``)
    updates_output: ClassVar[bool] = False

    @abstractmethod
    def process(self, time: int, deltas: list[DiffBatch]) -> DiffBatch:
        """Apply one time's consolidated input deltas (one per port); return the output diffs.

        Reads must go to the committed state (``self.table``); writes are staged.
        """
