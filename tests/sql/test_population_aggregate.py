"""Population GROUP BYs for Postgres: the partial-aggregate query a columnar reduce over one
table gets, and the GROUP BYs that get none (joins, text comparisons, division, functions,
min/max, expressions as keys). Postgres runs these queries in tests/e2e/test_population_aggregates."""

from __future__ import annotations

import pytest

from engine.dataflow.collections.columnar_reduce import ColumnarReduceCollection
from engine.sql.catalog import DictCatalog
from engine.sql.planner import build_dataflow, plan_view

CATALOG = DictCatalog(
    {
        "t": {
            "g": "int",
            "c": "character(3)",
            "d": "date",
            "x": "numeric(12,2)",
            "q": "numeric(10,3) not null",
            "k": "int",
            "s": "text",
            "f": "double precision",
        },
        "u": {"g": "int", "y": "numeric(8,1)"},
    }
)


def queries(sql: str) -> list[str | None]:
    df = build_dataflow(plan_view(sql, CATALOG), None).dataflow
    return [
        n.collection.population_query and n.collection.population_query.sql
        for n in df.nodes
        if isinstance(n.collection, ColumnarReduceCollection)
    ]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (  # TPC-H Q1's shape: keys read as the population reads them, equal counts once,
            # count(q) of a NOT NULL column is count(*), date minus interval in the WHERE
            "SELECT c, g, sum(x) AS sx, avg(x) AS ax, sum(q * (1 - x)) AS sq, count(q) AS nq, "
            "count(*) AS n FROM t "
            "WHERE d <= date '2024-03-01' - interval '10' day GROUP BY c, g",
            'SELECT "c"::text, "g"::int8, count(*), count("x"), (sum("x"))::text, '
            'count(("q" * (1 - "x"))), (sum(("q" * (1 - "x"))))::text FROM "public"."t" '
            "WHERE (\"d\" <= (CAST('2024-03-01' AS DATE) - INTERVAL '10 DAY')) GROUP BY 1, 2",
        ),
        (  # a global aggregate (one row even over no rows), FILTER, BETWEEN, IN, IS NULL
            "SELECT count(*) FILTER (WHERE k > 2), sum(k) FILTER (WHERE x IS NULL) FROM t "
            "WHERE x BETWEEN 0.5 AND 10 OR k IN (1, 2, -3)",
            'SELECT count(*), count(*) FILTER (WHERE ("k" > 2)), count("k") FILTER (WHERE '
            '("x" IS NULL)), (sum("k") FILTER (WHERE ("x" IS NULL)))::text FROM "public"."t" '
            'WHERE (("x" BETWEEN 0.5 AND 10) OR ("k" IN (1, 2, (-3))))',
        ),
        ("SELECT g, count(*) FROM t WHERE s = 'a' GROUP BY g", None),  # text: collation
        ("SELECT g, count(x / k) FROM t GROUP BY g", None),  # division (by zero: errs)
        ("SELECT g, sum(k * 2) FROM t GROUP BY g", None),  # integer arithmetic can overflow
        ("SELECT g, count(abs(x)) FROM t GROUP BY g", None),  # a function
        ("SELECT g, max(x) FROM t GROUP BY g", None),  # a multiset aggregate
        ("SELECT g + 1, count(*) FROM t GROUP BY g + 1", None),  # an expression key
        ("SELECT f, count(*) FROM t GROUP BY f", None),  # a float key
        ("SELECT t.g, sum(y) FROM t JOIN u ON t.g = u.g GROUP BY t.g", None),  # a join
    ],
)
def test_population_queries(sql, expected):
    assert queries(sql) == [expected]


def test_a_reduce_over_a_reduce_gets_no_query_but_the_lower_one_does():
    got = queries(
        "SELECT n, count(*) FROM (SELECT g, count(*) AS n FROM t GROUP BY g) a GROUP BY n"
    )
    assert got == [
        'SELECT "g"::int8, count(*) FROM "public"."t" GROUP BY 1',
        None,
    ]
