"""The guard rails of ``Engine.create_view``: the result table's name must be free, and a failed
creation leaves nothing behind.

``check_result_name_free`` refuses a view whose result table (or its staging table) would take
the name of a relation or type that already exists: a user's table, an index, a sequence, another
view's result table (``public.x`` and ``x`` name the same table). ``CreationUndo.record`` notes,
before create_view changes anything, whether the result schema exists; ``undo`` then takes back what a failed creation added:
its result and staging tables, and the result schema if it created it and the schema is empty.
The catalog row, the state directory, the publication and the slot are the engine's to put
back (``Engine._release_sources`` publishes what the remaining views read). This module must
not plan, populate or decide whether a view is created.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql

from engine.errors import ViewError
from engine.postgres.sink import drop_result_table, staging_name
from engine.postgres.view_catalog import ViewRecord

log = logging.getLogger(__name__)

_KINDS = {
    "r": "a table",
    "p": "a partitioned table",
    "v": "a view",
    "m": "a materialized view",
    "i": "an index",
    "I": "a partitioned index",
    "S": "a sequence",
    "f": "a foreign table",
    "c": "a composite type",
    "t": "a TOAST table",
}


def check_result_name_free(
    conn: psycopg.Connection, records: list[ViewRecord], name: str, schema: str, table: str
) -> None:
    """Raise ``ViewError`` if view ``name``'s result table ``schema.table`` cannot be created."""
    for r in records:
        if (r.result_schema, r.result_table) == (schema, table):
            raise ViewError(
                f"view {r.name} already exists with result table {schema}.{table}, the table "
                f"view {name} would write: use another name"
            )
    for candidate in (table, staging_name(table)):
        row = conn.execute(
            "SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s "
            "UNION ALL SELECT 'type' FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE n.nspname = %s AND t.typname = %s LIMIT 1",
            (schema, candidate, schema, candidate),
        ).fetchone()
        if row is not None:
            what = "a type" if row[0] == "type" else _KINDS.get(row[0], "a relation")
            raise ViewError(
                f"{what} named {schema}.{candidate} already exists, and view {name} needs that "
                "name for its result table: use another view name (incview never writes into "
                "a table it did not create)"
            )


@dataclass(frozen=True)
class CreationUndo:
    """What existed before a ``create_view``; ``undo`` takes back what it added."""

    schema: str
    table: str
    schema_existed: bool

    @classmethod
    def record(cls, conn: psycopg.Connection, schema: str, table: str) -> CreationUndo:
        has_schema = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
        return cls(schema, table, has_schema is not None)

    def undo(self, conn: psycopg.Connection, own_result: bool) -> None:
        """Best effort (each step on its own; the caller re-raises the original error).
        ``own_result``: the view's population committed its result table (it is ours)."""
        steps = [self._drop_staging]
        if own_result:
            steps.append(self._drop_result)
        steps.append(self._drop_new_schema)
        for step in steps:
            try:
                step(conn)
            except Exception as e:  # noqa: BLE001 (the caller's error is the one to report)
                log.warning("undoing a failed create_view (%s): %s", step.__name__, e)

    def _drop_staging(self, conn: psycopg.Connection) -> None:
        staging = sql.Identifier(self.schema, staging_name(self.table))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging))

    def _drop_result(self, conn: psycopg.Connection) -> None:
        drop_result_table(conn, self.schema, self.table)

    def _drop_new_schema(self, conn: psycopg.Connection) -> None:
        if not self.schema_existed:
            with contextlib.suppress(psycopg.errors.DependentObjectsStillExist):
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} RESTRICT").format(sql.Identifier(self.schema))
                )
