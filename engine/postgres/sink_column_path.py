"""The result sink's column path (a part of ``ResultSink``): a time's diffs by binary COPY from
their Arrow columns, with no Python per row (``diff_copy``).

Retractions go with their weights into the session's diff table and leave the result table by
one DELETE; insertions go straight into the result table, each row as many times as its weight
(a few ride along in the diff table when there are deletes: one COPY less). A spilled time is
COPYed a chunk at a time.
"""

from __future__ import annotations

import numpy as np
import psycopg
from psycopg import sql

from engine.dataflow.batch import DiffBatch
from engine.dataflow.spilled_output import SpilledOutput
from engine.errors import ViewError
from engine.postgres.copy_binary import CopyValueError
from engine.postgres.diff_weights import DiffWeights

# a time with deletes and at most this many rows to insert inserts them from the diff table
# (INSERT ... SELECT) instead of a second COPY: one round trip less for the small times
_FEW_INSERTS = 1_000


class SinkColumnPath:
    """``ResultSink``'s writes by columns."""

    def _write_columns(self, cur: psycopg.Cursor, diffs: DiffBatch, weights: DiffWeights) -> int:
        """A time's diffs by binary COPY from their columns: retractions (and a few insertions
        riding along) into the diff table (``apply`` emptied it) and one DELETE, insertions
        straight into the result table; returns the rows deleted + inserted."""
        assert self._diff_copy is not None
        w, gone, new, n_del, n_ins = weights
        if not (n_del or n_ins):
            return 0
        columns = self._diff_copy.columns(diffs)
        # with deletes, a few inserts ride along in the diff table (one COPY less)
        along = bool(n_del and n_ins and len(new) <= _FEW_INSERTS)
        if n_del:
            tmp = self._session_diffs
            rows = np.flatnonzero(w) if along else gone
            self._copy_columns(cur, columns, rows, w[rows], into_diffs=True)
            if along:
                self._apply_tmp(cur, self._target, tmp, n_del, n_ins, bool(w[new].max() > 1))
            else:
                self._delete_tmp(cur, self._target, tmp, n_del)
        if n_ins and not along:
            self._copy_columns(cur, columns, new, w[new], into_diffs=False)
        return n_del + n_ins

    def _copy_columns(
        self,
        cur: psycopg.Cursor,
        columns: list,
        positions: np.ndarray,
        weights: np.ndarray,
        *,
        into_diffs: bool,
        table: sql.Composable | None = None,
    ) -> None:
        """COPY rows ``positions`` of ``columns``: with their weights into the diff table, or
        ``weights`` times each into the result table (or into ``table`` of the same layout)."""
        assert self._diff_copy is not None
        try:
            if into_diffs:
                if table is None:
                    target = sql.Identifier(self._session_diffs)
                    self._diff_rows += len(positions)
                else:
                    target = table
                self._diff_copy.copy_weighted(cur, target, columns, positions, weights)
            else:
                target = self._target if table is None else table
                self._diff_copy.copy_repeated(
                    cur, target, self._col_list, columns, positions, weights
                )
        except CopyValueError as e:
            name, t = self.columns[e.column]
            raise ViewError(
                f"{e}: view {self.view} produced a value that column {name} ({t.sql()}) of "
                f"result table {self.qualified_name} cannot hold; nothing was written"
            ) from e

    def _copy_spilled_columns(self, cur: psycopg.Cursor, diffs: SpilledOutput) -> tuple[int, int]:
        assert self._diff_copy is not None
        n_del = n_ins = 0
        for chunk in diffs.chunks():
            w, gone, new, chunk_del, chunk_ins = DiffWeights.of(chunk)
            columns = self._diff_copy.columns(chunk)
            if len(gone):
                if not n_del:
                    self._diff_table(cur)
                n_del += chunk_del
                self._copy_columns(cur, columns, gone, w[gone], into_diffs=True)
            if len(new):
                n_ins += chunk_ins
                self._copy_columns(cur, columns, new, w[new], into_diffs=False)
        return n_del, n_ins
