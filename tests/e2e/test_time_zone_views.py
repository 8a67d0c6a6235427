"""Views over timestamptz keep the TimeZone of the session that created them (runner local).

A view is planned under the creating session's ``TimeZone`` (the engine connection's for
``Engine.create_view``, the caller's for ``CALL incview.create_view``), which the catalog keeps:
reopened by an engine whose connection has another zone, it keeps computing in the first one,
through population and CDC, and ``explain`` names the zone. Dagster's ``matches_full_recompute``
check compares in the view's zone too.
"""

from __future__ import annotations

import datetime
import threading

import psycopg

from engine.commander import Commander
from engine.engine import Engine
from engine.postgres.view_catalog import SCHEMA, ViewCatalog
from tests.e2e.test_engine_oracle_many import diff_counts

UTC = datetime.UTC
VIEWS = {
    "by_day": "SELECT at::date AS day, count(*) AS n FROM events GROUP BY at::date",
    "by_month": "SELECT date_trunc('month', d) AS m, date_trunc('day', at) AS dd, "
    "extract(hour FROM at) AS h, at + interval '1 day' AS next, id FROM events",
}
# around New York's spring-forward (2024-03-10 07:00Z) and a local month end
ROWS = [
    (1, datetime.datetime(2024, 3, 10, 3, 30, tzinfo=UTC), datetime.date(2024, 3, 31)),
    (2, datetime.datetime(2024, 3, 10, 6, 59, tzinfo=UTC), datetime.date(2024, 4, 1)),
    (3, datetime.datetime(2024, 3, 10, 7, 0, tzinfo=UTC), None),
    (4, datetime.datetime(2024, 4, 1, 2, 0, tzinfo=UTC), datetime.date(2024, 3, 1)),
    (5, None, datetime.date(2024, 2, 29)),
]
MORE = [
    (6, datetime.datetime(2024, 11, 3, 5, 30, tzinfo=UTC), datetime.date(2024, 11, 3)),
    (7, datetime.datetime(2024, 11, 3, 6, 30, tzinfo=UTC), datetime.date(2024, 12, 1)),
    (8, datetime.datetime(2024, 12, 1, 3, 0, tzinfo=UTC), datetime.date(2024, 12, 31)),
]


def _zoned(dsn: str, zone: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, options=f"-c TimeZone={zone}")


def _insert(conn: psycopg.Connection, rows) -> None:
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO events VALUES (%s, %s, %s)", rows)


def test_a_view_keeps_the_time_zone_it_was_created_in(pg_dsn, tmp_path):
    ny_dsn = f"{pg_dsn} options='-c TimeZone=America/New_York'"
    with psycopg.connect(pg_dsn, autocommit=True) as conn, _zoned(pg_dsn, "America/New_York") as ny:
        assert conn.execute("SHOW TimeZone").fetchone()[0] != "America/New_York"
        conn.execute(
            "CREATE TABLE events (id int PRIMARY KEY, at timestamptz, d date);"
            "ALTER TABLE events REPLICA IDENTITY FULL"
        )
        _insert(conn, ROWS)
        with Engine(ny_dsn, tmp_path / "state", runner="local") as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
            assert "TimeZone: America/New_York" in eng.explain(VIEWS["by_day"])
            assert "TimeZone:" not in eng.explain("SELECT id FROM events WHERE at > at")
            assert {r.time_zone for r in eng.catalog.all()} == {"America/New_York"}
            eng.catch_up()
            for name, sql in VIEWS.items():
                assert diff_counts(ny, name, sql) == (0, 0), name
        # the engine's own connection now has another zone: the views keep New York's
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            assert eng.session_time_zone() != "America/New_York"
            assert all(v.phase == "running" and not v.last_error for v in eng.list_views())
            assert all(v.plan_changed is None for v in eng.views.values())  # not re-populated
            _insert(conn, MORE)
            conn.execute("UPDATE events SET at = at + interval '1 hour' WHERE id IN (1, 6)")
            conn.execute("DELETE FROM events WHERE id = 2")
            eng.catch_up()
            for name, sql in VIEWS.items():
                assert diff_counts(ny, name, sql) == (0, 0), name
                assert diff_counts(conn, name, sql) != (0, 0), name  # UTC: other results
            assert "TimeZone: America/New_York" in eng.views["by_day"].physical.explain()
        # the Dagster check runs the query in the view's zone, whatever its connection's
        from incview_dagster.checks import compare_with_full_recompute
        from incview_dagster.view import IncView

        for name, sql in VIEWS.items():
            assert compare_with_full_recompute(conn, IncView(name, sql)).equal, name


def test_a_view_created_from_sql_takes_the_callers_time_zone(pg_dsn, tmp_path):
    with (
        psycopg.connect(pg_dsn, autocommit=True) as conn,
        _zoned(pg_dsn, "Asia/Kolkata") as caller,
    ):
        conn.execute(
            "CREATE TABLE events (id int PRIMARY KEY, at timestamptz, d date);"
            "ALTER TABLE events REPLICA IDENTITY FULL"
        )
        # 20:00Z is the next day in Kolkata (+05:30)
        _insert(conn, [*ROWS, (9, datetime.datetime(2024, 6, 30, 20, 0, tzinfo=UTC), None)])
        ViewCatalog.open(conn)
        # what CALL incview.create_view inserts (in the caller's session: the column default)
        caller.execute(
            f"INSERT INTO {SCHEMA}.commands (verb, name, query) VALUES ('create_view', %s, %s)",
            ("by_day", VIEWS["by_day"]),
        )
        caller.execute(
            f"INSERT INTO {SCHEMA}.commands (verb, name, query) VALUES ('explain', NULL, %s)",
            (VIEWS["by_month"],),
        )
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            assert eng.session_time_zone() != "Asia/Kolkata"
            commander = Commander(eng)
            try:
                commander.step()
            finally:
                commander.close()
            rows = conn.execute(
                f"SELECT verb, state, message, result FROM {SCHEMA}.commands ORDER BY id"
            ).fetchall()
            assert [r[:3] for r in rows] == [
                ("create_view", "done", None),
                ("explain", "done", None),
            ]
            assert "TimeZone: Asia/Kolkata" in rows[1][3]
            assert eng.catalog.get("by_day").time_zone == "Asia/Kolkata"
            eng.catch_up()
            assert diff_counts(caller, "by_day", VIEWS["by_day"]) == (0, 0)
            assert diff_counts(conn, "by_day", VIEWS["by_day"]) != (0, 0)
            # the procedure itself, from a session in another zone, answered by a running engine
            stop = threading.Event()

            def serve() -> None:
                commander = Commander(eng)
                try:
                    while not stop.is_set():
                        commander.step()
                finally:
                    commander.close()

            server = threading.Thread(target=serve)
            server.start()
            try:
                with _zoned(pg_dsn, "America/Sao_Paulo") as other:
                    (plan,) = other.execute(
                        "CALL incview.explain(%s)", (VIEWS["by_month"],)
                    ).fetchone()
            finally:
                stop.set()
                server.join()
            assert "TimeZone: America/Sao_Paulo" in plan
