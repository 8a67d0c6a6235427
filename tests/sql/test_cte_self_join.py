"""A CTE referenced several times, under several aliases, plans as one shared plan (issue 18).

``WITH t AS (...) SELECT ... FROM t t1 JOIN t t2 ON t1.i = t2.i`` used to fail with "column t1.i
does not exist". Each use is a ``SubqueryAlias`` over the same plan node (built once); results are
checked against Postgres in tests/sql/test_planner_oracle.py (ids ``cte-*``).
"""

from __future__ import annotations

from engine.sql import logical_plan as lp
from engine.sql.catalog import DictCatalog
from engine.sql.plan_builder import build_plan

CATALOG = DictCatalog({"orders": {"id": "int not null", "customer_id": "int", "qty": "int"}})


def _aliases(plan: lp.LogicalPlan) -> list[lp.SubqueryAlias]:
    return [n for n in plan.walk() if isinstance(n, lp.SubqueryAlias) and n.alias != "orders"]


def test_self_join_under_two_aliases_shares_the_cte():
    built = build_plan(
        "WITH t AS (SELECT customer_id AS i, qty FROM orders) "
        "SELECT t1.i, t1.qty AS a, t2.qty AS b FROM t t1 JOIN t t2 ON t1.i = t2.i",
        CATALOG,
    )
    assert built.output_names == ("i", "a", "b")
    uses = _aliases(built.plan)
    assert [u.alias for u in uses] == ["t1", "t2"]
    assert uses[0].input is uses[1].input
    (join,) = [n for n in built.plan.walk() if isinstance(n, lp.Join)]
    assert join.condition.sql() == '"t1"."i" = "t2"."i"'


def test_three_uses_with_a_column_list():
    built = build_plan(
        "WITH t(i, q) AS (SELECT customer_id, qty FROM orders) "
        "SELECT t.i, t1.q AS a, t2.q AS b FROM t JOIN t t1 ON t.i = t1.i LEFT JOIN t t2 ON t2.i = t1.q",
        CATALOG,
    )
    assert built.output_names == ("i", "a", "b")
    uses = _aliases(built.plan)
    assert sorted(u.alias for u in uses if u.alias.startswith("t")) == ["t", "t1", "t2"]
    assert {u.fields[0].name for u in uses if u.alias.startswith("t")} == {"i"}
