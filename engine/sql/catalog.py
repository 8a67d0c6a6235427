"""Source schemas the planner resolves table and column names against.

A ``Catalog`` answers "what are the columns of schema.table?" with ``SourceTable``s. Two
implementations: ``DictCatalog`` for unit tests and embedded use (a dict of table -> columns ->
type names), and (with the Postgres slice) one reading Postgres' catalog. Unqualified names are
looked up in ``public``. This module must not parse SQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.sql.types import SqlType, from_pg_name


@dataclass(frozen=True)
class SourceColumn:
    name: str
    type: SqlType
    nullable: bool = True
    distinct: float | None = None  # estimated number of distinct values (join ordering), if known
    # the type as Postgres' format_type prints it (a domain's or an enum's own name), if known
    pg_type: str | None = None


@dataclass(frozen=True)
class SourceTable:
    schema: str
    name: str
    columns: tuple[SourceColumn, ...]
    row_estimate: int | None = None  # statistics for join ordering, when known
    #: column names of each key no two rows share (the primary key, unique indexes of NOT NULL
    #: columns): the planner derives unique rows from them (``engine.sql.unique_rows``)
    keys: tuple[tuple[str, ...], ...] = ()

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


class Catalog(Protocol):
    def lookup(self, schema: str | None, name: str) -> SourceTable | None:
        """The table ``schema.name`` (``schema`` None: the search path, i.e. ``public``)."""
        ...


class DictCatalog:
    """A catalog from a mapping ``{"table" or "schema.table": {"column": "type name", ...}}``.

    A type name may end in `` not null``. ``row_estimates`` optionally maps table -> row count,
    ``distinct_estimates`` ``"table.column"`` -> number of distinct values, ``keys`` table ->
    its unique keys (each a list of column names, e.g. the primary key).

    >>> c = DictCatalog({"orders": {"id": "int not null", "amount": "numeric(10,2)"}})
    >>> [col.name for col in c.lookup(None, "orders").columns]
    ['id', 'amount']
    """

    def __init__(
        self,
        tables: Mapping[str, Mapping[str, str]],
        row_estimates: Mapping[str, int] | None = None,
        distinct_estimates: Mapping[str, float] | None = None,
        keys: Mapping[str, Sequence[Sequence[str]]] | None = None,
    ) -> None:
        self._tables: dict[tuple[str, str], SourceTable] = {}
        estimates = dict(row_estimates or {})
        distinct = dict(distinct_estimates or {})
        for qualified, cols in tables.items():
            schema, _, name = qualified.rpartition(".")
            schema = schema or "public"
            columns = []
            for col, type_name in cols.items():
                t = type_name.strip()
                not_null = t.lower().endswith(" not null")
                if not_null:
                    t = t[: -len(" not null")]
                columns.append(
                    SourceColumn(
                        col,
                        from_pg_name(t),
                        not not_null,
                        distinct.get(f"{qualified}.{col}", distinct.get(f"{name}.{col}")),
                    )
                )
            est = estimates.get(qualified, estimates.get(name))
            unique = (keys or {}).get(qualified, (keys or {}).get(name, ()))
            self._tables[(schema, name)] = SourceTable(
                schema, name, tuple(columns), est, tuple(tuple(k) for k in unique)
            )

    def lookup(self, schema: str | None, name: str) -> SourceTable | None:
        return self._tables.get((schema or "public", name))

    def tables(self) -> list[SourceTable]:
        return list(self._tables.values())
