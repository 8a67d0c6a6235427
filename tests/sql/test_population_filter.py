"""Population WHERE clauses from the rules' pushed scan filters: what is rendered, what is left
to the dataflow (text, real, expressions that can raise), and how several scans combine."""

from __future__ import annotations

import pytest

from engine.sql.catalog import DictCatalog
from engine.sql.planner import plan_view
from engine.sql.population_filter import population_filters

CATALOG = DictCatalog(
    {
        "e": {"a": "int", "b": "int", "s": "text", "r": "real", "d": "double precision"},
        "n": {"a": "int", "x": "numeric"},
        "w": {"d": "date", "ts": "timestamp", "tz": "timestamptz", "k": "int"},
    }
)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "SELECT e.a FROM e JOIN n ON e.b = n.a WHERE e.b > 30",
            {
                "public.e": '(NOT ("b" IS NULL)) AND ("b" > 30)',
                "public.n": '(NOT ("a" IS NULL)) AND ("a" > 30)',
            },
        ),
        # text (collation) and real (float4 widening) stay in the dataflow; the OR is kept whole
        (
            "SELECT a FROM e WHERE s > 'x' AND (b < 3 OR b IS NULL) AND r < 1",
            {"public.e": '(("b" < 3) OR ("b" IS NULL))'},
        ),
        ("SELECT a FROM e WHERE b > 3 OR s = 'x'", {"public.e": None}),
        ("SELECT a FROM e WHERE d >= -1.5", {"public.e": '("d" >= -1.5)'}),
        ("SELECT a FROM e WHERE s IS NOT NULL", {"public.e": '("s" IS NOT NULL)'}),
        ("SELECT a FROM e WHERE NOT (b IS NULL)", {"public.e": '(NOT ("b" IS NULL))'}),
        # two scans of one table: the OR of their clauses; one unfiltered scan: no clause
        (
            "SELECT a FROM e WHERE b > 3 UNION ALL SELECT a FROM e WHERE b < -2",
            {"public.e": '(("b" > 3)) OR (("b" < -2))'},
        ),
        ("SELECT a FROM e WHERE b > 3 UNION ALL SELECT a FROM e", {"public.e": None}),
        # an expression that can raise (division by zero) must reach the errs stream
        ("SELECT a FROM e WHERE 10 / b > 1", {"public.e": None}),
        # dates and timestamps against literals, a literal +- an interval literal, BETWEEN
        (
            "SELECT k FROM w WHERE d >= date '1994-01-01' "
            "AND d < date '1994-01-01' + interval '1' year AND ts BETWEEN '2020-01-01' AND "
            "timestamp '2020-02-01 10:00' - interval '90' day",
            {
                "public.w": '("d" >= CAST(\'1994-01-01\' AS DATE)) AND ("d" < '
                "(CAST('1994-01-01' AS DATE) + INTERVAL '1 YEAR'))"
            },
        ),
        ("SELECT k FROM w WHERE k BETWEEN 1 AND 5", {"public.w": '("k" >= 1 AND "k" <= 5)'}),
        # timestamptz is left out (literals read in the session's zone); a column in the
        # arithmetic can fail, so can an interval past the calendar
        ("SELECT k FROM w WHERE tz < tz", {"public.w": None}),
        ("SELECT k FROM w WHERE d + k > date '2020-01-01'", {"public.w": None}),
        (
            "SELECT k FROM w WHERE d < date '2020-01-01' + interval '99999999' day",
            {"public.w": None},
        ),
    ],
)
def test_population_filters(sql, expected):
    assert population_filters(plan_view(sql, CATALOG).optimized) == expected
