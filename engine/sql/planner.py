"""The planner's entry points: SQL -> logical plan -> optimized plan -> dataflow, and EXPLAIN.

``plan_view(sql, catalog, time_zone)`` parses, checks and builds the logical plan and optimizes
it with the rewrite rules; ``build_dataflow(view_plan, store)`` plans the collections and opens
their state; ``explain(sql, catalog, time_zone)`` prints all three plans. Every step runs under
the Postgres ``TimeZone`` the view is planned with (``engine.sql.time_zone``: the creating
session's, kept with the view); the physical plan names it when an expression depends on it.
This module only sequences the steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.dataflow.state.store import StateStore
from engine.errors import UnsupportedSQL
from engine.sql.catalog import Catalog, SourceTable
from engine.sql.logical_plan import LogicalPlan, format_plan
from engine.sql.physical_planner import PhysicalPlan, plan_physical
from engine.sql.plan_builder import build_plan
from engine.sql.rules import optimize
from engine.sql.time_zone import planning_time_zone


@dataclass(frozen=True)
class ViewPlan:
    sql: str
    logical: LogicalPlan
    optimized: LogicalPlan
    output_names: tuple[str, ...]
    sources: tuple[SourceTable, ...]
    # source views planned over their definitions: "schema.view" -> definition (pg_get_viewdef)
    source_views: Mapping[str, str] = field(default_factory=dict)
    # the Postgres TimeZone the view is planned (and its expressions evaluated) under
    time_zone: str | None = None

    @property
    def output_types(self):
        return tuple(f.type for f in self.optimized.fields)


def plan_view(sql: str, catalog: Catalog, time_zone: str | None = None) -> ViewPlan:
    """Plan ``sql`` under Postgres ``TimeZone`` ``time_zone`` (None: expressions that depend on
    it are refused); raises ``engine.UnsupportedSQL`` for what cannot be maintained."""
    try:
        with planning_time_zone(time_zone):
            built = build_plan(sql, catalog)
            optimized = optimize(built.plan)
        return ViewPlan(
            sql,
            built.plan,
            optimized,
            built.output_names,
            built.sources,
            built.source_views,
            time_zone,
        )
    except RecursionError:
        raise UnsupportedSQL(
            "the view's SQL is nested too deeply for the planner (parentheses, subqueries or "
            "expressions inside each other): flatten it, e.g. with CTEs"
        ) from None


def build_dataflow(view: ViewPlan, store: StateStore | None) -> PhysicalPlan:
    with planning_time_zone(view.time_zone) as tz:
        physical = plan_physical(view.optimized, store)
    if tz.used:
        physical.time_zone = view.time_zone
    return physical


def explain(sql: str, catalog: Catalog, time_zone: str | None = None) -> str:
    """The unoptimized logical plan, the optimized one and the physical dataflow."""
    view = plan_view(sql, catalog, time_zone)
    physical = build_dataflow(view, None)
    return "\n".join(
        [
            "== Logical plan ==",
            format_plan(view.logical),
            "",
            "== Optimized logical plan ==",
            format_plan(view.optimized),
            "",
            "== Physical plan (dataflow) ==",
            physical.explain(),
        ]
    )
