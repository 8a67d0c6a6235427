"""The commander's SQL surface (schema version 7) and its claim logic, against a real Postgres.

No engine process runs here: the procedures' timeouts and the ``Commander``'s claims are driven
by hand (``engine.commander``); the whole way through ``psql`` and ``incview run`` is in
``tests/e2e/test_commander_psql.py``.
"""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from engine import Engine
from engine.commander import Commander, sqlstate_of
from engine.errors import UnsupportedSQL, ViewError
from engine.postgres.view_catalog import MIGRATIONS, SCHEMA, ViewCatalog
from tests.engine_running import running


def _role(conn: psycopg.Connection, admin: bool) -> str:
    name = f"r_{uuid.uuid4().hex[:10]}"
    conn.execute(f"CREATE ROLE {name} LOGIN")
    if admin:
        conn.execute(f"GRANT incview_admin TO {name}")
    return name


def _as(dsn: str, role: str, timeout: str = "0.3") -> psycopg.Connection:
    return psycopg.connect(
        dsn, user=role, autocommit=True, options=f"-c incview.command_timeout={timeout}"
    )


def test_installed_idempotently_and_migrated_from_version_6(pg_conn):
    with pg_conn.transaction():
        for migration in MIGRATIONS[:6]:
            pg_conn.execute(migration)
        pg_conn.execute(f"INSERT INTO {SCHEMA}.meta VALUES ('schema_version', '6')")
        pg_conn.execute(
            f"INSERT INTO {SCHEMA}.views (name, sql, result_schema, result_table, phase) "
            "VALUES ('old', 'SELECT 2', 'public', 'old', 'running')"
        )
    ViewCatalog.open(pg_conn)
    ViewCatalog.open(pg_conn)
    assert pg_conn.execute(
        f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'"
    ).fetchone()[0] == str(len(MIGRATIONS))
    assert pg_conn.execute(
        "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'incview_admin'"
    ).fetchone() == (False,)
    rows = pg_conn.execute(f"SELECT name, phase, rows FROM {SCHEMA}.list_views()").fetchall()
    assert rows == [("old", "running", None)]


def test_no_engine_the_call_expires_and_is_never_claimed(pg_dsn, pg_conn, tmp_path):
    ViewCatalog.open(pg_conn)
    admin = _role(pg_conn, admin=True)
    with _as(pg_dsn, admin) as conn:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled, match="no incview engine answered"):
            conn.execute("CALL incview.create_view('v', 'SELECT 1')")
        assert 0.3 <= time.monotonic() - started < 5
    state = pg_conn.execute(f"SELECT state, caller FROM {SCHEMA}.commands").fetchall()
    assert state == [("expired", admin)]
    with Engine(pg_dsn, tmp_path / "s", runner="local") as eng:
        commander = Commander(eng)
        try:
            assert commander.claim() is None
        finally:
            commander.close()


def test_refused_in_a_transaction_block_and_for_non_members_allowed_with_parameters(
    pg_dsn, pg_conn
):
    ViewCatalog.open(pg_conn)
    in_block = pytest.raises(psycopg.errors.InvalidTransactionTermination)
    with psycopg.connect(pg_dsn) as conn, in_block:  # not autocommit: BEGIN first
        conn.execute("CALL incview.create_view('v', 'SELECT 1')")
    expires = pytest.raises(psycopg.errors.QueryCanceled, match="no incview engine answered")
    with psycopg.connect(pg_dsn, autocommit=True) as conn, expires:  # extended protocol
        conn.execute("SET incview.command_timeout = '0.1'")
        conn.execute("CALL incview.drop_view(%s)", ("v",))
    outsider = _role(pg_conn, admin=False)
    with _as(pg_dsn, outsider) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="incview_admin"):
            conn.execute("CALL incview.drop_view('v')")
        # a role sees and expires only its own commands (row level security)
        assert conn.execute(f"SELECT count(*) FROM {SCHEMA}.commands").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"INSERT INTO {SCHEMA}.commands (verb, caller) VALUES ('explain', 'x')")
    assert pg_conn.execute(f"SELECT caller, state FROM {SCHEMA}.commands").fetchall() == [
        ("pgtester", "expired")  # the drop_view with parameters; none of the outsider's
    ]


def test_claims_oldest_first_and_a_killed_claim_is_resumed_once(pg_dsn, pg_conn, tmp_path):
    pg_conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    pg_conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    pg_conn.execute("INSERT INTO t VALUES (1, 10), (2, 20)")
    ViewCatalog.open(pg_conn)
    for name in ("first", "second"):
        pg_conn.execute(
            f"INSERT INTO {SCHEMA}.commands (verb, name, query) VALUES ('create_view', %s, %s)",
            (name, "SELECT sum(v) AS s FROM t"),
        )
    with Engine(pg_dsn, tmp_path / "s", runner="local") as eng:
        dying = Commander(eng)
        other = Commander(eng)
        claimed = dying.claim()
        assert claimed is not None and claimed.name == "first"
        assert other.claim().name == "second"  # SKIP LOCKED / state running: never the same
        # the claimer dies between claim and answer: its advisory lock goes with its session
        dying.conn.close()
        assert pg_conn.execute(
            f"SELECT state FROM {SCHEMA}.commands WHERE name = 'first'"
        ).fetchone() == ("running",)
        other.close()
        resumed = Commander(eng)  # resumes 'first' and 'second' (their sessions are gone)
        resumed.close()
        again = Commander(eng)  # nothing left to resume: nothing runs twice
        again.close()
        states = pg_conn.execute(
            f"SELECT name, state, message FROM {SCHEMA}.commands ORDER BY id"
        ).fetchall()
        assert states == [("first", "done", None), ("second", "done", None)]
        assert sorted(v.name for v in eng.list_views()) == ["first", "second"]
    assert pg_conn.execute("SELECT s FROM first").fetchall() == [(30,)]


def test_a_running_claim_of_a_live_engine_is_not_resumed(pg_dsn, pg_conn, tmp_path):
    ViewCatalog.open(pg_conn)
    pg_conn.execute(f"INSERT INTO {SCHEMA}.commands (verb, query) VALUES ('explain', 'SELECT 1')")
    with Engine(pg_dsn, tmp_path / "s", runner="local") as eng:
        live = Commander(eng)
        assert live.claim() is not None
        other = Commander(eng)  # the claim's lock is held: not resumed here
        other.close()
        assert pg_conn.execute(f"SELECT state FROM {SCHEMA}.commands").fetchone() == ("running",)
        live.close()


def test_explain_answers_through_the_procedure(pg_dsn, pg_conn, tmp_path):
    pg_conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    ViewCatalog.open(pg_conn)
    with (
        Engine(pg_dsn, tmp_path / "s", runner="local") as eng,
        running(eng),
        _as(pg_dsn, "pgtester", timeout="20") as conn,
    ):
        plan = conn.execute("CALL incview.explain('SELECT v FROM t WHERE v > 3')")
        assert "== Optimized logical plan ==" in plan.fetchone()[0]
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="line 1, column"):
            conn.execute("CALL incview.explain('SELECT now() FROM t')")


def test_incview_install_is_idempotent(pg_dsn, capsys):
    from engine.cli import main

    assert main(["--dsn", pg_dsn, "install"]) == 0
    assert main(["--dsn", pg_dsn, "install"]) == 0
    out = capsys.readouterr().out
    assert f"installed (version {len(MIGRATIONS)})" in out and "incview_admin" in out


def test_sqlstates_fit_the_engine_errors():
    assert sqlstate_of(UnsupportedSQL("syntax error at line 1, column 3: ...")) == "42601"
    assert sqlstate_of(UnsupportedSQL("unknown table x at line 1, column 15: x")) == "42P01"
    assert sqlstate_of(UnsupportedSQL("window frames are not supported")) == "0A000"
    assert sqlstate_of(ViewError("view v already exists: drop it first")) == "42P07"
    assert sqlstate_of(ViewError("no view named 'v'")) == "42P01"


def test_quoted_names_reach_sql_as_identifiers(pg_dsn, pg_conn, tmp_path):
    """A caller named like no plain identifier, a new schema and a name with quotes and a
    semicolon: the view is created, granted, readable by its caller, and nothing else runs."""
    pg_conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    pg_conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    pg_conn.execute("INSERT INTO t VALUES (1, 10)")
    ViewCatalog.open(pg_conn)
    role = f"Odd-Role {uuid.uuid4().hex[:6]}"
    pg_conn.execute(f'CREATE ROLE "{role}" LOGIN')
    pg_conn.execute(f'GRANT incview_admin TO "{role}"')
    pg_conn.execute(f'GRANT SELECT ON t TO "{role}"')
    name = 'New Schema.v"; DROP TABLE t; --'
    with (
        Engine(pg_dsn, tmp_path / "s", runner="local") as eng,
        running(eng),
        _as(pg_dsn, role, timeout="20") as conn,
    ):
        conn.execute("CALL incview.create_view(%s, 'SELECT sum(v) AS s FROM t')", (name,))
        rows = conn.execute('SELECT s FROM "New Schema"."v""; DROP TABLE t; --"')
        assert rows.fetchall() == [(10,)]
        listed = conn.execute("SELECT name, created_by FROM incview.list_views()")
        assert listed.fetchall() == [(name, role)]
    assert pg_conn.execute("SELECT to_regclass('t') IS NOT NULL").fetchone() == (True,)


def test_column_privileges_decide_like_postgres(pg_dsn, pg_conn, tmp_path):
    """SELECT on some columns: a view reading only those (also in its WHERE) is created; one
    reading another column is refused, naming the table, and nothing is created."""
    pg_conn.execute("CREATE TABLE t (id int PRIMARY KEY, g text, v int, pay int)")
    pg_conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    pg_conn.execute("INSERT INTO t VALUES (1, 'a', 10, 99), (2, 'b', 1, 98)")
    ViewCatalog.open(pg_conn)
    role = _role(pg_conn, admin=True)
    pg_conn.execute(f"GRANT SELECT (id, g, v) ON t TO {role}")
    with (
        Engine(pg_dsn, tmp_path / "s", runner="local") as eng,
        running(eng),
        _as(pg_dsn, role, timeout="20") as conn,
    ):
        conn.execute("CALL incview.create_view('ok', 'SELECT g FROM t WHERE v > 5')")
        assert conn.execute("SELECT g FROM ok").fetchall() == [("a",)]
        for query in ("SELECT g, pay FROM t", "SELECT g FROM t WHERE pay > 0"):
            with pytest.raises(
                psycopg.errors.InsufficientPrivilege, match="permission denied for table t"
            ):
                conn.execute("CALL incview.create_view('no', %s)", (query,))
    assert pg_conn.execute("SELECT name FROM incview.views").fetchall() == [("ok",)]
    assert pg_conn.execute("SELECT to_regclass('no')").fetchone() == (None,)
