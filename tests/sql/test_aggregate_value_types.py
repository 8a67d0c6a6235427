"""The Arrow types the planner knows for an aggregate's outputs (``aggregate_value_types``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from engine.sql.catalog import DictCatalog
from engine.sql.physical_planner import value_arrow_types
from engine.sql.plan_builder import build_plan
from engine.sql.rules import optimize

CATALOG = DictCatalog(
    {
        "t": {
            "g": "int",
            "i4": "int",
            "i8": "bigint",
            "n": "numeric(12,3)",
            "wide": "numeric(30,2)",
            "free": "numeric",
            "s": "text",
            "f": "double precision",
        }
    }
)


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("sum(n)", pa.decimal128(38, 3)),  # numeric(12,3): every sum has scale 3
        ("sum(i8)", pa.decimal128(38, 0)),  # bigint sums are numeric in Postgres
        ("sum(i4)", pa.int64()),  # int sums are bigint
        ("min(n)", pa.decimal128(12, 3)),
        ("max(s) FILTER (WHERE i4 > 0)", pa.string()),
        # the columnar reduce's sums are 128-bit: of any argument whose values have one scale
        ("sum(wide)", pa.decimal128(38, 2)),
        ("sum(n * 2)", pa.decimal128(38, 3)),  # a computed argument: scale 3
        ("sum(n * n)", pa.decimal128(38, 6)),
        ("sum(free)", None),  # no declared scale
        ("sum(n / 2)", None),  # each quotient its own scale
        ("avg(n)", None),  # each quotient its own scale
        ("count(*)", pa.int64()),
        ("sum(f)", pa.float64()),
    ],
)
def test_aggregate_output_types(select, expected):
    plan = optimize(build_plan(f"SELECT g, {select} AS x FROM t GROUP BY g", CATALOG).plan)
    types = value_arrow_types(plan)
    assert types[0] == pa.int64()  # ints of every width are int64 columns
    assert types[1] == expected


def test_types_pass_through_joins_and_derived_tables():
    sql = (
        "SELECT a.g, a.x, b.y FROM (SELECT g, sum(n) AS x FROM t GROUP BY g) a "
        "JOIN (SELECT g, max(s) AS y FROM t GROUP BY g) b ON a.g = b.g WHERE a.x > 1"
    )
    plan = optimize(build_plan(sql, CATALOG).plan)
    assert value_arrow_types(plan) == [pa.int64(), pa.decimal128(38, 3), pa.string()]


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("sum(wide)", None),  # 30 digits: a sum could pass decimal128's 38
        ("sum(n * 2)", None),  # a computed argument
        ("sum(n)", pa.decimal128(38, 3)),  # numeric(12,3): 10^10 rows to pass 38 digits
    ],
)
def test_aggregate_output_types_of_the_row_reduce(select, expected):
    """Beside string_agg (which the columnar reduce does not compute) the sums are the row
    reduce's Decimals, of any size: only a declared precision bounds them."""
    sql = f"SELECT g, {select} AS x, string_agg(s, ',') AS y FROM t GROUP BY g"
    plan = optimize(build_plan(sql, CATALOG).plan)
    assert value_arrow_types(plan)[1] == expected
