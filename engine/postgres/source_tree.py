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


def descendant_names(conn: psycopg.Connection, tables: list[str]) -> dict[str, list[str]]:
    """``schema.table`` -> the qualified names of the tables below it (what a view's population
    read through it); compared later to notice an ATTACH, DETACH or new child."""
    out = {}
    for t in tables:
        schema, _, name = t.partition(".")
        out[t] = [d.qualified_name for d in descendants(conn, schema, name)]
    return out


def ancestors(conn: psycopg.Connection, oid: int) -> list[str]:
    """The qualified names of every table the relation ``oid`` hangs below (partitioned roots
    and inheritance parents, all depths); [] for a table that is nobody's partition or child."""
    return sorted(r[0] for r in conn.execute(_ANCESTORS, (oid,)).fetchall())
