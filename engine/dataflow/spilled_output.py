"""``SpilledOutput``: a time's consolidated output that stayed on disk (the sink's spill store).

``ConsolidateCollection`` returns one when a time's distinct output rows outgrew its bound: the
rows and net weights stay in the scratch RocksDB they were summed in, and ``chunks()`` reads them
back a bounded number at a time, so the result sink can stream them into Postgres without ever
holding the whole time in Python lists. Any other reader gets an ordinary ``DiffBatch`` view of
it: ``rows``/``weights`` load everything into memory on first use (population and tests). The
scratch store is deleted by ``close()`` or when the object is dropped. Holds no durable state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from engine.dataflow.batch import DiffBatch
from engine.dataflow.nan import loads
from engine.dataflow.state.store import ScratchTable


class SpilledOutput(DiffBatch):
    """``count`` consolidated diffs held in ``scratch`` (pickled ``(row, weight)`` values)."""

    __slots__ = ("_scratch", "_count", "chunk_rows", "keep_alive")

    def __init__(self, scratch: ScratchTable, count: int, chunk_rows: int) -> None:
        super().__init__()
        self._rows = self._weights = None
        self._scratch: ScratchTable | None = scratch
        self._count = count
        self.chunk_rows = max(int(chunk_rows), 1)
        #: what must live as long as the output (the temporary directory it is held in)
        self.keep_alive: object = None

    def chunks(self) -> Iterator[DiffBatch]:
        """The diffs, at most ``chunk_rows`` per batch, in key order (no row twice)."""
        if self._rows is not None:
            yield DiffBatch(self._rows, self._weights)
            return
        if self._scratch is None:
            raise RuntimeError("this spilled output was closed")
        rows: list = []
        weights: list[int] = []
        for _, v in self._scratch.items():
            r, w = loads(v)  # NaN comes back as the shared NaN (engine.dataflow.nan)
            rows.append(r)
            weights.append(w)
            if len(rows) >= self.chunk_rows:
                yield DiffBatch(rows, weights)
                rows, weights = [], []
        if rows:
            yield DiffBatch(rows, weights)

    def _load(self) -> None:
        if self._rows is None:
            joined = DiffBatch.concat(self.chunks())
            self._rows, self._weights = joined.rows, joined.weights
            self.close()

    @property
    def rows(self) -> list:
        self._load()
        return self._rows  # type: ignore[return-value]

    @property
    def weights(self) -> list[int]:
        self._load()
        return self._weights  # type: ignore[return-value]

    def __len__(self) -> int:
        return self._count if self._rows is None else len(self._rows)

    def consolidate(self) -> DiffBatch:
        return DiffBatch(list(self.rows), list(self.weights))

    def negate(self) -> DiffBatch:
        return DiffBatch(list(self.rows), [-w for w in self.weights])

    def __repr__(self) -> str:
        return f"SpilledOutput({self._count} diffs)"

    def close(self) -> None:
        """Delete the scratch store (the rows already loaded, if any, stay)."""
        if self._scratch is not None:
            self._scratch.close()
            self._scratch = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing to report to
            self.close()
