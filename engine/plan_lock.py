"""A view's state is only readable by the plan that wrote it: keep that plan across processes.

The planner orders joins by the sources' statistics (``pg_class.reltuples``, ``pg_stats``), which
change under a running view (autovacuum's ANALYZE). Re-planned with new statistics, a view's
SQL may get another join order: the same state column families then hold other collections'
rows, and the view goes silently wrong. So a view is planned with the statistics it was created
with (``PlanStats``, saved as ``views/<name>/plan_stats.json``; ``FrozenStats`` serves them to
the planner), and the physical plan its state was built by is fingerprinted
(``views/<name>/plan.sha256``): if the plan still differs (a new incview version plans it
otherwise), the engine re-populates the view instead of reading its state with another plan.
This module only keeps the files; ``engine.Engine`` decides.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from engine.sql.catalog import Catalog, SourceTable

STATS_FILE = "plan_stats.json"
FINGERPRINT_FILE = "plan.sha256"


class PlanStats:
    """The row and distinct-value estimates a view was planned with, per source table."""

    def __init__(self, tables: dict[str, dict]) -> None:
        self.tables = tables

    @classmethod
    def of_sources(cls, sources) -> PlanStats:
        return cls(
            {
                s.qualified_name: {
                    "rows": s.row_estimate,
                    "distinct": {c.name: c.distinct for c in s.columns},
                }
                for s in sources
            }
        )

    @classmethod
    def load(cls, view_dir: Path) -> PlanStats | None:
        p = view_dir / STATS_FILE
        return cls(json.loads(p.read_text())) if p.exists() else None

    def save(self, view_dir: Path) -> None:
        view_dir.mkdir(parents=True, exist_ok=True)
        tmp = view_dir / (STATS_FILE + ".tmp")
        tmp.write_text(json.dumps(self.tables, sort_keys=True))
        tmp.replace(view_dir / STATS_FILE)


class FrozenStats:
    """A planner ``Catalog``: ``inner``'s tables with the statistics of ``stats`` (a table the
    view did not read when it was created keeps its current ones)."""

    def __init__(self, inner: Catalog, stats: PlanStats) -> None:
        self.inner = inner
        self.stats = stats

    def lookup(self, schema: str | None, name: str) -> SourceTable | None:
        table = self.inner.lookup(schema, name)
        if table is None:
            return None
        saved = self.stats.tables.get(table.qualified_name)
        if saved is None:
            return table
        distinct = saved.get("distinct", {})
        columns = tuple(
            dataclasses.replace(c, distinct=distinct.get(c.name)) for c in table.columns
        )
        return dataclasses.replace(table, columns=columns, row_estimate=saved.get("rows"))

    def __getattr__(self, name: str):
        return getattr(self.inner, name)  # kinds, replica_identity... of the inner catalog


def fingerprint(physical_explain: str) -> str:
    return hashlib.sha256(physical_explain.encode()).hexdigest()


def saved_fingerprint(view_dir: Path) -> str | None:
    p = view_dir / FINGERPRINT_FILE
    return p.read_text().strip() if p.exists() else None


def save_fingerprint(view_dir: Path, value: str) -> None:
    view_dir.mkdir(parents=True, exist_ok=True)
    tmp = view_dir / (FINGERPRINT_FILE + ".tmp")
    tmp.write_text(value)
    tmp.replace(view_dir / FINGERPRINT_FILE)
