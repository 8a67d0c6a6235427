"""Where population feeds a reduce the partial aggregates Postgres computed instead of rows.

``candidates(df)`` lists the reduces of a built dataflow that carry a ``population_query``
(``engine.sql.population_aggregate``) and whose source then need not be read at all, each with
the node to mute: the top of the chain of stateless collections between the source's input and
the reduce that feeds nothing else. ``muted(nodes)`` mutes them for the population's duration;
``source_needed(df, source)`` says whether a source's rows still reach any collection. This
module must not decide what Postgres can compute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from engine.dataflow.graph import Dataflow, InputCollection, Node


def candidates(df: Dataflow) -> list[tuple[Node, Node]]:
    """(reduce node, node to mute) of every reduce with a population query whose source then
    need not be read at all: where the source's rows are read for another collection anyway,
    a second scan by Postgres (and a preload of as many groups as rows, at worst) costs more
    than the reduce's own work on those rows (TPC-H Q18's ``IN (... GROUP BY l_orderkey ...)``
    at SF 1: 1.5M groups, population 9 -> 14 s)."""
    found = _all_candidates(df)
    with muted([top for _, top in found]):
        return [
            (node, top)
            for node, top in found
            if not source_needed(df, node.collection.population_query.table)
        ]


def _all_candidates(df: Dataflow) -> list[tuple[Node, Node]]:
    out = []
    for node in df.nodes:
        query = getattr(node.collection, "population_query", None)
        if query is None or _source_below(node) != query.table:
            continue
        top = node
        while len(top.inputs) == 1:
            up = top.inputs[0]
            if isinstance(up.collection, InputCollection) or len(up.consumers) != 1:
                break
            top = up
        out.append((node, top))
    return out


def _source_below(node: Node) -> str | None:
    """The source whose input reaches ``node`` through stateless one-input collections only."""
    up = node.inputs[0] if len(node.inputs) == 1 else None
    while up is not None and not up.collection.stateful:
        if isinstance(up.collection, InputCollection):
            return up.collection.source
        up = up.inputs[0] if len(up.inputs) == 1 else None
    return None


@contextlib.contextmanager
def muted(nodes: list[Node]) -> Iterator[None]:
    """Inside: diffs delivered to ``nodes`` are dropped."""
    for n in nodes:
        n.muted = True
    try:
        yield
    finally:
        for n in nodes:
            n.muted = False


def source_needed(df: Dataflow, source: str) -> bool:
    """Whether rows pushed to ``source`` reach any collection that is not muted."""
    return any(not consumer.muted for consumer, _ in df.input_node(source).consumers)
