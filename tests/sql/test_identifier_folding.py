"""Unquoted identifiers fold to lower case as Postgres folds them; quoted ones keep their case."""

from __future__ import annotations

import pytest

from engine.errors import UnsupportedSQL
from engine.sql.catalog import DictCatalog
from engine.sql.planner import plan_view

CATALOG = DictCatalog({"orders": {"id": "int not null", "qty": "int"}})


@pytest.mark.parametrize(
    "sql",
    ["SELECT ID, Qty FROM Orders", "SELECT o.Id FROM ORDERS o", "SELECT O.id FROM orders o"],
)
def test_unquoted_names_fold_to_lower_case(sql):
    plan = plan_view(sql, CATALOG)
    assert set(plan.sources) == {next(iter(plan.sources))}
    assert [n.lower() for n in plan.output_names] == list(plan.output_names)


def test_quoted_names_keep_their_case():
    with pytest.raises(UnsupportedSQL, match="unknown table Orders"):
        plan_view('SELECT id FROM "Orders"', CATALOG)
