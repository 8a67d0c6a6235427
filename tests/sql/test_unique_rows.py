"""Unique rows derived from the sources' keys (``engine.sql.unique_rows``), through the planner.

Each query is planned against a catalog whose tables have primary keys (``t.id``, ``u.id``,
the two-column key of ``pair``) or none (``bag``); what the derivation says must be what the
query guarantees in Postgres: a plan said unique holds no row twice however the tables are
filled, a plan said not unique can. The Postgres oracle checks the top-k's use of it
(``tests/sql/test_planner_oracle.py``, ``top-k-columnar-*``: their tables have primary keys).
"""

from __future__ import annotations

import pytest

from engine.sql.catalog import DictCatalog
from engine.sql.physical_planner import plan_physical
from engine.sql.planner import plan_view
from engine.sql.unique_rows import keys_relied_on, row_keys, unique_rows

CATALOG = DictCatalog(
    {
        "t": {"id": "int not null", "g": "int", "v": "int", "s": "text"},
        "u": {"id": "int not null", "g": "int", "w": "int"},
        "pair": {"a": "int not null", "b": "int not null", "x": "int"},
        "bag": {"g": "int", "v": "int"},
    },
    keys={"t": [["id"]], "u": [["id"]], "pair": [["a", "b"]]},
)

UNIQUE = [
    "SELECT * FROM t",
    "SELECT id FROM t WHERE v > 3",
    "SELECT v, id, g + 1 AS g1 FROM t",
    "SELECT x.id, x.v FROM (SELECT * FROM t) AS x",
    "SELECT t.id, u.id AS uid FROM t JOIN u ON t.g = u.g",
    "SELECT t.id, u.id AS uid FROM t CROSS JOIN u",
    "SELECT a, b FROM pair",
    "SELECT g, count(*) FROM bag GROUP BY g",
    "SELECT count(*) FROM bag",
    "SELECT DISTINCT g FROM bag",
    "SELECT g FROM bag UNION SELECT g FROM u",
    "SELECT g, v FROM bag EXCEPT SELECT g, w FROM u",
    "SELECT id, v FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.g = t.g)",
    "SELECT id, v FROM t WHERE g IN (SELECT g FROM bag)",
    "SELECT * FROM t ORDER BY v LIMIT 3",
    "SELECT id, row_number() OVER (PARTITION BY g ORDER BY v) FROM t",
]

NOT_UNIQUE = [
    "SELECT g, v FROM t",  # the key is not read
    "SELECT * FROM bag",  # no key
    "SELECT a FROM pair",  # half a key
    "SELECT t.id FROM t JOIN u ON t.g = u.g",  # one side's key only: t's rows pair with many u
    "SELECT t.id, u.id AS uid FROM t LEFT JOIN u ON t.g = u.g",  # outer joins: none derived
    "SELECT id FROM t UNION ALL SELECT id FROM u",
    "SELECT g, count(*) FROM t GROUP BY ROLLUP (g)",  # a UNION ALL of the grouping sets
    "SELECT id + 0 AS id FROM t",  # computed: not known to keep the key
]


def _plan(sql):
    return plan_view(sql, CATALOG).optimized


@pytest.mark.parametrize("sql", UNIQUE)
def test_unique(sql):
    assert unique_rows(_plan(sql)), row_keys(_plan(sql))


@pytest.mark.parametrize("sql", NOT_UNIQUE)
def test_not_unique(sql):
    assert not unique_rows(_plan(sql)), row_keys(_plan(sql))


def test_keys_are_output_positions_and_minimal():
    assert row_keys(_plan("SELECT v, s, id FROM t")) == [frozenset({2})]
    assert row_keys(_plan("SELECT x, b, a FROM pair")) == [frozenset({1, 2})]
    # a key of t's and one of u's, side by side in the join's rows
    keys = row_keys(_plan("SELECT t.v, t.id, u.id AS uid FROM t JOIN u ON t.g = u.g"))
    assert keys == [frozenset({1, 2})]
    # every column of a DISTINCT is a key, but the group's key is smaller
    assert row_keys(_plan("SELECT DISTINCT g, c FROM (SELECT g, count(*) c FROM bag GROUP BY g) q"))
    assert row_keys(_plan("SELECT count(*) FROM t")) == [frozenset()]


def test_the_top_k_is_told_and_the_keys_it_rests_on_are_recorded():
    sql = (
        "SELECT * FROM (SELECT id, g, v, row_number() OVER (PARTITION BY g ORDER BY v DESC) AS rn"
        " FROM t) x WHERE rn <= 3"
    )
    physical = plan_physical(_plan(sql), None)
    assert "TopK (columnar)" in physical.explain() and "unique_rows" in physical.explain()
    assert physical.unique_keys == {"public.t": [("id",)]}
    bag = plan_physical(_plan("SELECT g, v FROM bag ORDER BY v LIMIT 2"), None)
    assert "unique_rows" not in bag.explain() and bag.unique_keys == {}
    # over a GROUP BY the rows are unique by the group: no source key is relied on
    grouped = plan_physical(
        _plan("SELECT g, sum(v) s FROM bag GROUP BY g ORDER BY s LIMIT 2"), None
    )
    assert "unique_rows" in grouped.explain() and grouped.unique_keys == {}
    # unique by the GROUP BY over keyed tables: their keys are not relied on
    over_keys = _plan("SELECT t.id, count(*) AS n FROM t JOIN u ON t.g = u.g GROUP BY t.id")
    assert unique_rows(over_keys) and keys_relied_on(over_keys) == {}
    assert keys_relied_on(_plan("SELECT * FROM t JOIN pair ON t.id = pair.a")) == {
        "public.t": [("id",)],
        "public.pair": [("a", "b")],
    }


def test_a_distinct_over_unique_rows_is_left_out():
    """DISTINCT over a table's key is planned as no collection (the key recorded as relied on);
    over rows that may repeat it stays."""
    physical = plan_physical(_plan("SELECT DISTINCT id, v FROM t"), None)
    assert "Distinct" not in physical.explain() and physical.unique_keys == {"public.t": [("id",)]}
    kept = plan_physical(_plan("SELECT DISTINCT g, v FROM t"), None)
    assert "Distinct" in kept.explain() and kept.unique_keys == {}


def test_no_rewrite_rests_on_a_tables_key():
    """The logical rules ask for uniqueness without the tables' keys: a semi join onto a
    primary key stays a semi join, and a DISTINCT over a table's key stays (only the top-k's
    use is recorded and checked against the catalog)."""
    semi = _plan("SELECT id FROM u WHERE g IN (SELECT id FROM t)")
    kinds = [n.kind for n in semi.walk() if type(n).__name__ == "Join"]
    assert kinds == ["semi"]
    distinct = _plan("SELECT DISTINCT id, v FROM t")
    assert any(type(n).__name__ == "Distinct" for n in distinct.walk())
    grouped = _plan("SELECT DISTINCT g, c FROM (SELECT g, count(*) AS c FROM bag GROUP BY g) q")
    assert not any(type(n).__name__ == "Distinct" for n in grouped.walk())
