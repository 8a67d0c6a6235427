"""A progress bar for populations: rows read of the view's source tables, against the tables'
row estimates (``pg_class.reltuples``), with rate and ETA.

Shown on stderr when it is a terminal (the CLI, a notebook) or when ``INCVIEW_PROGRESS=1``;
silent otherwise (tests, Dagster runs, which log the population time instead). Uses ``tqdm``.
This module must not read or write data.
"""

from __future__ import annotations

import os
import sys

from engine.sql.catalog import SourceTable


def _wanted() -> bool:
    flag = os.environ.get("INCVIEW_PROGRESS")
    if flag is not None:
        return flag not in ("0", "", "false", "no")
    return sys.stderr.isatty()


class PopulationProgress:
    """``with PopulationProgress(view, tables) as p: p.update(rows)``"""

    def __init__(self, view: str, tables: list[tuple[SourceTable, tuple[str, ...], str | None]]):
        # filtered reads: the estimate is the tables' size, an upper bound
        estimates = [t[0].row_estimate for t in tables]
        self.total = sum(e for e in estimates if e) if all(estimates) else None
        self.view = view
        self.rows = 0
        self._bar = None
        if _wanted():
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                desc=f"populating {view}",
                unit=" rows",
                unit_scale=True,
                file=sys.stderr,
                dynamic_ncols=True,
            )

    def update(self, rows: int) -> None:
        self.rows += rows
        if self._bar is not None:
            self._bar.update(rows)

    def __enter__(self) -> PopulationProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
