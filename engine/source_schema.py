"""What a view expects of its source tables, and whether the database still matches it.

pgoutput says nothing about DDL: a dropped, renamed or retyped column shows only in the next
change of the table (as a new Relation), and a dropped or renamed table not at all. So each view
records, when it is created, the columns its dataflow reads from each source table and their
types (``SourceSchema``, kept as ``sources.json`` in the view's directory), and the engine
compares that with Postgres' catalog when it opens the view, before each ``catch_up`` and on
each heartbeat of ``run``. A change to a column or table the view does not read is fine (the
view keeps running); a change to one it reads puts the view in the ``error`` phase with a
message naming the table and column and the fix, and the view stops being maintained (other
views go on). This module only reads the catalog; it must not change views.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import psycopg

from engine.postgres.source_catalog import unique_keys, view_definitions
from engine.postgres.source_tree import name_arrays

# the tables looked up by (schema, name) through pg_class's name index: every catch_up asks, and
# a database of many thousand tables must not be scanned whole for a few
_COLUMNS = """
SELECT r.schema || '.' || r.name, a.attname, format_type(a.atttypid, a.atttypmod)
FROM unnest(%s::text[], %s::text[]) AS r(schema, name)
JOIN pg_namespace n ON n.nspname = r.schema
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.name
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
"""

FIX = "drop the view and create it again to follow the new schema"


@dataclass(frozen=True)
class SourceSchema:
    """table ("schema.table") -> column -> type (``format_type``) the view's dataflow reads,
    the Postgres views it reads (planned over their definitions, ``engine.sql.source_views``):
    "schema.view" -> definition (``pg_get_viewdef``), and the tables' unique keys its
    collections rely on (``engine.sql.unique_rows``): "schema.table" -> lists of column names."""

    tables: Mapping[str, Mapping[str, str]]
    views: Mapping[str, str] = field(default_factory=dict)
    keys: Mapping[str, list[list[str]]] = field(default_factory=dict)

    @classmethod
    def of_plan(
        cls,
        sources,
        inputs: Mapping[str, tuple[str, ...]],
        views: Mapping[str, str] | None = None,
        keys: Mapping[str, list[tuple[str, ...]]] | None = None,
    ) -> SourceSchema:
        """From a ViewPlan's ``sources`` and ``source_views`` and the dataflow's ``inputs`` (the
        columns it reads) and ``unique_keys`` (the keys it relies on)."""
        types = {
            s.qualified_name: {c.name: c.pg_type or c.type.sql() for c in s.columns}
            for s in sources
        }
        return cls(
            {t: {c: types[t][c] for c in cols} for t, cols in inputs.items()}, dict(views or {})
        ).with_keys(keys or {})

    def with_keys(self, keys: Mapping[str, list[tuple[str, ...]]]) -> SourceSchema:
        """The same columns and views, relying on ``keys`` (a ``PhysicalPlan.unique_keys``)."""
        return replace(self, keys={t: [list(k) for k in ks] for t, ks in keys.items()})

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tables = {t: dict(c) for t, c in self.tables.items()}
        saved = {"tables": tables, "views": dict(self.views), "keys": dict(self.keys)}
        tmp.write_text(json.dumps(saved, sort_keys=True))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> SourceSchema | None:
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        if "tables" not in saved:  # written before views were recorded: tables only
            return cls(saved)  # (a table's name has a dot: it is never the key "tables")
        return cls(saved["tables"], saved.get("views", {}), saved.get("keys", {}))

    # -- checking -----------------------------------------------------------------------------
    def drift(
        self,
        conn: psycopg.Connection,
        current: Mapping[str, Mapping[str, str]] | None = None,
        definitions: Mapping[str, str] | None = None,
        keys: Mapping[str, list[tuple[str, ...]]] | None = None,
    ) -> str | None:
        """None while every table and column the view reads is there with its type, every
        source view has its definition and every key the view relies on is still unique; else
        a message naming the first one that changed. ``current`` / ``definitions`` / ``keys``:
        ``current_columns`` / ``view_definitions`` / ``unique_keys`` of (at least) the view's
        tables / source views / tables whose keys it relies on, read once for many views."""
        changed = self._view_drift(conn, definitions)
        if changed is not None:
            return changed
        if current is None:
            current = current_columns(conn, list(self.tables))
        for table, columns in sorted(self.tables.items()):
            now = current.get(table)
            if now is None:
                return f"source table {table} was dropped or renamed; {FIX}"
            for column, typ in columns.items():
                if column not in now:
                    return f"column {column} of source table {table} was dropped or renamed; {FIX}"
                if now[column] != typ:
                    return (
                        f"column {column} of source table {table} changed type from {typ} to "
                        f"{now[column]}; {FIX}"
                    )
        return self._key_drift(conn, keys)

    def _key_drift(
        self, conn: psycopg.Connection, keys: Mapping[str, list[tuple[str, ...]]] | None
    ) -> str | None:
        """The message for the first key the view relies on that no longer holds, else None."""
        if not self.keys:
            return None
        if keys is None:
            keys = unique_keys(conn, list(self.keys))
        for table, relied in sorted(self.keys.items()):
            now = [set(k) for k in keys.get(table, [])]
            for key in relied:  # still unique while a key of the table lies within its columns
                if not any(k <= set(key) for k in now):
                    return (
                        f"the unique key ({', '.join(key)}) of source table {table} was dropped "
                        f"(or made deferrable, or the table got inheritance children): the view "
                        f"relies on its rows being unique; {FIX}"
                    )
        return None

    def _view_drift(
        self, conn: psycopg.Connection, definitions: Mapping[str, str] | None
    ) -> str | None:
        """The message for the first source view dropped or re-defined since, else None."""
        if not self.views:
            return None
        if definitions is None:
            definitions = view_definitions(conn, list(self.views))
        for view, definition in sorted(self.views.items()):
            if view not in definitions:
                return f"source view {view} was dropped or renamed; {FIX}"
            if definitions[view] != definition:
                return (
                    f"source view {view} was re-defined (CREATE OR REPLACE VIEW): the view was "
                    f"planned over its old definition; {FIX}"
                )
        return None

    def missing_columns(self, table: str, columns: tuple[str, ...]) -> str | None:
        """The message for a change of ``table`` arriving without a column the view reads."""
        gone = [c for c in self.tables.get(table, {}) if c not in columns]
        if not gone:
            return None
        return f"column {gone[0]} of source table {table} was dropped or renamed; {FIX}"


def current_columns(conn: psycopg.Connection, tables: list[str]) -> dict[str, dict[str, str]]:
    """table ("schema.table") -> column -> type, as the catalog says now (absent tables absent)."""
    current: dict[str, dict[str, str]] = {}
    for table, column, typ in conn.execute(_COLUMNS, name_arrays(tables)).fetchall():
        current.setdefault(table, {})[column] = typ
    return current
