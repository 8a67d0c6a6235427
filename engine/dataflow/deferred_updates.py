"""Population: collections fed only by reduces (or top-ks, windows) process once, at the end.

A population pushes its sources through the dataflow a chunk per time. A reduce then outputs, at
every time, the groups the chunk touched: their old aggregate retracted, the new one inserted.
What it feeds redoes its work for each of those versions, and all but the last cancel out in the
result (TPC-H Q10: the top 20 of 38k customer groups, re-sorted over 57 times of its population
while the groups' sums grow). A population cut short starts again from empty state, so a
collection need not be consistent at every time of it, only at the last one.

``deferred(df)`` holds back, for the block's duration, each stateful collection all of whose
inputs come (through stateless collections) from collections that update their output
(``StatefulCollection.updates_output``): it keeps what it is sent buffered, consolidated as the
buffer doubles past ``COMPACT_ROWS`` (versions of one group cancel, so the buffer stays near
one row per group), and processes nothing. The population ends the block before its last time,
which then processes every buffered diff once. Collections below a held one simply receive
nothing until then. One with an input from a source is not held: it would buffer that source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from engine.dataflow.graph import Dataflow, Node

#: a held collection consolidates its buffered input past this many diffs (when doubled)
COMPACT_ROWS = 100_000


def held_nodes(df: Dataflow) -> list[Node]:
    """The nodes ``deferred`` holds: stateful, every input fed by an updating collection."""
    return [
        node
        for node in df.nodes
        if node.collection.stateful and node.inputs and all(map(_fed_by_updates, node.inputs))
    ]


def _fed_by_updates(node: Node) -> bool:
    """Whether ``node``'s output comes from an updating collection through one-input stateless
    collections (or is that collection's)."""
    while not node.collection.stateful:
        if len(node.inputs) != 1:
            return False  # a source (no input) or a union of several
        node = node.inputs[0]
    return bool(getattr(node.collection, "updates_output", False))


@contextlib.contextmanager
def deferred(df: Dataflow) -> Iterator[list[Node]]:
    """Inside: ``held_nodes(df)`` buffer their input and process nothing (see the module
    docstring); after: the next time processes all of it."""
    held = held_nodes(df)
    bounds = [n.collection.compact_rows for n in held]
    for n in held:
        n.deferred = True
        n.collection.compact_rows = COMPACT_ROWS
    try:
        yield held
    finally:
        for n, rows in zip(held, bounds, strict=True):
            n.deferred = False
            n.collection.compact_rows = rows
