"""NaN in compiled expressions, against a real Postgres 15 as the oracle.

Postgres' NaN equals itself and is greater than every number (+Infinity included), for double
precision and numeric alike; Python's is unequal to everything and unordered, and a Decimal NaN
raises on ``<``. Every expression below is evaluated over all pairs of NaN, +-Infinity, numbers
and NULL by the compiled batch function (as a value and, for predicates, as a filter) and by
Postgres; results must be equal, and every NaN a result holds must be the engine's one shared NaN
object (``engine.dataflow.nan``), so that result rows holding it equal each other.
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal

import pytest

from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.sql.expression_compiler import (
    ColumnRef,
    compile_expressions,
    compile_predicate,
    parse_expression,
)
from engine.sql.types import from_pg_name

COLUMNS = [("f", "double precision"), ("g", "double precision"), ("n", "numeric"), ("m", "numeric")]
REFS = [ColumnRef(name, "t", from_pg_name(typ)) for name, typ in COLUMNS]
FLOATS = [float("nan"), math.inf, -math.inf, 1.5, 0.0, -2.0, None]
NUMERICS = [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity"), Decimal("1.5"), Decimal(0)]
NUMERICS.append(None)  # type: ignore[arg-type]
PAIRS_F = list(itertools.product(FLOATS, FLOATS))
PAIRS_N = list(itertools.product(NUMERICS, NUMERICS))
ROWS = [(*PAIRS_F[i], *PAIRS_N[i % len(PAIRS_N)]) for i in range(len(PAIRS_F))]
# NaN from a parse of its own in every row, as values arrive before the engine canonicalizes them
ROWS = [tuple(float("nan") if v != v and isinstance(v, float) else v for v in r) for r in ROWS]

PREDICATES = [
    "f = g", "f <> g", "f < g", "f <= g", "f > g", "f >= g",
    "n = m", "n <> m", "n < m", "n <= m", "n > m", "n >= m",
    "f > 1", "f = 'NaN'", "'NaN' <= f", "n > 1", "n = 'NaN'", "f < n", "n >= f",
    "f is distinct from g", "f is not distinct from g", "n is not distinct from m",
    "n is distinct from m", "f between g and 10", "f not between -1 and g",
    "f in (1.5, 'NaN')", "f in (g, 0)", "not (f < g)", "f > g and n < m", "f > g or n = m",
]  # fmt: skip
VALUES = [
    "nullif(f, g)", "nullif(n, m)", "greatest(f, g)", "least(f, g)", "greatest(f, 1)",
    "least(n, m)", "greatest(n, m, 0)", "f - g", "f + g", "f * 0", "-f", "abs(f)",
    "case when f > g then f else g end", "coalesce(f, 'NaN')", "'NaN'::float8",
    "'Infinity'::float8 - 'Infinity'::float8", "'NaN'::numeric", "n::float8", "f::numeric",
    "n * 2", "round(f)", "case f when g then 1 else 0 end", "case n when m then 'eq' end",
    "case f when 'NaN' then 'nan' when 1.5 then 'one' end",
]  # fmt: skip


@pytest.fixture(scope="module")
def conn(pg_server):
    with pg_server.database_with_table("nanexprs", COLUMNS, ROWS) as c:
        yield c


def postgres(conn, sql: str) -> list:
    return [r[0] for r in conn.execute(f"SELECT ({sql}) FROM t ORDER BY id").fetchall()]


def same(ours, theirs) -> bool:
    if isinstance(theirs, float) and theirs != theirs:
        return ours is NAN  # the shared object, not just any NaN
    if isinstance(theirs, Decimal) and theirs.is_nan():
        return ours is NUMERIC_NAN
    return type(ours) is type(theirs) and ours == theirs or (ours is None and theirs is None)


@pytest.mark.parametrize("sql", PREDICATES)
def test_predicates_follow_postgres(conn, sql):
    want = postgres(conn, sql)
    values = compile_expressions([parse_expression(sql)], REFS).fn(ROWS)
    assert [v for (v,) in values] == want
    keep, _ = compile_predicate(parse_expression(sql), REFS)
    assert [bool(k) for k in keep(ROWS)] == [w is True for w in want]


@pytest.mark.parametrize("sql", VALUES)
def test_values_follow_postgres_with_the_shared_nan(conn, sql):
    want = postgres(conn, sql)
    got = [v for (v,) in compile_expressions([parse_expression(sql)], REFS).fn(ROWS)]
    bad = [
        (ROWS[i], g, w) for i, (g, w) in enumerate(zip(got, want, strict=True)) if not same(g, w)
    ]
    assert not bad, bad[:5]


def test_nan_divided_by_zero_is_nan(conn):
    """Postgres' float8_div raises division by zero only for a number: NaN / 0 is NaN."""
    theirs = conn.execute("SELECT 'NaN'::float8 / 0, 'NaN'::float8 / -0.0::float8").fetchone()
    assert all(math.isnan(v) for v in theirs)
    fn = compile_expressions([parse_expression("f / g")], REFS).fn
    ((value,),) = fn([(float("nan"), 0.0, None, None)])
    assert value is NAN
