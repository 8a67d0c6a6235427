"""A time's columnar output on disk: Arrow IPC files in hash partitions (the sink's columnar spill).

``ColumnSpill`` takes the columnar batches of a time that outgrew ``ConsolidateCollection``'s
bound: each is split by a hash of its rows' key bytes (``kernels.key_bytes_array``: equal under
GROUP BY equality gives equal bytes) into ``PARTS`` partitions, and each piece is written as an
Arrow IPC file (columns plus the weights), so equal rows always land in the same partition.
``SpilledColumns`` (a ``SpilledOutput``) reads the partitions back one at a time: a partition's
pieces are concatenated and consolidated by one Arrow group-by, and its rows come out in
batches of at most ``chunk_rows``; no row comes out twice and memory holds one partition at a
time. A partition still larger than ``SPLIT_FACTOR`` chunks is split again by another hash
before it is read. The directory is deleted by ``close()`` or when the object is dropped. Holds
no durable state.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from engine.dataflow.batch import DiffBatch
from engine.dataflow.columnar import kernels as K
from engine.dataflow.spilled_output import SpilledOutput

PARTS = 16
SPLIT_FACTOR = 8  # a partition of more rows than this many chunks is split again
_WEIGHT = "__weight"


def _partitions(columns: list[pa.Array], seed: int) -> np.ndarray:
    """Each row's partition (0 .. PARTS-1), from its key bytes and ``seed``."""
    keys = K.key_bytes_array(columns)
    if keys.type != pa.large_binary():
        keys = keys.cast(pa.large_binary())
    offsets = np.frombuffer(keys.buffers()[1], np.int64, len(keys) + 1, keys.offset * 8)
    data = (
        np.frombuffer(keys.buffers()[2], np.uint8) if keys.buffers()[2] else np.zeros(0, np.uint8)
    )
    hashes = K.string_hashes(data, offsets)
    if seed:
        hashes = K.combine_hashes(hashes, np.full(len(hashes), seed, np.uint64))
    return (hashes % np.uint64(PARTS)).astype(np.int64)


class ColumnSpill:
    """Pieces of columnar batches in ``directory``, by hash partition (see the module)."""

    def __init__(self, directory: Path, seed: int = 0) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self.files: list[list[Path]] = [[] for _ in range(PARTS)]
        self.rows = [0] * PARTS  # rows written per partition (before consolidation)
        self._written = 0

    def add(self, batch: DiffBatch) -> None:
        """Write a columnar batch's rows into their partitions."""
        columns, weights = batch.columns, np.asarray(batch.column_weights, np.int64)
        assert columns is not None
        if not len(weights):
            return
        parts = _partitions(columns, self.seed)
        order = K.stable_order(parts, PARTS)
        bounds = np.searchsorted(parts[order], np.arange(PARTS + 1))
        for p in range(PARTS):
            a, b = int(bounds[p]), int(bounds[p + 1])
            if a == b:
                continue
            at = pa.array(order[a:b])
            arrays = [c.take(at) for c in columns] + [pa.array(weights[order[a:b]])]
            names = [f"c{i}" for i in range(len(columns))] + [_WEIGHT]
            table = pa.RecordBatch.from_arrays(arrays, names=names)
            path = self.directory / f"{p:02d}-{self._written:06d}.arrow"
            self._written += 1
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_batch(table)
            self.files[p].append(path)
            self.rows[p] += b - a

    def output(self, chunk_rows: int) -> SpilledColumns:
        return SpilledColumns(self, chunk_rows)


def _read(path: Path) -> DiffBatch:
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    columns = [table.column(i).combine_chunks() for i in range(table.num_columns - 1)]
    weights = table.column(_WEIGHT).to_numpy()
    return DiffBatch.from_columns(columns, weights)


class SpilledColumns(SpilledOutput):
    """A time's consolidated columnar output held by a ``ColumnSpill`` (at most ``len(self)``
    diffs: pieces of one row in several batches are summed when read)."""

    __slots__ = ("_spill",)

    def __init__(self, spill: ColumnSpill, chunk_rows: int) -> None:
        DiffBatch.__init__(self)
        self._rows = self._weights = None
        self._scratch = None
        self._spill: ColumnSpill | None = spill
        self._count = sum(spill.rows)
        self.chunk_rows = max(int(chunk_rows), 1)
        self.keep_alive = None

    def chunks(self) -> Iterator[DiffBatch]:
        """The diffs, partition by partition, at most ``chunk_rows`` per batch (no row twice)."""
        if self._rows is not None:
            yield DiffBatch(self._rows, self._weights)
            return
        if self._spill is None:
            raise RuntimeError("this spilled output was closed")
        yield from self._partition_chunks(self._spill)

    def _partition_chunks(self, spill: ColumnSpill) -> Iterator[DiffBatch]:
        for p in range(PARTS):
            if not spill.files[p]:
                continue
            if spill.rows[p] > SPLIT_FACTOR * self.chunk_rows and spill.seed < 4:
                sub = ColumnSpill(spill.directory / f"split-{p:02d}", spill.seed + 1)
                for path in spill.files[p]:
                    sub.add(_read(path))
                    path.unlink()
                yield from self._partition_chunks(sub)
                continue
            joined = DiffBatch.concat([_read(path) for path in spill.files[p]]).consolidate()
            yield from joined.slices(self.chunk_rows)

    def __repr__(self) -> str:
        return f"SpilledColumns(<= {self._count} diffs)"

    def close(self) -> None:
        """Delete the spill files (the rows already loaded, if any, stay)."""
        if self._spill is not None:
            shutil.rmtree(self._spill.directory, ignore_errors=True)
            self._spill = None
