"""End to end: numeric NaN in the columnar reduce's aggregates.

numeric(12,2) columns hold NaN (not +-Infinity: Postgres refuses those in a numeric(p,s)).
sum/avg of a group holding a NaN are NaN, min/max order NaN above every number, and NaN is a
group key equal to itself. The views are GROUP BYs the planner sends to the columnar
reduce (checked with ``explain``); after population and after every change and ``catch_up()``
the result table equals the view's query run by Postgres (EXCEPT ALL both ways).
"""

from __future__ import annotations

import psycopg

from engine.engine import Engine
from tests.e2e.test_engine_oracle import diff_rows

VIEWS = {
    "by_g": "SELECT g, count(*) AS n, count(x) AS nx, sum(x) AS s, avg(x) AS a, min(x) AS lo, "
    "max(x) AS hi FROM t GROUP BY g",
    "filtered": "SELECT g, sum(x) FILTER (WHERE k > 0) AS s, max(x) FILTER (WHERE k > 0) AS hi, "
    "min(k) AS mk FROM t GROUP BY g",
    "by_x": "SELECT x, g, count(*) AS n, max(k) AS mk FROM t GROUP BY x, g",
    "overall": "SELECT sum(x) AS s, avg(x) AS a, min(x) AS lo, max(x) AS hi FROM t",
}

STEPS = [
    "INSERT INTO t VALUES (10, 1, 'NaN', 1), (11, 2, 'NaN', 1)",
    "DELETE FROM t WHERE id = 11",  # group 2's NaN gone: its max is a number again
    "UPDATE t SET x = 'NaN' WHERE id = 3",
    "UPDATE t SET x = 3.25 WHERE x = 'NaN' AND g = 1",
    "INSERT INTO t VALUES (13, 3, 'NaN', 0), (14, 3, -1000.00, 2), (15, 3, 7.50, 2)",
    "DELETE FROM t WHERE x = -1000.00",  # group 3's min deleted: the next one from state
    "UPDATE t SET x = NULL WHERE x = 'NaN'",
    "UPDATE t SET k = -1 WHERE g = 3",
    "DELETE FROM t WHERE g = 1",
]


def check(conn: psycopg.Connection, when: str) -> None:
    for name, sql in VIEWS.items():
        assert diff_rows(conn, name, sql) == (0, 0), f"{name} {when}"


def test_numeric_nan_in_sums_and_extremes(pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t (id int PRIMARY KEY, g int, x numeric(12,2), k int);"
            "ALTER TABLE t REPLICA IDENTITY FULL;"
            "INSERT INTO t VALUES (1, 1, 1.50, 1), (2, 1, 'NaN', 0), (3, 2, -2.25, 1),"
            " (4, 2, NULL, 1), (5, 3, 'NaN', 1), (6, 3, 0.10, 0), (7, 1, 99.99, 1)"
        )
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
                assert "Reduce (columnar)" in eng.explain(sql), name
            check(conn, "after population")
            for i, statement in enumerate(STEPS):
                conn.execute(statement)
                eng.catch_up(timeout_s=60)
                check(conn, f"after step {i}: {statement}")
