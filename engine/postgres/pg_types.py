"""A column's Postgres type as incview's ``SqlType``, resolved through pg_type.

``format_type`` alone cannot tell an enum or a domain from an unknown type, nor name an array of
them. ``TypeResolver(conn).resolve(type_oid, typmod)`` reads ``pg_type`` once per type: a domain
is its base type (recursively; incview computes on the base type's values, as Postgres does), an
enum carries its qualified name and its labels in their declared order, an array its element
type; any other type incview cannot carry gives ``types.unsupported(<its name>)``, which the
planner refuses only where a view uses the column. Only reads; one cached query per type.
"""

from __future__ import annotations

import psycopg

from engine.postgres.pgoutput import quote_ident
from engine.sql import types
from engine.sql.types import SqlType, TypeKind

_TYPE = """
SELECT t.typtype, t.typbasetype, t.typtypmod, t.typelem, t.typcategory,
       format_type(t.oid, %s), n.nspname, t.typname,
       CASE WHEN t.typtype = 'e' THEN array(
           SELECT e.enumlabel::text FROM pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder)
       END
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE t.oid = %s
"""


class TypeResolver:
    """``SqlType`` of type oids of one database (cached; types are immutable enough for a
    planning session: a changed enum or domain is a schema change the drift check reports)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self._cache: dict[tuple[int, int], SqlType] = {}

    def resolve(self, type_oid: int, typmod: int = -1) -> SqlType:
        key = (type_oid, typmod)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._read(type_oid, typmod, depth=0)
        return t

    def _read(self, type_oid: int, typmod: int, depth: int) -> SqlType:
        row = self.conn.execute(_TYPE, (typmod, type_oid)).fetchone()
        if row is None:
            return types.unsupported(f"type oid {type_oid}")
        typtype, base, base_mod, elem, category, formatted, schema, name, labels = row
        if typtype == "d" and depth < 16:
            return self._read(base, base_mod, depth + 1)
        if typtype == "e":
            qualified = f"{quote_ident(schema)}.{quote_ident(name)}"
            return types.enum_type(qualified, tuple(labels))
        if category == "A" and elem:
            element = self._read(elem, typmod, depth + 1)
            if element.kind in (TypeKind.UNSUPPORTED, TypeKind.ARRAY):
                return types.unsupported(formatted)
            return types.array_of(element)
        try:
            return types.from_pg_name(formatted)
        except ValueError:
            return types.unsupported(formatted)
