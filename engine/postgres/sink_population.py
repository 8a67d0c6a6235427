"""Population of a view's result table (a part of ``ResultSink``).

``populate(batches, lsn)`` writes a view's whole content: into a new table that is renamed into
place in the transaction that records the LSN (readers never see a partial table), or, when the
result table exists (a re-population), by loading the new content into a temp table and applying
only the multiset difference to it (unchanged rows are never rewritten).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql

from engine.dataflow.batch import DiffBatch
from engine.dataflow.spilled_output import SpilledOutput
from engine.errors import ViewError
from engine.postgres.diff_weights import DiffWeights
from engine.postgres.sink_row_path import DIFFS
from engine.postgres.view_catalog import ViewCatalog
from engine.sql.types import INT_RANGES

LOADED = "incview_sink_loaded"  # temp table of a re-population's new content (ON COMMIT DROP)


class SinkPopulation:
    """``ResultSink``'s population."""

    def populate(self, batches: Iterable[DiffBatch], lsn: int) -> int:
        """Write the view's whole content (as of ``lsn``) and record ``lsn``; returns the rows
        written: the new table's row count, or the rows inserted + deleted in an existing table.

        New table: created as ``<table>__incview_new``, filled by binary COPY, then renamed into
        place in the transaction that records the LSN. Existing table (re-population): the new
        content is loaded into a temp table and only the multiset difference is applied, in one
        transaction. Weights must net to >= 0 per row (negative diffs retract earlier rows).
        """
        start = time.perf_counter()
        with (
            self._failures(f"populating (LSN {lsn:X})"),
            self.conn.transaction(),
            self.conn.cursor() as cur,
        ):
            exists = self._check_table(cur)
            if exists:
                with self.conn.transaction(), self.conn.cursor() as cur:
                    written = self._repopulate(cur, batches, lsn, start)
            else:
                written = self._populate_new(batches, lsn, start)
        self._checked = True
        return written

    def _populate_new(self, batches: Iterable[DiffBatch], lsn: int, start: float) -> int:
        conn = self.conn
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
        retract: dict[tuple, int] = {}
        inserted = 0
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._staging))
            cur.execute(sql.SQL("CREATE TABLE {} ({})").format(self._staging, self._target_defs))
            if self._diff_copy is not None:
                inserted = self._populate_columns(cur, batches, retract)
            else:
                inserted = self._populate_rows(cur, batches, retract)
            # built once over the loaded rows (cheaper than maintaining it row by row)
            cur.execute(
                sql.SQL("CREATE INDEX ON {} ({})").format(self._staging, self._row_hash_index)
            )
        deleted = 0
        with conn.transaction(), conn.cursor() as cur:
            self._lock_view(cur)
            if retract:
                self._local_settings(cur)
                deleted = -sum(retract.values())
                # strict regardless of self.strict: a population may not retract missing rows
                strict, self.strict = self.strict, True
                try:
                    self._write_diffs(cur, self._staging, DIFFS, retract.items(), deleted, 0, False)
                finally:
                    self.strict = strict
            if self._table_columns(cur, self._target) is not None:
                raise ViewError(
                    f"result table {self.qualified_name} of view {self.view} was created by "
                    "someone else while the view was populating: drop it and populate again"
                )
            cur.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    self._staging, sql.Identifier(self.table)
                )
            )
            ms = (time.perf_counter() - start) * 1000.0
            ViewCatalog.record_applied(cur, self.view, lsn, inserted - deleted, ms, None)
        return inserted - deleted

    def _populate_rows(
        self, cur: psycopg.Cursor, batches: Iterable[DiffBatch], retract: dict[tuple, int]
    ) -> int:
        """The new result table's rows by write_row, in one COPY; retractions summed into
        ``retract``. Returns the rows inserted."""
        inserted = 0
        with cur.copy(
            sql.SQL("COPY {} ({}) FROM STDIN (FORMAT {}, FREEZE)").format(
                self._staging, self._col_list, self._format
            )
        ) as cp:
            cp.set_types(self._copy_types)
            write = cp.write_row
            if self._encode is not None:
                write = _encoding(write, self._encode)
            for batch in batches:
                if self._narrow_ints:
                    self._check_int_ranges(batch.rows)
                ws = batch.weights
                if all(w == 1 for w in ws):
                    for row in batch.rows:
                        write(row)
                    inserted += len(ws)
                    continue
                for row, w in zip(batch.rows, ws, strict=True):
                    if w > 0:
                        inserted += w
                        for _ in range(w):
                            write(row)
                    elif w < 0:
                        retract[row] = retract.get(row, 0) + w
        return inserted

    def _populate_columns(
        self, cur: psycopg.Cursor, batches: Iterable[DiffBatch], retract: dict[tuple, int]
    ) -> int:
        """The new result table's rows by binary COPY from each batch's columns (a spilled
        time chunk by chunk); retractions (rows of a group an earlier chunk emitted) summed into
        ``retract``. Returns the rows inserted."""
        inserted = 0
        for chunk in _chunks(batches):
            w, gone, new, _, n_ins = DiffWeights.of(chunk)
            if len(new):
                columns = self._diff_copy.columns(chunk)
                self._copy_columns(cur, columns, new, w[new], into_diffs=False, table=self._staging)
                inserted += n_ins
            if len(gone):
                for row, wt in zip(_rows_at(chunk, gone), w[gone].tolist(), strict=True):
                    retract[row] = retract.get(row, 0) + wt
        return inserted

    def _repopulate(
        self, cur: psycopg.Cursor, batches: Iterable[DiffBatch], lsn: int, start: float
    ) -> int:
        self._lock_view(cur)
        self._local_settings(cur)
        # readers keep reading; other writers of the result table wait until we commit
        cur.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(self._target))
        self._create_tmp(cur, LOADED)
        if self._diff_copy is None:
            self._copy_weighted(cur, LOADED, _pairs(batches))
        else:  # binary COPY from columns, a spilled time chunk by chunk
            for chunk in _chunks(batches):
                w = np.asarray(chunk.column_weights, dtype=np.int64)
                rows = np.flatnonzero(w)
                columns = self._diff_copy.columns(chunk)
                loaded = sql.Identifier(LOADED)
                self._copy_columns(cur, columns, rows, w[rows], into_diffs=True, table=loaded)
        t_cols = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(sql.Identifier(n), sql.Identifier(f"c{i}"))
            for i, (n, _) in enumerate(self.columns)
        )
        cur.execute(
            sql.SQL(
                "CREATE TEMP TABLE {diffs} ON COMMIT DROP AS "
                "SELECT {pos}, sum(w)::bigint AS w FROM ("
                " SELECT {pos}, w FROM {loaded}"
                " UNION ALL SELECT {t_cols}, -1 AS w FROM {target}) AS u "
                "GROUP BY {pos} HAVING sum(w) <> 0"
            ).format(
                diffs=sql.Identifier(DIFFS),
                pos=self._pos_list,
                loaded=sql.Identifier(LOADED),
                t_cols=t_cols,
                target=self._target,
            )
        )
        row = cur.execute(
            sql.SQL(
                "SELECT coalesce(sum(-w) FILTER (WHERE w < 0), 0),"
                " coalesce(sum(w) FILTER (WHERE w > 0), 0), coalesce(max(w), 0) FROM {}"
            ).format(sql.Identifier(DIFFS))
        ).fetchone()
        assert row is not None
        n_del, n_ins, max_w = (_count_int(v) for v in row)
        self._apply_tmp(cur, self._target, DIFFS, n_del, n_ins, max_w > 1)
        ms = (time.perf_counter() - start) * 1000.0
        ViewCatalog.record_applied(cur, self.view, lsn, n_del + n_ins, ms, None)
        return n_del + n_ins

    def _check_int_ranges(self, rows: list[tuple]) -> None:
        for i, name, t in self._narrow_ints:
            values = [v for v in map(itemgetter(i), rows) if v is not None]
            if not values:
                continue
            lo, hi, message = INT_RANGES[t.kind]
            bad = [v for v in (min(values), max(values)) if not lo <= v <= hi]
            if bad:
                raise ViewError(
                    f"{message}: view {self.view} produced {bad[0]} for column {name} "
                    f"({t.sql()}) of result table {self.qualified_name}; nothing was written"
                )


def _rows_at(batch: DiffBatch, positions: np.ndarray) -> list[tuple]:
    """Rows ``positions`` of ``batch`` as tuples (only those converted, for a columnar one)."""
    if batch.columns is None:
        rows = batch.rows
        return [rows[i] for i in positions.tolist()]
    at = pa.array(positions)
    picked = [c.take(at) for c in batch.columns]
    return DiffBatch.from_columns(picked, np.ones(len(positions), np.int64)).rows


def _encoding(write: Callable[[tuple], None], encode: Callable[[tuple], tuple]) -> Callable:
    return lambda row: write(encode(row))


def _count_int(value: object) -> int:
    return int(value) if value is not None else 0


def _chunks(batches: Iterable[DiffBatch]) -> Iterator[DiffBatch]:
    """The batches, a spilled time's a bounded chunk at a time."""
    for batch in batches:
        if isinstance(batch, SpilledOutput):
            yield from batch.chunks()
        else:
            yield batch


def _pairs(batches: Iterable[DiffBatch]) -> Iterator[tuple[tuple, int]]:
    for batch in batches:
        yield from zip(batch.rows, batch.weights, strict=True)
