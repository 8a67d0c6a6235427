"""The planner's ``Catalog`` backed by Postgres' own catalog: source tables and their columns.

``PostgresCatalog.lookup(schema, name)`` reads columns (``format_type``), NOT NULL flags, a row
estimate (``pg_class.reltuples``), per-column distinct-value estimates (``pg_stats``, for join
ordering), the unique keys of tables (primary key, unique indexes of NOT NULL columns) and the
replica identity of ordinary tables, resolving
unqualified names through ``public`` (the planner's rule). Unknown tables give ``None``; column types
are resolved through pg_type (``pg_types``: domains as their base type, enums with their labels,
arrays); a column of a type incview cannot carry gets ``types.unsupported``, refused by the
planner where a view uses it. Only reads.
"""

from __future__ import annotations

import psycopg

from engine.postgres.pg_types import TypeResolver
from engine.postgres.source_tree import name_arrays
from engine.sql.catalog import SourceColumn, SourceTable

# n_distinct (pg_stats, after ANALYZE): > 0 a count, < 0 minus a fraction of the rows
_QUERY = """
SELECT a.attname, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       c.reltuples::bigint, c.relreplident, c.relkind, st.n_distinct
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_stats st
  ON st.schemaname = n.nspname AND st.tablename = c.relname AND st.attname = a.attname
  AND NOT st.inherited
WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY a.attnum
"""

# the table's keys no two rows share: its unique indexes (the primary key's among them) that are
# valid, checked at once (not DEFERRABLE), on plain columns all NOT NULL, without a predicate;
# of a partitioned table (its indexes hold across the partitions) or a table without inheritance
# children (a SELECT of the parent reads theirs too, which its index does not cover); the tables
# by (schema, name) through pg_class's name index
_KEYS = """
SELECT r.schema || '.' || r.name,
       array(SELECT a.attname::text FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             ORDER BY k.ord)
FROM unnest(%s::text[], %s::text[]) AS r(schema, name)
JOIN pg_namespace n ON n.nspname = r.schema
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.name
JOIN pg_index i ON i.indrelid = c.oid
WHERE (c.relkind = 'p' OR (c.relkind = 'r' AND NOT EXISTS (
         SELECT FROM pg_inherits h WHERE h.inhparent = c.oid)))
  AND i.indisunique AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL
  AND i.indexprs IS NULL AND i.indnkeyatts = i.indnatts
  AND NOT EXISTS (SELECT FROM unnest(i.indkey) AS k(attnum)
                  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                  WHERE NOT a.attnotnull)
ORDER BY 1, i.indisprimary DESC, i.indexrelid
"""


def unique_keys(conn: psycopg.Connection, tables: list[str]) -> dict[str, list[tuple[str, ...]]]:
    """table ("schema.table") -> its keys no two rows share (column names; the primary key
    first), as the catalog says now (a table without one absent)."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for table, columns in conn.execute(_KEYS, name_arrays(tables)).fetchall():
        out.setdefault(table, []).append(tuple(columns))
    return out


REPLICA_IDENTITY = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}


class PostgresCatalog:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.replica_identity: dict[str, str] = {}
        self.kinds: dict[str, str] = {}
        self.types = TypeResolver(conn)

    def lookup(self, schema: str | None, name: str) -> SourceTable | None:
        schema = schema or "public"
        rows = self.conn.execute(_QUERY, (schema, name)).fetchall()
        if not rows:
            return None
        columns = []
        reltuples = rows[0][5]
        for attname, type_oid, typmod, formatted, notnull, _rt, _ri, _rk, n_distinct in rows:
            t = self.types.resolve(type_oid, typmod)
            distinct = _distinct(n_distinct, reltuples)
            columns.append(SourceColumn(attname, t, not notnull, distinct, formatted))
        replident, relkind = rows[0][6], rows[0][7]
        qualified = f"{schema}.{name}"
        self.replica_identity[qualified] = REPLICA_IDENTITY.get(replident, replident)
        self.kinds[qualified] = relkind
        keys = unique_keys(self.conn, [qualified]).get(qualified, [])
        return SourceTable(
            schema,
            name,
            tuple(columns),
            reltuples if reltuples and reltuples > 0 else None,
            tuple(keys),
        )

    def view_definition(self, schema: str | None, name: str) -> tuple[str, str, list[str]] | None:
        """``(schema.name, definition, column names)`` when ``schema.name`` is a view
        (``engine.sql.source_views`` plans it over its definition), else None."""
        schema = schema or "public"
        row = self.conn.execute(_VIEW, (schema, name)).fetchone()
        if row is None:
            return None
        return f"{schema}.{name}", row[0], list(row[1])


_VIEW = """
SELECT pg_get_viewdef(c.oid, true),
       array(SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s AND c.relkind = 'v'
"""


def view_definitions(conn: psycopg.Connection, views: list[str]) -> dict[str, str]:
    """View ("schema.name") -> its definition (``pg_get_viewdef``) now; absent views absent."""
    rows = conn.execute(
        "SELECT n.nspname || '.' || c.relname, pg_get_viewdef(c.oid, true) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'v' AND n.nspname || '.' || c.relname = ANY(%s)",
        (views,),
    ).fetchall()
    return dict(rows)


def _distinct(n_distinct: float | None, reltuples: int | None) -> float | None:
    """pg_stats' ``n_distinct`` as a count (a negative value is minus a fraction of the rows)."""
    if n_distinct is None or n_distinct == 0:
        return None
    if n_distinct > 0:
        return float(n_distinct)
    return -float(n_distinct) * reltuples if reltuples and reltuples > 0 else None
