"""``SpilledChanges``: the part of one huge source transaction's diffs kept on disk, not in RAM.

While ``CdcReader.poll`` gathers a transaction, every ``max_buffered_changes`` diffs it moves the
rows gathered so far into one of these: chunks of ``(table, column names, rows, weights)``
pickled one after the other into an anonymous temporary file (unlinked at once, so a crash
leaves nothing behind; the file goes away when the transaction object is dropped). Reading
gives the chunks back in order as ``DiffBatch`` es, re-shaped by column name to the table's
final shape (a schema change inside the transaction) and without the chunks a later TRUNCATE of
the same table in that transaction wiped. The file can be read any number of times (one read
per view). This module keeps no state beyond the file and must not know about views.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator

from engine.dataflow.batch import DiffBatch
from engine.dataflow.nan import canonical_row, may_hold_nan


class SpilledChanges:
    """Chunks of a transaction's diffs in an anonymous temporary file."""

    def __init__(self, directory: str | None = None) -> None:
        # unlinked at once; closed by close() or when dropped
        self._file = tempfile.TemporaryFile(prefix="incview-tx-", dir=directory)  # noqa: SIM115
        self._offsets: list[tuple[int, int]] = []  # (offset, length) per chunk
        self._tables: list[str] = []  # the table of each chunk
        self._sizes: list[int] = []  # diffs per chunk
        self._wiped: dict[str, int] = {}  # table -> chunks before this index were truncated
        self._end = 0

    def append(self, table: str, columns: tuple[str, ...], rows: list, weights: list) -> None:
        """One chunk of ``table``'s diffs (rows shaped as ``columns``)."""
        raw = pickle.dumps((columns, rows, weights), protocol=pickle.HIGHEST_PROTOCOL)
        self._file.seek(self._end)
        self._file.write(raw)
        self._offsets.append((self._end, len(raw)))
        self._tables.append(table)
        self._sizes.append(len(rows))
        self._end += len(raw)

    def truncate(self, table: str) -> None:
        """A TRUNCATE of ``table`` in the transaction: its chunks so far no longer count."""
        self._wiped[table] = len(self._offsets)

    @property
    def chunks(self) -> int:
        """How many chunks were written (also the wiped ones)."""
        return len(self._offsets)

    def change_count(self) -> int:
        """Diffs held in the chunks that still count."""
        return sum(n for i, n in enumerate(self._sizes) if self._counts(i))

    def _counts(self, i: int) -> bool:
        return i >= self._wiped.get(self._tables[i], 0)

    def read(self, shapes: dict[str, tuple[str, ...]]) -> Iterator[tuple[str, DiffBatch]]:
        """``(table, batch)`` per chunk, in the order written, rows re-shaped to ``shapes[table]``."""
        for i, (offset, length) in enumerate(self._offsets):
            if not self._counts(i):
                continue
            self._file.seek(offset)
            raw = self._file.read(length)
            columns, rows, weights = pickle.loads(raw)
            if may_hold_nan(raw):  # NaN comes back as the engine's one shared NaN object
                rows = [canonical_row(r) for r in rows]
            table = self._tables[i]
            final = shapes.get(table, columns)
            if final != columns:
                index = {n: j for j, n in enumerate(columns)}
                picks = [index.get(c) for c in final]
                rows = [tuple(None if j is None else r[j] for j in picks) for r in rows]
            yield table, DiffBatch(rows, weights)

    def close(self) -> None:
        self._file.close()
