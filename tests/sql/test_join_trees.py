"""Parenthesized join trees plan as the join tree Postgres reads (issue 18).

``(r FULL JOIN s ON ...) FULL JOIN (t FULL JOIN u ON ...) ON ...`` is a join of two joins, not a
left-deep chain; the names inside unaliased parentheses stay visible outside them, as in Postgres.
The results are checked against Postgres in tests/sql/test_planner_oracle.py (ids ``join-tree-*``).
"""

from __future__ import annotations

import pytest

from engine.errors import UnsupportedSQL
from engine.sql import logical_plan as lp
from engine.sql.catalog import DictCatalog
from engine.sql.plan_builder import build_plan

CATALOG = DictCatalog({t: {"a": "int", "b": "int", f"{t}x": "text"} for t in "rstu"})


def _joins(plan: lp.LogicalPlan) -> list[lp.LogicalPlan]:
    return [n for n in plan.walk() if isinstance(n, lp.Join)]


def _tables(plan: lp.LogicalPlan) -> list[str]:
    return [n.table for n in plan.walk() if isinstance(n, lp.Scan)]


def _top_join(sql: str) -> lp.Join:
    return _joins(build_plan(sql, CATALOG).plan)[0]


def test_join_of_two_parenthesized_joins():
    top = _top_join(
        "SELECT r.a, u.b, sx FROM (r FULL JOIN s ON r.a = s.a) "
        "FULL JOIN (t FULL JOIN u ON t.a = u.a) ON r.b = t.b"
    )
    assert top.kind == "full"
    assert top.condition.sql() == '"r"."b" = "t"."b"'
    assert isinstance(top.left, lp.Join) and isinstance(top.right, lp.Join)
    assert (_tables(top.left), _tables(top.right)) == (["r", "s"], ["t", "u"])
    assert top.left.kind == top.right.kind == "full"


def test_right_side_nested_twice():
    top = _top_join(
        "SELECT r.a, s.b AS sb, u.b AS ub FROM r LEFT JOIN (s CROSS JOIN (t FULL JOIN u "
        "ON t.a = u.a)) ON r.b = t.b"
    )
    assert top.kind == "left" and _tables(top.left) == ["r"]
    cross = top.right
    assert isinstance(cross, lp.Join) and cross.kind == "cross"
    assert _tables(cross.left) == ["s"]
    assert isinstance(cross.right, lp.Join) and cross.right.kind == "full"
    assert _tables(cross.right) == ["t", "u"]


def test_redundant_parentheses_and_a_parenthesized_table():
    built = build_plan("SELECT rx, sx FROM ((r JOIN s ON r.a = s.a))", CATALOG)
    assert [j.kind for j in _joins(built.plan)] == ["inner"]
    assert build_plan("SELECT rx FROM (r)", CATALOG).output_names == ("rx",)


def test_left_operand_parenthesized_then_chained():
    top = _top_join(
        "SELECT r.a FROM (r LEFT JOIN s ON r.a = s.a) JOIN t ON t.b = s.b LEFT JOIN u ON u.a = t.a"
    )
    assert top.kind == "left"
    assert [j.kind for j in _joins(top)] == ["left", "inner", "left"]


def test_names_inside_a_tree_reach_a_correlated_subquery():
    plan = build_plan(
        "SELECT r.a FROM r WHERE EXISTS (SELECT 1 FROM (s JOIN t ON s.a = t.a) WHERE t.b = r.b)",
        CATALOG,
    ).plan
    assert [j.kind for j in _joins(plan)] == ["semi", "inner"]


def test_aliased_tree_hides_the_inner_names():
    """``(r JOIN s ...) AS x``: only ``x`` is visible, and a column both sides have is ambiguous."""
    built = build_plan("SELECT x.rx, x.sx FROM (r JOIN s ON r.a = s.a) AS x", CATALOG)
    assert built.output_names == ("rx", "sx")
    with pytest.raises(UnsupportedSQL, match="ambiguous"):
        build_plan("SELECT x.a FROM (r JOIN s ON r.a = s.a) AS x", CATALOG)
