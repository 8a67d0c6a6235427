"""Lineage of incview views, derived from their SQL text alone (no database needed).

``source_tables(sql)`` parses a view's SELECT with the planner's front end
(``engine.sql.parse.parse_query``, sqlglot's postgres dialect) and returns every table it reads
as ``(schema, table)``: CTE and sub-query names are resolved through sqlglot's scopes and are not
tables; unqualified names read ``public`` (the planner's rule); unquoted identifiers fold to lower
case as Postgres folds them. ``view_lineage(views)`` then splits each view's inputs into other
declared views (a view reading ``schema.table`` of another view's result table depends on that
view) and Postgres source tables. Dagster code locations load this at definition time, so this
module must not connect to a database or plan the query.

Example::

    >>> source_tables("SELECT o.id FROM shop.orders o JOIN customers c ON o.cid = c.id")
    (('public', 'customers'), ('shop', 'orders'))
"""

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from engine import parse_query
from incview_dagster.view import IncView

DEFAULT_SCHEMA = "public"


def _identifier(node: exp.Expression | None) -> str | None:
    if node is None:
        return None
    if isinstance(node, exp.Identifier):
        return node.name if node.quoted else node.name.lower()
    return node.name.lower()


def source_tables(sql: str) -> tuple[tuple[str, str], ...]:
    """Every table ``sql`` reads, as sorted ``(schema, table)`` pairs (see the module docstring).

    Raises ``engine.UnsupportedSQL`` when ``sql`` is not one SELECT statement.
    """
    query = parse_query(sql)
    found: set[tuple[str, str]] = set()
    for scope in traverse_scope(query):
        for source in scope.sources.values():
            if isinstance(source, exp.Table) and source.args.get("this") is not None:
                schema = _identifier(source.args.get("db")) or DEFAULT_SCHEMA
                table = _identifier(source.args.get("this"))
                if table:
                    found.add((schema, table))
    return tuple(sorted(found))


@dataclass(frozen=True)
class ViewLineage:
    """What one view reads: other declared views (by name) and Postgres tables."""

    view: IncView
    upstream_views: tuple[str, ...]
    source_tables: tuple[tuple[str, str], ...]


def view_lineage(views: Sequence[IncView]) -> dict[str, ViewLineage]:
    """View name -> its lineage; a table that is another declared view's result table counts as
    that view. Raises ``ValueError`` on two views with one result table or a view reading itself."""
    by_table: dict[tuple[str, str], IncView] = {}
    for view in views:
        key = (view.result_schema, view.result_table)
        if key in by_table:
            raise ValueError(
                f"views {by_table[key].name} and {view.name} both write result table "
                f"{key[0]}.{key[1]}: give one of them another name"
            )
        by_table[key] = view
    lineage = {}
    for view in views:
        upstream: list[str] = []
        sources: list[tuple[str, str]] = []
        for table in source_tables(view.sql):
            other = by_table.get(table)
            if other is view:
                raise ValueError(
                    f"view {view.name} reads its own result table {view.qualified_name}"
                )
            if other is not None:
                upstream.append(other.name)
            else:
                sources.append(table)
        lineage[view.name] = ViewLineage(view, tuple(upstream), tuple(sources))
    return lineage
