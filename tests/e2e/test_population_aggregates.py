"""End to end: GROUP BYs over one table populated from Postgres' partial aggregates.

The columnar reduces whose population query (``engine.sql.population_aggregate``) Postgres runs
take its groups instead of the table's rows, where the table then need not be read at all (a
table whose rows another collection of the view needs is read, and its GROUP BY takes them). A sum that does not fit the
reduce's record (a numeric NaN) sends that reduce back to the rows. After population and after
every random transaction and ``catch_up()``, each result table equals its query run by Postgres
(EXCEPT ALL both ways): the preloaded records are the ones the rows would have built.
"""

from __future__ import annotations

import logging
import random

import psycopg
import pytest

from engine.engine import Engine
from engine.postgres.snapshot import SnapshotReader
from tests.e2e.test_engine_oracle import diff_rows

VIEWS = {
    "q1_shape": "SELECT c, g, sum(x) AS sx, avg(x) AS ax, sum(q * (1 - x)) AS sq, "
    "avg(q) AS aq, count(*) AS n, count(x) AS nx FROM t "
    "WHERE d <= date '2024-03-01' - interval '10' day GROUP BY c, g",
    "overall": "SELECT count(*) FILTER (WHERE k > 2) AS nk, sum(k) FILTER (WHERE x IS NULL) AS sk, "
    "avg(x) AS ax FROM t WHERE x BETWEEN 0.5 AND 60 OR k IN (1, 2, -3)",
    "over_nothing": "SELECT count(*) AS n, sum(k) AS s, avg(x) AS a FROM t WHERE k > 1000000",
    "by_date": "SELECT d, sum(k) AS sk, avg(k) AS ak, count(x) AS nx FROM t "
    "WHERE k IN (1, 2, 3) OR x IS NULL GROUP BY d",
    # the lower GROUP BY is preloaded, the upper one counts its output rows
    "nested": "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM t GROUP BY g) a "
    "GROUP BY n",
    # two preloaded GROUP BYs over t: t is not read
    "two": "SELECT g, count(*) AS n, sum(x) AS s FROM t GROUP BY g UNION ALL "
    "SELECT k, count(*), sum(q) FROM t WHERE x > 0 GROUP BY k",
    # t also feeds a join: t is read for it, and its GROUP BY takes the rows too
    "shared": "SELECT a.g, a.n, t.id FROM (SELECT g, count(*) AS n, sum(x) AS s FROM t GROUP BY g) a "
    "JOIN t ON t.g = a.g WHERE t.k = 1",
    # a NaN in u: the sum does not fit the record, the reduce reads u's rows
    "with_nan": "SELECT g, sum(y) AS s, count(*) AS n FROM u GROUP BY g",
}
PRELOADED = {"q1_shape", "overall", "over_nothing", "by_date", "nested", "two", "with_nan"}


def _row(rng: random.Random, i: int) -> tuple:
    return (
        i,
        rng.randrange(6),
        rng.choice(["a", "bb", "ccc", "a  "]),
        f"2024-02-{rng.randint(1, 28):02d}",
        None if rng.random() < 0.15 else round(rng.uniform(-50, 80), 2),
        round(rng.uniform(0, 20), 3),
        None if rng.random() < 0.1 else rng.randint(-3, 9),
    )


def check(conn: psycopg.Connection, when: str) -> None:
    for name, sql in VIEWS.items():
        assert diff_rows(conn, name, sql) == (0, 0), f"{name} {when}"


@pytest.mark.slow
def test_preloaded_group_bys_equal_their_queries(pg_dsn, tmp_path, monkeypatch, caplog):
    rng = random.Random(11)
    queries: list[str] = []
    real = SnapshotReader.query_arrow

    def recorded(self, query):
        queries.append(query)
        return real(self, query)

    monkeypatch.setattr(SnapshotReader, "query_arrow", recorded)
    insert = "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s)"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t (id int PRIMARY KEY, g int, c character(3), d date, "
            "x numeric(12,2), q numeric(10,3) NOT NULL, k int);"
            "CREATE TABLE u (id int PRIMARY KEY, g int, y numeric(8,1));"
            "ALTER TABLE t REPLICA IDENTITY FULL; ALTER TABLE u REPLICA IDENTITY FULL;"
            "INSERT INTO u VALUES (1, 1, 2.5), (2, 1, 'NaN'), (3, 2, -1.5)"
        )
        with conn.cursor() as cur:
            cur.executemany(insert, [_row(rng, i) for i in range(1500)])
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            with caplog.at_level(logging.INFO, logger="engine.population"):
                for name, sql in VIEWS.items():
                    eng.create_view(name, sql)
            assert len(queries) == len(PRELOADED) + 1  # two's two GROUP BYs
            assert "read row by row (ArrowInvalid" in caplog.text
            assert caplog.text.count("read row by row") == 1  # only with_nan's
            check(conn, "after population")
            next_id = 1500
            for step in range(8):
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(insert, [_row(rng, next_id + j) for j in range(30)])
                    next_id += 30
                    cur.execute(
                        "UPDATE t SET x = x + 1, k = k - 1, g = (g + 1) %% 7 WHERE id %% 9 = %s",
                        (step,),
                    )
                    cur.execute("DELETE FROM t WHERE id %% 13 = %s", (step,))
                    cur.execute("UPDATE u SET y = y + 1 WHERE id = %s", (step % 3 + 1,))
                eng.catch_up(timeout_s=60)
                check(conn, f"after step {step}")
