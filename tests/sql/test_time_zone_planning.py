"""Planning under a TimeZone (engine.sql.time_zone): which zone a plan depends on, what
``explain`` shows, and the refusals when there is no usable zone."""

from __future__ import annotations

import pytest

from engine.errors import UnsupportedSQL
from engine.sql.catalog import DictCatalog
from engine.sql.planner import build_dataflow, explain, plan_view

CATALOG = DictCatalog({"events": {"id": "int not null", "at": "timestamptz", "d": "date"}})


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT date_trunc('month', d) AS m FROM events",
        "SELECT id FROM events WHERE at::date = d",
        "SELECT extract(hour FROM at) AS h, count(*) FROM events GROUP BY extract(hour FROM at)",
        "SELECT id FROM events WHERE at > '2024-03-10'",
        "SELECT at + interval '1 day' AS next FROM events",
    ],
)
def test_explain_names_the_zone_a_plan_depends_on(sql):
    text = explain(sql, CATALOG, "Europe/Paris")
    assert "TimeZone: Europe/Paris" in text
    physical = build_dataflow(plan_view(sql, CATALOG, "Europe/Paris"), None)
    assert physical.time_zone == "Europe/Paris"
    assert physical.explain().startswith("TimeZone: Europe/Paris\n")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, at FROM events WHERE at > at",
        "SELECT date_trunc('month', d::timestamp) AS m, date_part('epoch', d) AS e FROM events",
        "SELECT at AT TIME ZONE 'UTC' AS u, at - at AS zero FROM events",
        "SELECT max(at) AS last FROM events",
    ],
)
def test_zone_free_plans_do_not_name_one(sql):
    """Their physical plan (and so its fingerprint) is the one a zone-less planning makes."""
    zoned = build_dataflow(plan_view(sql, CATALOG, "Europe/Paris"), None)
    assert zoned.time_zone is None
    assert zoned.explain() == build_dataflow(plan_view(sql, CATALOG), None).explain()


def test_without_a_zone_zone_dependent_expressions_are_refused():
    with pytest.raises(UnsupportedSQL, match=r"date_trunc on date .*d::timestamp.*TimeZone"):
        build_dataflow(plan_view("SELECT date_trunc('month', d) FROM events", CATALOG), None)


def test_a_zone_outside_the_tz_database_is_refused():
    with pytest.raises(UnsupportedSQL, match=r"TimeZone 'UTC\+3'.*IANA.*SET TimeZone"):
        plan_view("SELECT at::date AS d FROM events", CATALOG, "UTC+3")
