"""VALUES lists, generate_series and unnest(ARRAY[...]) in FROM plan as constant relations.

Each becomes a ``Values`` node (a ``ConstantCollection`` in the dataflow: emitted once, never
changing) with Postgres' column names and types. What stays refused is in
tests/sql/test_unsupported_sql.py; results against Postgres in tests/sql/test_planner_oracle.py
(ids ``const-*``).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from engine.sql import logical_plan as lp
from engine.sql.catalog import DictCatalog
from engine.sql.planner import build_dataflow, plan_view

CATALOG = DictCatalog({"r": {"a": "int", "b": "text"}})


def _plan(sql: str):
    view = plan_view(sql, CATALOG)
    (values,) = [n for n in view.logical.walk() if isinstance(n, lp.Values)]
    return view, values


def _columns(view) -> list[tuple[str, str]]:
    return [(n, t.sql()) for n, t in zip(view.output_names, view.output_types, strict=True)]


@pytest.mark.parametrize(
    ("sql", "columns", "rows"),
    [
        (
            "SELECT * FROM (VALUES (1, 'a'), (2, NULL)) AS v(i, s)",
            [("i", "integer"), ("s", "text")],
            [(1, "a"), (2, None)],
        ),
        (
            "SELECT * FROM (VALUES (NULL, 1), (3, 2.5)) v",
            [("column1", "integer"), ("column2", "numeric")],
            [(None, Decimal(1)), (3, Decimal("2.5"))],
        ),
        ("SELECT * FROM (VALUES ('x'), (NULL)) v(x)", [("x", "text")], [("x",), (None,)]),
        (
            "SELECT * FROM (VALUES (1, 'a')) AS v(i)",
            [("i", "integer"), ("column2", "text")],
            [(1, "a")],
        ),
        (
            "SELECT * FROM generate_series(1, 7, 3)",
            [("generate_series", "integer")],
            [(1,), (4,), (7,)],
        ),
        ("SELECT * FROM generate_series(3, 1, -1) g", [("g", "integer")], [(3,), (2,), (1,)]),
        ("SELECT * FROM generate_series(1, 3) AS g(x)", [("x", "integer")], [(1,), (2,), (3,)]),
        (
            "SELECT * FROM generate_series(3000000000, 3000000001) g",
            [("g", "bigint")],
            [(3000000000,), (3000000001,)],
        ),
        (
            "SELECT * FROM generate_series(1, 2, 0.5) g",
            [("g", "numeric")],
            [(Decimal(1),), (Decimal("1.5"),), (Decimal("2.0"),)],
        ),
        ("SELECT * FROM generate_series(1, NULL) g", [("g", "integer")], []),
        ("SELECT * FROM generate_series(2, 1) g", [("g", "integer")], []),
        ("SELECT * FROM unnest(ARRAY[1, NULL])", [("unnest", "integer")], [(1,), (None,)]),
        ("SELECT * FROM unnest(ARRAY['a', 'b']) u", [("u", "text")], [("a",), ("b",)]),
        (
            "SELECT * FROM unnest(ARRAY[1, 2], ARRAY[1.5]) AS u(x, y)",
            [("x", "integer"), ("y", "numeric")],
            [(1, Decimal("1.5")), (2, None)],
        ),
    ],
)
def test_names_types_and_rows(sql, columns, rows):
    view, values = _plan(sql)
    assert _columns(view) == columns
    assert [tuple(r) for r in values.rows] == rows
    for f, i in zip(values.fields, range(len(columns)), strict=True):
        assert f.nullable == any(r[i] is None for r in rows)


def test_joined_to_a_table_and_emitted_by_a_constant_collection():
    view = plan_view(
        "SELECT r.a, v.label FROM r JOIN (VALUES (1, 'one'), (2, 'two')) AS v(k, label) "
        "ON r.a = v.k",
        CATALOG,
    )
    joins = [n for n in view.optimized.walk() if isinstance(n, lp.Join)]
    assert [j.kind for j in joins] == ["inner"]
    assert "Constant: 2 row(s)" in build_dataflow(view, None).explain()


def test_a_values_cte():
    view, values = _plan("WITH v(i) AS (VALUES (1), (2)) SELECT i FROM v")
    assert _columns(view) == [("i", "integer")]
    assert values.rows == ((1,), (2,))
