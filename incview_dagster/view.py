"""``IncView``: the declaration of one incremental view in a Dagster code location.

A view is a name (``schema.table`` of its result table; unqualified names go to ``public``) and
one SQL SELECT, plus optional Dagster presentation (group, owners, description) and an optional
lag threshold for its ``lag_within`` check. This module only holds the declaration: it must not
parse SQL, open databases or build Dagster definitions.

Example::

    from incview_dagster import IncView

    order_totals = IncView(
        "shop.order_totals",
        "SELECT customer_id, sum(amount) AS total FROM shop.orders GROUP BY customer_id",
        group="shop",
        owners=["team:analytics"],
    )
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class IncView:
    """One view: ``name`` (``schema.table`` or ``table``) defined as ``sql``."""

    name: str
    sql: str
    group: str | None = None
    owners: list[str] | None = None
    description: str | None = None
    max_lag_s: float | None = None  # this view's ``lag_within`` threshold (factory default else)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def result_schema(self) -> str:
        return split_view_name(self.name)[0]

    @property
    def result_table(self) -> str:
        return split_view_name(self.name)[1]

    @property
    def qualified_name(self) -> str:
        """``schema.table`` of the view's result table."""
        return f"{self.result_schema}.{self.result_table}"


def split_view_name(name: str) -> tuple[str, str]:
    """``a.b`` -> (a, b); ``b`` -> (public, b): the engine's rule (``engine.engine``)."""
    from engine import split_view_name as engine_split

    return engine_split(name)
