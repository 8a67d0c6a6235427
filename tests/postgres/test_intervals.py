"""Intervals as Postgres keeps them (engine.pg_interval): months, days and time apart through
literals, arithmetic, casts to text, multiplication and division, checked against Postgres'
own text of each expression (one query per expression, a few dozen)."""

from __future__ import annotations

import pytest

from engine.sql.expression_compiler import compile_expressions, parse_expression

EXPRESSIONS = [
    "interval '1 mon 2 days 03:00'",
    "interval '1 year -2 mons +3 days -04:05:06.5'",
    "interval '2 days 01:00'",  # sqlglot alone keeps only '2 days'
    "interval '-1 day 02:00'",
    "interval '2 weeks ago'",
    "interval '36 hours'",
    "interval '0'",
    "date '2024-01-31' + interval '1 month'",
    "timestamp '2024-01-31 10:00' - interval '1 mon 1 day'",
    "timestamp '2024-03-31' + interval '-1 mon' + interval '1 day'",
    "interval '1 mon' + interval '2 days'",
    "interval '1 mon' - interval '2 days 01:00'",
    "-interval '1 mon 1 day'",
    "interval '1 mon' * 2",
    "2 * interval '1 day 01:00'",
    "interval '1 mon' * 1.5",
    "interval '1 mon 3 days' * -0.7",
    "interval '3 days' / 2",
    "interval '1 mon' / 3",
    "interval '1 year 1 day 00:00:01' / 7",
    "interval '1 mon' = interval '30 days'",
    "interval '1 mon' < interval '31 days'",
    "interval '24:00:00' = interval '1 day'",
    "timestamp '2024-03-01' - timestamp '2024-01-01 12:00'",
    "timestamp '2024-01-01' - timestamp '2024-01-01 22:00'",
]


@pytest.mark.parametrize("sql", EXPRESSIONS)
def test_interval_expression_as_postgres(pg_conn, sql):
    (want,) = pg_conn.execute(f"SELECT ({sql})::text").fetchone()
    fn = compile_expressions([parse_expression(f"({sql})::text")], []).fn
    assert fn([()])[0][0] == want


def test_division_by_zero_is_postgres_error(pg_conn):
    from engine.dataflow.errs import EvalError
    from engine.pg_interval import PgInterval, interval_div

    with pytest.raises(EvalError, match="division by zero"):
        interval_div(PgInterval(1, 0, 0), 0)
