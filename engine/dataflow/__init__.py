"""The incremental dataflow core: Z-set batches of diffs flowing through collections.

``Dataflow`` wires collections (``engine.dataflow.collections``, one type per module) into a DAG
ending in the sink's consolidator; ``StateStore`` keeps the stateful collections' state in one
RocksDB per view, committed atomically per time. ``engine.dataflow.testing`` holds the harness
(random writers, the recompute oracle) used by tests and benchmarks.
"""

import importlib

# where each public name lives: imported on first use (PEP 562), so that importing one light
# module of the package (e.g. ``engine.dataflow.batch`` in a Spark planner worker) does not
# load the whole dataflow (collections, kernels, pandas)
_HOMES = {
    "Collection": "engine.dataflow.collection",
    "Dataflow": "engine.dataflow.graph",
    "DiffBatch": "engine.dataflow.batch",
    "Diffs": "engine.dataflow.messages",
    "StateStore": "engine.dataflow.state.store",
    "StatefulCollection": "engine.dataflow.collection",
    "TimeEnd": "engine.dataflow.messages",
    "TimeOutput": "engine.dataflow.graph",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = sorted(_HOMES)
