"""character(n) columns: Postgres ignores their trailing blanks in comparisons and drops them
when converting to text; views over them must give exactly what Postgres gives, through
population and CDC (runner local)."""

from __future__ import annotations

import psycopg

from engine.engine import Engine
from tests.e2e.test_engine_oracle_many import diff_counts

VIEWS = {
    "building": "SELECT k, c FROM t WHERE c = 'BUILDING'",
    "mail_or_ship": "SELECT k FROM t WHERE c IN ('MAIL', 'SHIP')",
    "by_c": "SELECT c, count(*) AS n, max(length(c)) AS len FROM t GROUP BY c",
    # character(n) = varchar compares without trailing blanks (bpchar); = text with them
    "vs_varchar": "SELECT t.k, u.v FROM t, u WHERE t.c = u.c OR t.c = u.c || 'X'",
    "joined": "SELECT t.k, u.v FROM t JOIN u ON t.c = u.c",
    "vs_text": "SELECT t.k, u.v FROM t, u WHERE t.c = u.c::text",
    "padded_literal": "SELECT k FROM t WHERE c = 'MAIL   ' OR c IN ('SHIP ')",
    "texts": "SELECT k, c || '|' AS s, c::text AS tx, c < 'MAIL ' AS lt FROM t",
}


def test_char_columns_compare_like_postgres(pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t (k int PRIMARY KEY, c char(10)); ALTER TABLE t REPLICA IDENTITY FULL;"
            "CREATE TABLE u (c varchar(12), v int); ALTER TABLE u REPLICA IDENTITY FULL;"
            "INSERT INTO t VALUES (1, 'BUILDING'), (2, 'MAIL'), (3, 'SHIP  '), (4, NULL), (5, '');"
            "INSERT INTO u VALUES ('MAIL', 10), ('MAIL  ', 11), ('SHIP', 12)"
        )
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
            conn.execute("INSERT INTO t VALUES (6, 'MAIL '), (7, 'BUILDING  ')")
            conn.execute("UPDATE t SET c = 'SHIP' WHERE k = 1")
            conn.execute("DELETE FROM t WHERE k = 2")
            eng.catch_up()
            bad = {n: diff_counts(conn, n, q) for n, q in VIEWS.items()}
            assert all(d == (0, 0) for d in bad.values()), bad
            assert conn.execute("SELECT count(*) FROM building").fetchone()[0] == 1
            assert conn.execute("SELECT count(*) FROM mail_or_ship").fetchone()[0] == 3
