"""End to end: double precision and real NaN and infinities through population, CDC and the sink.

``float('nan') != float('nan')`` in Python while Postgres' NaN equals itself (and sorts above
every number, +Infinity included). A view over a float column holding NaN must drop the NaN rows
again when they are updated or deleted, compare NaN as Postgres does in WHERE and order it in
ORDER BY, min/max and window functions. The oracle: after population and after every change and
``catch_up()`` the result table equals the view's query run by Postgres (EXCEPT ALL both ways,
where NaN = NaN). Runs in about 3 s (runner="local").
"""

from __future__ import annotations

import psycopg
import pytest

from engine.engine import Engine
from tests.e2e.test_engine_oracle import diff_rows

VIEWS = {
    "by_x": "SELECT x, count(*) AS n FROM t GROUP BY x",
    "distinct_x": "SELECT DISTINCT x FROM t",
    "extremes": "SELECT max(x) AS hi, min(x) AS lo, sum(x) AS total, count(x) AS n FROM t",
    "max_by_g": "SELECT g, max(x) AS hi, min(y) AS lo, avg(y) AS mean FROM t GROUP BY g",
    "rows_x": "SELECT id, x, y FROM t",
    "computed": "SELECT id, x - x AS zero_or_nan, x * 0 AS z, -y AS minus_y FROM t "
    "WHERE x IS NOT NULL",
    "filtered": "SELECT id, x FROM t WHERE x > 1 OR y = 'NaN'",
    "top_x": "SELECT id, x FROM t ORDER BY x DESC NULLS LAST, id LIMIT 3",
    "windowed": "SELECT id, g, max(x) OVER (PARTITION BY g) AS hi, min(x) OVER (PARTITION BY g) "
    "AS lo, sum(x) OVER (PARTITION BY g ORDER BY id) AS running FROM t",
    "joined": "SELECT a.id AS a_id, b.id AS b_id, a.x FROM t a JOIN t b ON a.x = b.x",
}
# the same values in many rows: needs the join state to give back the shared NaN (see below)
JOIN_DUPLICATES = {"joined_x": "SELECT a.x, b.x AS bx FROM t a JOIN t b ON a.x = b.x"}

STEPS = [
    # NaN rows arriving through CDC, next to the populated ones
    "INSERT INTO t VALUES (8, 2, 'NaN', 'NaN'), (9, 3, 'Infinity', 'NaN')",
    "UPDATE t SET x = 2.5 WHERE id = 1",
    "UPDATE t SET y = 7 WHERE id = 8",  # x stays NaN: the old row is retracted, the new inserted
    "UPDATE t SET x = 'NaN' WHERE id = 3",
    "DELETE FROM t WHERE id = 5",
    "UPDATE t SET x = 'Infinity', y = 'NaN' WHERE x = 'NaN'",
    "DELETE FROM t WHERE x = 'Infinity' OR y = 'NaN'",
    "INSERT INTO t VALUES (10, 1, 'NaN', 1), (11, 1, 'NaN', 2), (12, 1, 'NaN', 2)",
    "DELETE FROM t WHERE x = 'NaN'",
]


def check(conn: psycopg.Connection, views: dict[str, str], when: str) -> None:
    for name, sql in views.items():
        assert diff_rows(conn, name, sql) == (0, 0), f"{name} {when}"


def run_steps(pg_dsn: str, state_dir, views: dict[str, str]) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t (id int PRIMARY KEY, g int, x double precision, y real);"
            "ALTER TABLE t REPLICA IDENTITY FULL;"
            "INSERT INTO t VALUES (1, 1, 'NaN', 'NaN'), (2, 1, 'Infinity', 1.5),"
            " (3, 2, 1.5, 'Infinity'), (4, 2, NULL, NULL), (5, 1, 'NaN', 2.5),"
            " (6, 3, '-Infinity', '-Infinity'), (7, 3, 0.1, 0.1)"
        )
        with Engine(pg_dsn, state_dir, runner="local") as eng:
            for name, sql in views.items():
                eng.create_view(name, sql)
            check(conn, views, "after population")
            for i, statement in enumerate(STEPS):
                conn.execute(statement)
                eng.catch_up(timeout_s=60)
                check(conn, views, f"after step {i}: {statement}")
        assert conn.execute("SELECT count(*) FROM t WHERE x = 'NaN'").fetchone()[0] == 0


@pytest.mark.slow
def test_nan_rows_update_and_delete_like_postgres(pg_dsn, tmp_path):
    run_steps(pg_dsn, tmp_path / "state", VIEWS)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM by_x WHERE x = 'NaN'").fetchone()[0] == 0


def test_nan_join_with_duplicate_result_rows(pg_dsn, tmp_path):
    run_steps(pg_dsn, tmp_path / "state", JOIN_DUPLICATES)
