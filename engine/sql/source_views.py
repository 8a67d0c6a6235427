"""Sources that are Postgres views: planned over the view's definition, as Postgres plans them.

A view has no changes of its own (pgoutput publishes tables), so ``FROM some_view AS v`` becomes
``FROM (<the view's definition>) AS v(<its columns>)`` before the query is planned, recursively
for views over views; the changes then come from the base tables. The catalog says which names
are views and gives their definitions (``Catalog.view_definition``: ``pg_get_viewdef`` for
Postgres). ``inline_source_views`` returns the rewritten query and the definitions it used
(qualified view name -> definition text), which the view records so that a later ``CREATE OR
REPLACE VIEW`` or ``DROP VIEW`` of a source is noticed (``engine.source_schema``). A construct
incview refuses inside a definition is reported with the source view's name. This module only
rewrites the parsed query; it must not plan.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from engine.errors import UnsupportedSQL
from engine.sql.catalog import Catalog
from engine.sql.parse import parse_query, unsupported

MAX_DEPTH = 32  # views over views (Postgres refuses cycles; this bounds a runaway)
SYSTEM_SCHEMAS = ("information_schema", "incview")  # and every pg_* schema


def is_system_schema(schema: str) -> bool:
    """A schema whose tables and views a view may not read (the planner refuses them)."""
    return schema.startswith("pg_") or schema in SYSTEM_SCHEMAS


def inline_source_views(
    tree: exp.Expression,
    catalog: Catalog,
    check: Callable[[exp.Expression], None],
    depth: int = 0,
) -> tuple[exp.Expression, dict[str, str]]:
    """``tree`` with every table reference that names a view replaced by its definition, and
    the definitions used. ``check`` vets each parsed definition (incview's construct checks)."""
    definitions = getattr(catalog, "view_definition", None)
    if definitions is None:
        return tree, {}
    used: dict[str, str] = {}
    cte_names = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if not table.name or (not table.db and table.name in cte_names):
            continue
        if is_system_schema(table.db):
            continue  # refused by the planner as a system catalog
        found = definitions(table.db or None, table.name)
        if found is None:
            continue
        qualified, text, columns = found
        if depth >= MAX_DEPTH:
            raise unsupported(table, f"source views nested more than {MAX_DEPTH} deep")
        try:
            definition = parse_query(text.strip().rstrip(";"))
            check(definition)
            definition, inner = inline_source_views(definition, catalog, check, depth + 1)
        except UnsupportedSQL as e:
            raise UnsupportedSQL(f"source view {qualified}: {e}") from None
        used[qualified] = text
        used.update(inner)
        given = table.args.get("alias")
        alias = exp.TableAlias(
            this=(given.this if given is not None else table.this).copy(),
            columns=[exp.to_identifier(c, quoted=True) for c in columns],
        )
        table.replace(exp.Subquery(this=definition, alias=alias))
    return tree, used
