"""The result sink's row path (a part of ``ResultSink``): tables with a column the Arrow COPY has
no binary encoding of (inet, cidr, arrays), or ``arrow_copy=False``.

A time's ``(row, weight)`` pairs go by ``write_row`` (text or binary COPY, psycopg's dumpers)
into a temp table dropped at commit, then the delete and ``INSERT ... SELECT`` apply it.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
from psycopg import sql

from engine.dataflow.batch import DiffBatch
from engine.dataflow.spilled_output import SpilledOutput

DIFFS = "incview_sink_diffs"  # temp table of one transaction's diffs (ON COMMIT DROP)


class SinkRowPath:
    """``ResultSink``'s writes by rows."""

    def _write_rows(self, cur: psycopg.Cursor, diffs: DiffBatch) -> int:
        """A time's diffs by the row path: write_row into the diff table, DELETE, INSERT ...
        SELECT; returns the rows deleted + inserted."""
        ws = diffs.weights
        n_del = -sum(w for w in ws if w < 0)
        n_ins = sum(w for w in ws if w > 0)
        multi = n_ins > 0 and max(ws) > 1
        if n_del or n_ins:
            pairs = zip(diffs.rows, ws, strict=True)
            self._write_diffs(cur, self._target, DIFFS, pairs, n_del, n_ins, multi)
        return n_del + n_ins

    def _write_diffs(
        self,
        cur: psycopg.Cursor,
        target: sql.Composable,
        tmp: str,
        pairs: Iterable[tuple[tuple, int]],
        n_del: int,
        n_ins: int,
        multi: bool,
    ) -> None:
        """COPY consolidated ``pairs`` into temp table ``tmp``, then delete and insert in ``target``
        (``apply`` made the ``SET LOCAL``s)."""
        self._create_tmp(cur, tmp)
        self._copy_weighted(cur, tmp, pairs)
        self._apply_tmp(cur, target, tmp, n_del, n_ins, multi)

    def _create_tmp(self, cur: psycopg.Cursor, name: str) -> None:
        cur.execute(
            sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP").format(
                sql.Identifier(name), self._tmp_defs
            )
        )

    def _copy_weighted(
        self, cur: psycopg.Cursor, name: str, pairs: Iterable[tuple[tuple, int]]
    ) -> None:
        """Binary-COPY ``(row, weight)`` pairs into the temp table ``name`` (streamed)."""
        with cur.copy(
            sql.SQL("COPY {} FROM STDIN (FORMAT {})").format(sql.Identifier(name), self._format)
        ) as cp:
            cp.set_types([*self._tmp_copy_types, "int8"])
            write = cp.write_row
            encode = self._encode
            if encode is not None:
                for row, w in pairs:
                    write((*encode(row), w))
                return
            for row, w in pairs:
                write((*row, w))

    def _copy_spilled_rows(
        self, cur: psycopg.Cursor, diffs: SpilledOutput
    ) -> tuple[int, int, bool]:
        self._create_tmp(cur, DIFFS)
        n_del = n_ins = top = 0
        for chunk in diffs.chunks():
            ws = chunk.weights
            n_del -= sum(w for w in ws if w < 0)
            n_ins += sum(w for w in ws if w > 0)
            top = max(top, max(ws))
            self._copy_weighted(cur, DIFFS, zip(chunk.rows, ws, strict=True))
        return n_del, n_ins, top > 1
