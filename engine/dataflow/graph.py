"""Dataflow: a DAG of collections for one view, driven by Diffs and TimeEnd messages.

Build it with ``input(name)`` and ``add(collection, *inputs)``, then ``build(output)``. Drive it
with ``push(input, batch)`` and ``time_end(t)``, which returns the time's consolidated output and
errs diffs, then ``commit(t)`` once the sink has durably written that output.

Message passing is synchronous and FIFO per edge: diffs pass through stateless collections at
once (chains of them are fused into one callback), stateful collections buffer them, and a
collection with several inputs finishes ``t`` only after ``TimeEnd(t)`` arrived on every port
(``Node.frontier``). Stateful collections get column-family names from their position in a
deterministic order, so reopening the same plan on the same state directory resumes its state.
The errs collection (all scalar evaluation errors, with multiplicities) is kept in state too, so
that deleting a bad row after a restart still retracts its error.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection, StatefulCollection
from engine.dataflow.collections.consolidate import ConsolidateCollection
from engine.dataflow.collections.fused_chain import FusedChainCollection
from engine.dataflow.state.keycodec import encode_key
from engine.dataflow.state.store import StateStore


class InputCollection(Collection):
    """Where a source's diffs enter the dataflow."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        return batch

    def describe(self) -> str:
        return f"Input: {self.source}"


@dataclass(eq=False)
class Node:
    collection: Collection
    inputs: list[Node]
    consumers: list[tuple[Node, int]] = field(default_factory=list)
    frontier: list[int | None] = field(default_factory=list)
    done: int | None = None
    #: drops the diffs delivered to it (population feeds the reduce above it otherwise)
    muted: bool = False
    #: keeps the diffs delivered to it buffered across times, processing none
    #: (``deferred_updates``: population's collections fed by reduces)
    deferred: bool = False


@dataclass(frozen=True)
class TimeOutput:
    """What one time produced: the view's net change and the errs collection's net change."""

    time: int
    diffs: DiffBatch
    errs: DiffBatch


_ERRS_TABLE = "errs"


class Dataflow:
    def __init__(self, store: StateStore | None = None, fuse: bool = True) -> None:
        self.store = store
        self.fuse = fuse
        self._inputs: dict[str, Node] = {}
        self._nodes: list[Node] = []
        self._output: Node | None = None
        self._sink = ConsolidateCollection()
        self._errs_delta: list[DiffBatch] = []
        self._last_time: int | None = store.committed_time if store is not None else None
        self._uncommitted: int | None = None
        self._built = False
        self._explain_only = False

    # -- building -------------------------------------------------------------------------------
    def input(self, source: str) -> Node:
        if source in self._inputs:
            return self._inputs[source]
        node = Node(InputCollection(source), [])
        self._inputs[source] = node
        self._nodes.append(node)
        return node

    def add(self, collection: Collection, *inputs: Node) -> Node:
        if self._built:
            raise RuntimeError("the dataflow is already built")
        if len(inputs) != collection.arity:
            raise ValueError(
                f"{collection.describe()} takes {collection.arity} inputs, got {len(inputs)}"
            )
        node = Node(collection, list(inputs))
        self._nodes.append(node)
        return node

    def build(self, output: Node) -> Dataflow:
        """Fix the output, fuse stateless chains, name and open stateful collections."""
        sink = Node(self._sink, [output])
        self._nodes.append(sink)
        order = self._topological(sink)
        if self.fuse:
            order = self._fuse(order)
        self._nodes = order
        for node in order:
            node.consumers = []
        for node in order:
            node.frontier = [None] * len(node.inputs)
            for port, up in enumerate(node.inputs):
                up.consumers.append((node, port))
        self._explain_only = self.store is None and any(n.collection.stateful for n in order)
        for i, node in enumerate(order):
            if node.collection.stateful:
                node.collection.name = f"{i:03d}_{type(node.collection).__name__}"
                if self._explain_only:
                    continue  # no state store: a graph to print, not to run
            node.collection.open(self.store)
        self._sink.open(self.store)
        self._output = sink
        self._built = True
        return self

    def _topological(self, sink: Node) -> list[Node]:
        order: list[Node] = []
        seen: set[int] = set()

        def visit(n: Node) -> None:
            if id(n) in seen:
                return
            seen.add(id(n))
            for up in n.inputs:
                visit(up)
            order.append(n)

        visit(sink)
        for node in self._inputs.values():  # inputs the output does not read still accept pushes
            visit(node)
        return order

    def _fuse(self, order: list[Node]) -> list[Node]:
        fanout: dict[int, int] = {}
        for n in order:
            for up in n.inputs:
                fanout[id(up)] = fanout.get(id(up), 0) + 1

        def fusable(n: Node) -> bool:
            c = n.collection
            return (
                not c.stateful
                and c.arity == 1
                and not isinstance(c, (InputCollection, ConsolidateCollection))
            )

        replaced: dict[int, Node] = {}
        result: list[Node] = []
        for n in order:
            n.inputs = [replaced.get(id(u), u) for u in n.inputs]
            if fusable(n):
                up = n.inputs[0]
                if fusable(up) and fanout.get(id(up), 0) == 1 and up in result:
                    steps = (
                        up.collection.steps
                        if isinstance(up.collection, FusedChainCollection)
                        else [up.collection]
                    )
                    fused = Node(FusedChainCollection([*steps, n.collection]), up.inputs)
                    result[result.index(up)] = fused
                    replaced[id(n)] = fused
                    replaced[id(up)] = fused
                    continue
            result.append(n)
        return result

    def sources_above(self, node: Node) -> set[str]:
        """The sources whose rows reach ``node`` (through any collections)."""
        found, todo, seen = set(), [node], set()
        while todo:
            n = todo.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if isinstance(n.collection, InputCollection):
                found.add(n.collection.source)
            todo.extend(n.inputs)
        return found

    # -- driving --------------------------------------------------------------------------------
    def reads_columns(self, source: str) -> bool:
        """Whether Arrow columns of ``source`` reach a collection that computes on them: from
        the input through the stateless collections to the first stateful ones (or the sink).
        Where none does, columns would only be turned into tuples on the way."""
        todo, seen = [self._inputs[source]], set()
        while todo:
            node = todo.pop()
            for consumer, _ in node.consumers:
                c = consumer.collection
                if c.takes_columns:
                    return True
                if not c.stateful and id(consumer) not in seen:
                    seen.add(id(consumer))
                    todo.append(consumer)
        return False

    def push(self, source: str, batch: DiffBatch) -> None:
        """Diffs of source ``source`` for the time in progress."""
        self._check_runnable()
        if source not in self._inputs:
            raise KeyError(f"the dataflow has no input {source!r}: {sorted(self._inputs)}")
        if self._uncommitted is not None:
            raise RuntimeError(f"time {self._uncommitted} is not committed yet")
        if batch:
            self._deliver(self._inputs[source], 0, batch)

    def time_end(self, time: int) -> TimeOutput:
        """Close ``time`` on every input; returns the consolidated output and errs of that time."""
        self._check_runnable()
        if self._last_time is not None and time <= self._last_time:
            raise ValueError(f"time {time} is not after the last closed time {self._last_time}")
        if self._uncommitted is not None:
            raise RuntimeError(f"time {self._uncommitted} is not committed yet")
        for node in self._nodes:
            if not node.inputs:
                self._close(node, time)
        assert self._output is not None and self._output.done == time
        self._last_time = time
        self._uncommitted = time
        out, self._sink_output = self._sink_output, None
        errs = self._apply_errs()
        return TimeOutput(time, out, errs)

    def bound_memory(self, max_buffered_changes: int) -> None:
        """Keep a time's buffered diffs near ``max_buffered_changes`` (0: no bound).

        Several ``push`` es may make one time (a huge source transaction arrives in chunks): the
        sink's consolidator spills past that many distinct rows (and returns a ``SpilledOutput``),
        and each stateful collection consolidates its buffered input when it grows past it
        (which bounds it when the input repeats rows, e.g. the projected columns of a GROUP BY;
        distinct rows stay in memory until the time ends)."""
        if max_buffered_changes <= 0:
            return
        self._sink.spill_rows = max_buffered_changes
        for c in self._stateful():
            c.compact_rows = max_buffered_changes

    @contextlib.contextmanager
    def inputs_uncompacted(self) -> Iterator[None]:
        """Inside: stateful collections buffer their input as it comes (population, whose times
        its chunks bound); after: ``bound_memory``'s bound again."""
        stateful = self._stateful()
        bounds = [c.compact_rows for c in stateful]
        for c in stateful:
            c.compact_rows = 0
        try:
            yield
        finally:
            for c, rows in zip(stateful, bounds, strict=True):
                c.compact_rows = rows

    @property
    def nodes(self) -> list[Node]:
        """The built graph's nodes, inputs before their consumers (read-only use)."""
        return self._nodes

    def input_node(self, source: str) -> Node:
        return self._inputs[source]

    def _stateful(self) -> list[StatefulCollection]:
        return [n.collection for n in self._nodes if isinstance(n.collection, StatefulCollection)]

    @property
    def sink_spills(self) -> int:
        """How many times went through the sink's spill store since the dataflow was built."""
        return self._sink.spilled_times

    @property
    def compactions(self) -> int:
        """How often stateful collections consolidated their buffered input (``bound_memory``)."""
        return sum(c.compactions for c in self._stateful())

    def _check_runnable(self) -> None:
        if not self._built:
            raise RuntimeError("build() the dataflow first")
        if self._explain_only:
            raise RuntimeError(
                "this dataflow has stateful collections but no StateStore: explain only"
            )

    def commit(self, time: int) -> None:
        """The sink has durably written ``time``: make the state of ``time`` durable."""
        if self._uncommitted != time:
            raise RuntimeError(f"commit({time}) but the time in progress is {self._uncommitted}")
        if self.store is not None:
            self.store.commit(time)
        self._uncommitted = None

    def abort(self) -> None:
        """Forget the uncommitted time (the sink failed); replay it from the committed state."""
        if self.store is not None:
            self.store.rollback()
        if self._uncommitted is not None:
            self._last_time = self.store.committed_time if self.store is not None else None
            for node in self._nodes:  # the aborted time is processed again when replayed
                node.done = _earlier(node.done, self._last_time)
                node.frontier = [_earlier(f, self._last_time) for f in node.frontier]
        self._uncommitted = None
        self._errs_delta = []

    @property
    def committed_time(self) -> int | None:
        return self.store.committed_time if self.store is not None else None

    def _deliver(self, node: Node, port: int, batch: DiffBatch) -> None:
        if node.muted:
            return
        out = node.collection.on_diffs(port, batch)
        self._collect_errors(node)
        if out:
            for consumer, cport in node.consumers:
                self._deliver(consumer, cport, out)

    def _close(self, node: Node, time: int) -> None:
        if node.inputs and any(f is None or f < time for f in node.frontier):
            return
        if node.done is not None and node.done >= time:
            return
        out = DiffBatch() if node.deferred else node.collection.on_time_end(time)
        self._collect_errors(node)
        node.done = time
        if node is self._output:
            self._sink_output = out
            return
        if out:
            for consumer, cport in node.consumers:
                self._deliver(consumer, cport, out)
        for consumer, cport in node.consumers:
            consumer.frontier[cport] = time
            self._close(consumer, time)

    # -- errs collection ------------------------------------------------------------------------
    def _collect_errors(self, node: Node) -> None:
        errs = node.collection.take_errors()
        if errs:
            self._errs_delta.append(errs)

    def _apply_errs(self) -> DiffBatch:
        delta = DiffBatch.concat(self._errs_delta).consolidate()
        self._errs_delta = []
        if delta and self.store is not None:
            table = self.store.table(_ERRS_TABLE, "point")
            keys = [encode_key(r) for r in delta.rows]
            for k, r, w, old in zip(
                keys, delta.rows, delta.weights, table.get_many(keys), strict=True
            ):
                n = w + (pickle.loads(old)[1] if old is not None else 0)
                if n:
                    table.put(k, pickle.dumps((r, n)))
                else:
                    table.delete(k)
        return delta

    def errors(self) -> dict[str, int]:
        """The committed errs collection: message -> multiplicity (empty when the view is healthy)."""
        if self.store is None:
            return {}
        out = {}
        for _, v in self.store.table(_ERRS_TABLE, "point").scan_all():
            (msg,), n = pickle.loads(v)
            out[msg] = n
        return out

    # -- explain --------------------------------------------------------------------------------
    def explain(self) -> str:
        """The physical plan as an indented tree, sink first; stateful collections marked."""
        lines: list[str] = []
        printed: dict[int, int] = {}

        def show(node: Node, depth: int) -> None:
            c = node.collection
            ref = printed.get(id(node))
            pad = "  " * depth
            if ref is not None:
                lines.append(f"{pad}-> (shared #{ref}) {c.describe()}")
                return
            printed[id(node)] = len(printed) + 1
            mark = f"  [state: {c.name}]" if c.stateful else ""
            lines.append(f"{pad}#{printed[id(node)]} {c.describe()}{mark}")
            for up in node.inputs:
                show(up, depth + 1)

        assert self._output is not None
        show(self._output, 0)
        return "\n".join(lines)


def _earlier(t: int | None, limit: int | None) -> int | None:
    """``t`` capped at ``limit`` (None: nothing closed yet)."""
    if t is None or limit is None:
        return None if limit is None else t
    return min(t, limit)
