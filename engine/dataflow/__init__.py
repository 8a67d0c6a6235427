"""The incremental dataflow core: Z-set batches of diffs flowing through collections.

``Dataflow`` wires collections (``engine.dataflow.collections``, one type per module) into a DAG
ending in the sink's consolidator; ``StateStore`` keeps the stateful collections' state in one
RocksDB per view, committed atomically per time. ``engine.dataflow.testing`` holds the harness
(random writers, the recompute oracle) used by tests and benchmarks.
"""

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collection import Collection, StatefulCollection
from engine.dataflow.graph import Dataflow, TimeOutput
from engine.dataflow.messages import Diffs, TimeEnd
from engine.dataflow.state.store import StateStore

__all__ = [
    "Collection",
    "Dataflow",
    "DiffBatch",
    "Diffs",
    "StateStore",
    "StatefulCollection",
    "TimeEnd",
    "TimeOutput",
]
