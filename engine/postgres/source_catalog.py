"""The planner's ``Catalog`` backed by Postgres' own catalog: source tables and their columns.

``PostgresCatalog.lookup(schema, name)`` reads columns (``format_type``), NOT NULL flags, a row
estimate (``pg_class.reltuples``) and the replica identity of ordinary tables, resolving
unqualified names through ``public`` (the planner's rule). Unknown tables give ``None``; a column
of a type incview cannot carry raises ``ViewError`` naming table, column and type. Only reads.
"""

from __future__ import annotations

import psycopg

from engine.errors import ViewError
from engine.sql.catalog import SourceColumn, SourceTable
from engine.sql.types import from_pg_name

_QUERY = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       c.reltuples::bigint, c.relreplident, c.relkind
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY a.attnum
"""

REPLICA_IDENTITY = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}


class PostgresCatalog:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.replica_identity: dict[str, str] = {}
        self.kinds: dict[str, str] = {}

    def lookup(self, schema: str | None, name: str) -> SourceTable | None:
        schema = schema or "public"
        rows = self.conn.execute(_QUERY, (schema, name)).fetchall()
        if not rows:
            return None
        columns = []
        for attname, type_name, notnull, *_ in rows:
            try:
                t = from_pg_name(type_name)
            except ValueError:
                raise ViewError(
                    f"column {schema}.{name}.{attname} has type {type_name}, which incview cannot "
                    f"maintain yet; leave the column out of the view or cast it in a source view"
                ) from None
            columns.append(SourceColumn(attname, t, not notnull))
        reltuples, replident, relkind = rows[0][3], rows[0][4], rows[0][5]
        qualified = f"{schema}.{name}"
        self.replica_identity[qualified] = REPLICA_IDENTITY.get(replident, replident)
        self.kinds[qualified] = relkind
        return SourceTable(
            schema, name, tuple(columns), reltuples if reltuples and reltuples > 0 else None
        )
