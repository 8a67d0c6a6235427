"""ConsolidateCollection: the sink's consolidator. Emits each time's net diff once, at TimeEnd.

Columnar batches (``DiffBatch.columns``) are kept as they come and consolidated at TimeEnd by
one Arrow group-by (``kernels.consolidate_columns``), so a columnar time reaches the sink as
columns; past ``spill_rows`` held rows they are consolidated, and what stays larger goes to
Arrow IPC files in hash partitions (``spilled_columns``), returned as ``SpilledColumns``. Row
batches (or a mix) are summed per row in memory; past ``spill_rows`` distinct rows the sums move
to a scratch RocksDB under the view's state directory (seed 003: a 50 GB transaction must not
need 50 GB of RAM). Such a time's output stays there: it is returned as a ``SpilledOutput``
that the sink reads ``spill_rows`` at a time. Rows whose weights cancel out are
never emitted, so the sink writes only real changes. Holds no durable state: leftover scratch
stores (a crash) are deleted when the collection opens; without a state store the scratch lives
in a temporary directory removed with the collection (once its spilled outputs are gone too).
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import weakref
from itertools import islice
from pathlib import Path

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.collection import Collection
from engine.dataflow.nan import loads
from engine.dataflow.spilled_columns import ColumnSpill
from engine.dataflow.spilled_output import SpilledOutput
from engine.dataflow.state.keycodec import encode_key
from engine.dataflow.state.store import ScratchTable, StateStore

_SPILL_SLICE = 20_000  # rows moved to the spill store per write (bounds the temporary lists)


class ConsolidateCollection(Collection):
    takes_columns = True

    def __init__(self, spill_rows: int = 1_000_000) -> None:
        super().__init__()
        self.spill_rows = spill_rows
        self._acc: dict[Row, int] = {}
        self._spill: ScratchTable | None = None
        self._spill_dir: Path | None = None
        self._temp: _TemporaryDirectory | None = None  # the spill directory without a store
        self._spill_count = 0  # distinct rows in the spill store
        self.spilled = False  # whether the last time went through the spill store (for tests)
        self.spilled_times = 0  # how many times went through it (counters)
        self._columnar: list[DiffBatch] = []  # columnar batches of the time, while all are
        self._columnar_rows = 0
        self._column_spill: ColumnSpill | None = None  # the time's columnar batches on disk

    def open(self, store: StateStore | None) -> None:
        if store is not None:
            self._spill_dir = store.path.parent / (store.path.name + ".spill")
            shutil.rmtree(self._spill_dir, ignore_errors=True)  # scratch of a crashed process

    def on_diffs(self, port: int, batch: DiffBatch) -> DiffBatch:
        if batch.columns is not None and not self._acc and self._spill is None:
            self._columnar.append(batch)  # consolidated at TimeEnd by an Arrow group-by
            self._columnar_rows += len(batch)
            if self._columnar_rows > self.spill_rows:
                self._spill_columns()
            return DiffBatch()
        if self._columnar or self._column_spill is not None:
            self._rows_from_columns()
        self._add(batch)
        return DiffBatch()

    def _rows_from_columns(self) -> None:
        """The time's columnar batches (held and spilled) into the row sums (a row batch came)."""
        batches, self._columnar, self._columnar_rows = self._columnar, [], 0
        if self._column_spill is not None:
            spilled, self._column_spill = self._column_spill.output(self.spill_rows), None
            for chunk in spilled.chunks():
                self._add(chunk)
            spilled.close()
        for b in batches:
            self._add(b)

    def _spill_columns(self) -> None:
        """The held columnar batches outgrew ``spill_rows``: consolidated by one Arrow group-by,
        kept if that halved them, else written to the time's column spill."""
        joined = DiffBatch.concat(self._columnar)
        self._columnar, self._columnar_rows = [], 0
        if joined.columns is None:  # column types differ between the batches: rows
            self._add(joined)
            return
        joined = joined.consolidate()
        if len(joined) <= self.spill_rows // 2:
            self._columnar, self._columnar_rows = [joined], len(joined)
            return
        if self._column_spill is None:
            self._column_spill = ColumnSpill(
                Path(tempfile.mkdtemp(prefix="columns-", dir=self._scratch_dir()))
            )
        self._column_spill.add(joined)

    def _add(self, batch: DiffBatch) -> None:
        """Sum ``batch`` into the in-memory sums, spilling them whenever they reach
        ``spill_rows`` rows (the batch is taken a slice at a time, so they never pass it)."""
        rows, weights = batch.rows, batch.weights
        n = len(rows)
        i = 0
        while i < n:
            acc = self._acc
            get = acc.get
            j = min(n, i + max(self.spill_rows - len(acc), 1))
            for r, w in zip(islice(rows, i, j), islice(weights, i, j), strict=True):
                acc[r] = get(r, 0) + w
            i = j
            if len(acc) >= self.spill_rows:
                self._spill_out()

    def _scratch_dir(self) -> Path:
        if self._spill_dir is None:  # no state store: a temporary directory
            self._temp = _TemporaryDirectory()
            self._spill_dir = self._temp.path
        self._spill_dir.mkdir(parents=True, exist_ok=True)
        return self._spill_dir

    def _spill_out(self) -> None:
        """Add the in-memory sums into the spill store, ``_SPILL_SLICE`` rows at a time."""
        if self._spill is None:
            # one directory per time: the output of a time may still be read by the sink
            self._spill = ScratchTable(tempfile.mkdtemp(prefix="time-", dir=self._scratch_dir()))
            self._spill_count = 0
        pending = iter(self._acc.items())
        while piece := list(islice(pending, _SPILL_SLICE)):
            items = [(encode_key(r), r, w) for r, w in piece if w]
            old = self._spill.get_many([k for k, _, _ in items])
            puts: dict[bytes, bytes] = {}
            deletes: list[bytes] = []
            for (k, r, w), prev in zip(items, old, strict=True):
                if prev is not None:
                    w += loads(prev)[1]
                if w:
                    puts[k] = pickle.dumps((r, w))
                    self._spill_count += prev is None
                elif prev is not None:
                    deletes.append(k)
                    self._spill_count -= 1
            self._spill.write(puts, deletes)
        self._acc = {}

    def on_time_end(self, time: int) -> DiffBatch:
        if self._column_spill is not None:
            if self._columnar:
                self._column_spill.add(DiffBatch.concat(self._columnar).consolidate())
                self._columnar, self._columnar_rows = [], 0
            out = self._column_spill.output(self.spill_rows)
            out.keep_alive = self._temp
            self._column_spill = None
            self.spilled = True
            self.spilled_times += 1
            return out
        if self._columnar:
            joined = DiffBatch.concat(self._columnar)
            self._columnar, self._columnar_rows = [], 0
            if joined.columns is not None:
                self.spilled = False
                return joined.consolidate()
            self._add(joined)
        if self._spill is None:
            out = DiffBatch.from_counts(self._acc)
            self._acc = {}
            self.spilled = False
            return out
        self._spill_out()
        out = SpilledOutput(self._spill, self._spill_count, self.spill_rows)
        out.keep_alive = self._temp
        self._spill = None
        self.spilled = True
        self.spilled_times += 1
        return out

    def describe(self) -> str:
        return "Consolidate (sink)"


class _TemporaryDirectory:
    """A directory removed when the last of the sink and its spilled outputs is gone."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="incview-spill-"))
        weakref.finalize(self, shutil.rmtree, self.path, ignore_errors=True)
