"""The two messages that flow between collections: ``Diffs`` and ``TimeEnd``.

``Diffs`` carries a micro-batch of diffs. ``TimeEnd(t)`` closes every source transaction up to
time ``t`` (a commit LSN): once a collection has processed its diffs and seen ``TimeEnd(t)`` on
every input, its output for ``t`` is transactionally consistent. Times only grow.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.dataflow.batch import DiffBatch


@dataclass(frozen=True, slots=True)
class Diffs:
    batch: DiffBatch


@dataclass(frozen=True, slots=True, order=True)
class TimeEnd:
    time: int


Message = Diffs | TimeEnd
