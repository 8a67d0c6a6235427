"""The partitions and inheritance children of source tables, as Postgres' catalog says now.

``SELECT ... FROM parent`` reads the rows of every partition (declarative partitioning, any
depth) and every inheritance child (``CREATE TABLE child () INHERITS (parent)``), but logical
decoding reports each change under the leaf table that holds the row. incview therefore needs
to know, for a source table, which tables hang below it (``descendants``: to publish inheritance
children, check their REPLICA IDENTITY and notice when the set changes), and, for a changed leaf,
which tables it hangs below (``ancestors``: to report its changes under the parent's name too).
Both follow ``pg_inherits``, which holds partitions and inheritance children alike. This module
only reads the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

_DESCENDANTS = """
WITH RECURSIVE below(relid, depth) AS (
    SELECT i.inhrelid, 1 FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhparent JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %s AND c.relname = %s
  UNION ALL
    SELECT i.inhrelid, b.depth + 1 FROM pg_inherits i JOIN below b ON i.inhparent = b.relid
    WHERE b.depth < 100
)
SELECT DISTINCT n.nspname::text, c.relname::text, c.relkind::text, c.relreplident::text
FROM below b JOIN pg_class c ON c.oid = b.relid JOIN pg_namespace n ON n.oid = c.relnamespace
ORDER BY 1, 2
"""

# every table below each of several roots, in one query: per root the names in
# ``_DESCENDANTS``' order (schema, then name)
_DESCENDANT_NAMES = """
WITH RECURSIVE roots(root, oid) AS (
    SELECT r.schema || '.' || r.name, c.oid
    FROM unnest(%s::text[], %s::text[]) AS r(schema, name)
    JOIN pg_namespace n ON n.nspname = r.schema
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.name
), below(root, relid, depth) AS (
    SELECT r.root, i.inhrelid, 1 FROM roots r JOIN pg_inherits i ON i.inhparent = r.oid
  UNION ALL
    SELECT b.root, i.inhrelid, b.depth + 1 FROM pg_inherits i JOIN below b ON i.inhparent = b.relid
    WHERE b.depth < 100
)
SELECT DISTINCT b.root, n.nspname::text, c.relname::text
FROM below b JOIN pg_class c ON c.oid = b.relid JOIN pg_namespace n ON n.oid = c.relnamespace
ORDER BY 1, 2, 3
"""

_ANCESTORS = """
WITH RECURSIVE above(relid, depth) AS (
    SELECT inhparent, 1 FROM pg_inherits WHERE inhrelid = %s
  UNION ALL
    SELECT i.inhparent, a.depth + 1 FROM pg_inherits i JOIN above a ON i.inhrelid = a.relid
    WHERE a.depth < 100
)
SELECT DISTINCT n.nspname::text || '.' || c.relname::text
FROM above a JOIN pg_class c ON c.oid = a.relid JOIN pg_namespace n ON n.oid = c.relnamespace
"""


@dataclass(frozen=True)
class Descendant:
    """A table below a source table: a partition (``relkind`` 'r' leaf, 'p' sub-partitioned,
    'f' foreign) or an inheritance child ('r'); ``replident`` is ``pg_class.relreplident``."""

    schema: str
    name: str
    relkind: str
    replident: str

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


def descendants(conn: psycopg.Connection, schema: str, table: str) -> list[Descendant]:
    """Every table below ``schema.table`` (all depths), sorted by name; [] for a plain table."""
    return [Descendant(*row) for row in conn.execute(_DESCENDANTS, (schema, table)).fetchall()]


def name_arrays(tables: list[str]) -> tuple[list[str], list[str]]:
    """The schemas and the names of ``schema.table`` strings, as two lists: the parameters of a
    catalog query that unnests them and finds each table through ``pg_class``'s name index.

    >>> name_arrays(["public.t", "s.u.v"])
    (['public', 's'], ['t', 'u.v'])
    """
    parts = [t.partition(".") for t in tables]
    return [schema for schema, _, _ in parts], [name for _, _, name in parts]


def descendant_names(conn: psycopg.Connection, tables: list[str]) -> dict[str, list[str]]:
    """``schema.table`` -> the qualified names of the tables below it (what a view's population
    read through it); compared later to notice an ATTACH, DETACH or new child."""
    out: dict[str, list[str]] = {t: [] for t in tables}
    if not tables:
        return out
    rows = conn.execute(_DESCENDANT_NAMES, name_arrays(tables)).fetchall()
    for root, schema, name in rows:  # one round trip for all of them (every catch_up asks)
        out[root].append(f"{schema}.{name}")
    return out


def ancestors(conn: psycopg.Connection, oid: int) -> list[str]:
    """The qualified names of every table the relation ``oid`` hangs below (partitioned roots
    and inheritance parents, all depths); [] for a table that is nobody's partition or child."""
    return sorted(r[0] for r in conn.execute(_ANCESTORS, (oid,)).fetchall())
