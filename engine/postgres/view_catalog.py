"""The ``incview`` schema in the user's database: one row per view, migrated forward on open.

``incview.views`` holds each view's name, SQL, result table, phase (populating | running | dropping | error
| sink_error), creation time, last applied LSN, last error, heartbeat and last batch metrics, and
the Postgres ``TimeZone`` of the session that created it (the view is always planned under it).
``incview.meta`` holds the schema version; ``ViewCatalog.open`` applies the migrations a database
lacks, in order, each in its own transaction, so older databases move forward safely. The sink
updates ``last_lsn`` in its own transaction (``record_applied``) so results and LSN commit
together. This module must not plan or maintain views.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql

SCHEMA = "incview"

ADMIN_ROLE = "incview_admin"  # members may create and drop views from SQL
COMMANDS_CHANNEL = "incview_commands"  # NOTIFY'd by the procedures, LISTENed by the commander

# Version 7: views declared from inside Postgres. ``incview.commands`` (one row per CALL; row
# level security lets a role see and expire only its own commands), the role ``incview_admin``
# (created when missing; an engine role without CREATEROLE gets a warning and no role: then only
# superusers may create views from SQL), the procedures ``create_view``/``drop_view``/``explain``
# (SECURITY INVOKER: procedures that COMMIT cannot be SECURITY DEFINER or carry SET clauses),
# ``list_views()`` (SECURITY DEFINER: anybody may list views) and the catalog columns that
# ``list_views()`` shows. The procedures wait in ``incview._await``: insert, NOTIFY, COMMIT, then
# poll; ``incview.command_timeout`` (seconds, or an interval such as '500ms'; default 30 s) bounds
# the wait for an engine to claim the command, after which it is marked expired (never run).
COMMANDER_MIGRATION = f"""
    DO $do$
    BEGIN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ADMIN_ROLE}') THEN
            CREATE ROLE {ADMIN_ROLE} NOLOGIN;
        END IF;
    EXCEPTION
        WHEN duplicate_object THEN NULL;  -- another database of the cluster created it just now
        WHEN insufficient_privilege THEN
            RAISE WARNING 'incview could not create role {ADMIN_ROLE}: only superusers may '
                'create views from SQL until a superuser runs CREATE ROLE {ADMIN_ROLE} NOLOGIN';
    END
    $do$;

    ALTER TABLE {SCHEMA}.views
        ADD COLUMN IF NOT EXISTS created_by name DEFAULT current_user,
        ADD COLUMN IF NOT EXISTS result_rows bigint,
        ADD COLUMN IF NOT EXISTS state_bytes bigint;

    CREATE TABLE IF NOT EXISTS {SCHEMA}.commands (
        id bigserial PRIMARY KEY,
        verb text NOT NULL CHECK (verb IN ('create_view', 'drop_view', 'explain')),
        name text,
        query text,
        state text NOT NULL DEFAULT 'pending'
            CHECK (state IN ('pending', 'running', 'done', 'failed', 'expired')),
        caller name NOT NULL DEFAULT current_user,
        sqlstate text,
        message text,
        result text,
        created_at timestamptz NOT NULL DEFAULT now(),
        claimed_at timestamptz,
        claimed_pid integer,
        finished_at timestamptz
    );
    CREATE INDEX IF NOT EXISTS commands_open ON {SCHEMA}.commands (id)
        WHERE state IN ('pending', 'running');
    ALTER TABLE {SCHEMA}.commands ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS own_commands ON {SCHEMA}.commands;
    CREATE POLICY own_commands ON {SCHEMA}.commands FOR SELECT USING (caller = current_user);
    DROP POLICY IF EXISTS submit_command ON {SCHEMA}.commands;
    CREATE POLICY submit_command ON {SCHEMA}.commands FOR INSERT
        WITH CHECK (caller = current_user AND state = 'pending');
    DROP POLICY IF EXISTS expire_command ON {SCHEMA}.commands;
    CREATE POLICY expire_command ON {SCHEMA}.commands FOR UPDATE
        USING (caller = current_user AND state = 'pending')
        WITH CHECK (caller = current_user AND state = 'expired');
    GRANT USAGE ON SCHEMA {SCHEMA} TO PUBLIC;
    GRANT SELECT (id, verb, name, state, caller, sqlstate, message, result, created_at,
                  claimed_pid),
          INSERT (verb, name, query),
          UPDATE (state)
        ON {SCHEMA}.commands TO PUBLIC;
    GRANT USAGE ON SEQUENCE {SCHEMA}.commands_id_seq TO PUBLIC;

    CREATE OR REPLACE FUNCTION {SCHEMA}.command_timeout() RETURNS interval
    LANGUAGE plpgsql STABLE AS $fn$
    DECLARE
        setting text := nullif(btrim(current_setting('incview.command_timeout', true)), '');
    BEGIN
        IF setting IS NULL THEN
            RETURN interval '30 seconds';
        ELSIF setting ~ '^[0-9]+([.][0-9]*)?$' THEN
            RETURN make_interval(secs => setting::double precision);
        END IF;
        RETURN setting::interval;
    END
    $fn$;

    CREATE OR REPLACE PROCEDURE {SCHEMA}._await(
        verb text, view_name text, view_query text, INOUT answer text
    )
    LANGUAGE plpgsql AS $fn$
    DECLARE
        command_id bigint;
        deadline timestamptz;
        c record;
        expired integer;
    BEGIN
        -- Inside a transaction block (BEGIN ... CALL) Postgres refuses this COMMIT with
        -- "invalid transaction termination" (2D000), before anything is recorded: the CALL
        -- must run on its own, in autocommit mode. (No SQL function tells a block apart
        -- reliably: the timestamps differ in autocommit too under the extended protocol.)
        COMMIT;
        IF verb <> 'explain' AND NOT pg_has_role(current_user, '{ADMIN_ROLE}', 'MEMBER') THEN
            RAISE EXCEPTION 'permission denied to run incview.%: only members of role '
                '{ADMIN_ROLE} may create or drop views', verb
                USING ERRCODE = '42501',
                      HINT = format('a superuser can run: GRANT {ADMIN_ROLE} TO %I', current_user);
        END IF;
        INSERT INTO {SCHEMA}.commands (verb, name, query) VALUES (verb, view_name, view_query)
            RETURNING id INTO command_id;
        PERFORM pg_notify('{COMMANDS_CHANNEL}', command_id::text);
        COMMIT;
        deadline := clock_timestamp() + {SCHEMA}.command_timeout();
        LOOP
            SELECT k.state, k.sqlstate, k.message, k.result, k.claimed_pid INTO c
                FROM {SCHEMA}.commands k WHERE k.id = command_id;
            IF c.state = 'done' THEN
                answer := c.result;
                RETURN;
            ELSIF c.state = 'failed' THEN
                RAISE EXCEPTION USING MESSAGE = c.message, ERRCODE = coalesce(c.sqlstate, 'XX000');
            ELSIF clock_timestamp() > deadline AND c.state = 'pending' THEN
                UPDATE {SCHEMA}.commands k SET state = 'expired'
                    WHERE k.id = command_id AND k.state = 'pending';
                GET DIAGNOSTICS expired = ROW_COUNT;
                IF expired = 1 THEN
                    COMMIT;
                    RAISE EXCEPTION 'no incview engine answered incview.% within %: command % '
                        'expired and will never run', verb, {SCHEMA}.command_timeout(), command_id
                        USING ERRCODE = '57014',
                              HINT = 'start `incview run` (or the Dagster job that runs the '
                                     'views), then CALL again; SET incview.command_timeout '
                                     'waits longer';
                END IF;
            ELSIF clock_timestamp() > deadline AND c.state = 'running' AND NOT EXISTS (
                SELECT FROM pg_stat_activity a WHERE a.pid = c.claimed_pid
            ) THEN
                RAISE EXCEPTION 'the incview engine stopped while running command % (incview.%)',
                    command_id, verb
                    USING ERRCODE = '57P01',
                          HINT = 'the next start of `incview run` (or the Dagster job) finishes '
                                 'it exactly once: see SELECT * FROM incview.list_views()';
            END IF;
            COMMIT;
            PERFORM pg_sleep(0.05);
        END LOOP;
    END
    $fn$;

    CREATE OR REPLACE PROCEDURE {SCHEMA}.create_view(name text, query text)
    LANGUAGE plpgsql AS $fn$
    DECLARE
        answer text;
    BEGIN
        CALL {SCHEMA}._await('create_view', name, query, answer);
    END
    $fn$;

    CREATE OR REPLACE PROCEDURE {SCHEMA}.drop_view(name text)
    LANGUAGE plpgsql AS $fn$
    DECLARE
        answer text;
    BEGIN
        CALL {SCHEMA}._await('drop_view', name, NULL, answer);
    END
    $fn$;

    CREATE OR REPLACE PROCEDURE {SCHEMA}.explain(query text, INOUT plan text DEFAULT NULL)
    LANGUAGE plpgsql AS $fn$
    BEGIN
        CALL {SCHEMA}._await('explain', NULL, query, plan);
    END
    $fn$;

    CREATE OR REPLACE FUNCTION {SCHEMA}.list_views()
    RETURNS TABLE (name text, phase text, lag_ms double precision, "rows" bigint,
                   state_bytes bigint, last_error text, created_at timestamptz, created_by name)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
        SELECT v.name, v.phase, v.lag_ms, v.result_rows, v.state_bytes, v.last_error, v.created,
               v.created_by
        FROM {SCHEMA}.views v ORDER BY v.name
    $fn$;
"""

# Each entry runs once, in order; never edit a released migration, append a new one.
MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE SCHEMA IF NOT EXISTS {SCHEMA};
    CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (key text PRIMARY KEY, value text NOT NULL);
    CREATE TABLE IF NOT EXISTS {SCHEMA}.views (
        name text PRIMARY KEY,
        sql text NOT NULL,
        result_schema text NOT NULL,
        result_table text NOT NULL,
        phase text NOT NULL CHECK (phase IN ('populating', 'running', 'error', 'sink_error')),
        created timestamptz NOT NULL DEFAULT now(),
        last_lsn pg_lsn,
        last_error text
    );
    """,
    f"""
    ALTER TABLE {SCHEMA}.views
        ADD COLUMN IF NOT EXISTS heartbeat timestamptz,
        ADD COLUMN IF NOT EXISTS last_commit_time timestamptz,
        ADD COLUMN IF NOT EXISTS last_batch_rows bigint,
        ADD COLUMN IF NOT EXISTS last_batch_ms double precision;
    """,
    # state_lsn: where the view's operator state is (<= last_lsn after a crash between the sink's
    # commit and the state's); the slot never advances past the smallest (engine.Engine).
    # runner_pid/runner_host: the process running the view's streaming job.
    f"""
    ALTER TABLE {SCHEMA}.views
        ADD COLUMN IF NOT EXISTS state_lsn pg_lsn,
        ADD COLUMN IF NOT EXISTS runner_pid integer,
        ADD COLUMN IF NOT EXISTS runner_host text;
    """,
    # lag_ms: the running job's lag at its last heartbeat (list_views' meaning)
    f"""
    ALTER TABLE {SCHEMA}.views ADD COLUMN IF NOT EXISTS lag_ms double precision;
    """,
    # last_change_lsn: the last applied LSN whose batch changed result rows (last_lsn moves with
    # every batch, also those that change nothing in this view)
    f"""
    ALTER TABLE {SCHEMA}.views ADD COLUMN IF NOT EXISTS last_change_lsn pg_lsn;
    UPDATE {SCHEMA}.views SET last_change_lsn = last_lsn WHERE last_change_lsn IS NULL;
    """,
    # phase dropping: drop_view marks the view first, so that a crash in the middle of the drop
    # leaves a view the next open finishes dropping
    f"""
    ALTER TABLE {SCHEMA}.views DROP CONSTRAINT IF EXISTS views_phase_check;
    ALTER TABLE {SCHEMA}.views ADD CONSTRAINT views_phase_check
        CHECK (phase IN ('populating', 'running', 'error', 'sink_error', 'dropping'));
    """,
    # the commander (engine.commander, docs/commander.md): views created from SQL
    COMMANDER_MIGRATION,
    # time_zone: the TimeZone of the session that created the view, which its expressions over
    # timestamptz are evaluated in (engine.sql.time_zone); a command records its caller's (the
    # column default is evaluated in the session that CALLs incview.create_view/explain)
    f"""
    ALTER TABLE {SCHEMA}.views ADD COLUMN IF NOT EXISTS time_zone text;
    ALTER TABLE {SCHEMA}.commands
        ADD COLUMN IF NOT EXISTS time_zone text DEFAULT current_setting('TimeZone');
    """,
)


@dataclass(frozen=True)
class ViewRecord:
    name: str
    sql: str
    result_schema: str
    result_table: str
    phase: str
    created: datetime
    last_lsn: int | None
    last_error: str | None
    heartbeat: datetime | None
    last_commit_time: datetime | None
    last_batch_rows: int | None
    last_batch_ms: float | None
    state_lsn: int | None
    runner_pid: int | None
    runner_host: str | None
    lag_ms: float | None
    last_change_lsn: int | None
    time_zone: str | None = None  # the creating session's TimeZone (None: created before v8)


def lsn_to_int(lsn: str | None) -> int | None:
    if lsn is None:
        return None
    hi, lo = str(lsn).split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


_COLUMNS = (
    "name, sql, result_schema, result_table, phase, created, last_lsn::text, last_error, "
    "heartbeat, last_commit_time, last_batch_rows, last_batch_ms, state_lsn::text, runner_pid, "
    "runner_host, lag_ms, last_change_lsn::text, time_zone"
)


class ViewCatalog:
    """Reads and writes ``incview.views`` over one autocommit connection."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    @classmethod
    def open(cls, conn: psycopg.Connection) -> ViewCatalog:
        """Create the schema on first use and apply missing migrations."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('incview.migrate'))")
            exists = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.meta",)
            ).fetchone()[0]
            version = 0
            if exists:
                row = conn.execute(
                    f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'"
                ).fetchone()
                version = int(row[0]) if row else 0
            if version > len(MIGRATIONS):
                raise RuntimeError(
                    f"the incview schema is at version {version}, newer than this incview "
                    f"({len(MIGRATIONS)}): upgrade incview"
                )
            for i in range(version, len(MIGRATIONS)):
                conn.execute(MIGRATIONS[i])
                conn.execute(
                    f"INSERT INTO {SCHEMA}.meta VALUES ('schema_version', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(i + 1),),
                )
        return cls(conn)

    def _record(self, row) -> ViewRecord:
        values = list(row)
        values[6] = lsn_to_int(values[6])
        values[12] = lsn_to_int(values[12])
        values[16] = lsn_to_int(values[16])
        return ViewRecord(*values)

    def get(self, name: str) -> ViewRecord | None:
        row = self.conn.execute(
            f"SELECT {_COLUMNS} FROM {SCHEMA}.views WHERE name = %s", (name,)
        ).fetchone()
        return self._record(row) if row else None

    def all(self) -> list[ViewRecord]:
        rows = self.conn.execute(f"SELECT {_COLUMNS} FROM {SCHEMA}.views ORDER BY name").fetchall()
        return [self._record(r) for r in rows]

    def creating(self, name: str, held: bool) -> None:
        """Take (``held``) or release the creation lock of view ``name``: a session advisory
        lock, so it goes with the creating process if that dies."""
        fn = "pg_advisory_lock" if held else "pg_advisory_unlock"
        self.conn.execute(f"SELECT {fn}(hashtext(%s))", (f"incview.create:{name}",))

    def creator_gone(self, name: str) -> bool:
        """Whether no process holds view ``name``'s creation lock (its creation was cut short)."""
        key = f"incview.create:{name}"
        got = self.conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()
        if got and got[0]:
            self.conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
            return True
        return False

    def insert(
        self,
        name: str,
        sql: str,
        result_schema: str,
        result_table: str,
        time_zone: str | None = None,
    ) -> None:
        self.conn.execute(
            f"INSERT INTO {SCHEMA}.views (name, sql, result_schema, result_table, phase, "
            "time_zone) VALUES (%s, %s, %s, %s, 'populating', %s)",
            (name, sql, result_schema, result_table, time_zone),
        )

    def set_phase(self, name: str, phase: str, error: str | None = None) -> None:
        self.conn.execute(
            f"UPDATE {SCHEMA}.views SET phase = %s, last_error = %s WHERE name = %s",
            (phase, error, name),
        )

    def heartbeat(
        self,
        name: str,
        pid: int | None = None,
        host: str | None = None,
        lag_ms=None,
        *,
        rows: int | None = None,
        state_bytes: int | None = None,
    ) -> None:
        """The view's streaming job is alive (in process ``pid`` on ``host``, ``lag_ms`` behind;
        its result table has ``rows`` rows, its state ``state_bytes`` bytes, when given)."""
        self.conn.execute(
            f"UPDATE {SCHEMA}.views SET heartbeat = now(), runner_pid = coalesce(%s, runner_pid), "
            "runner_host = coalesce(%s, runner_host), lag_ms = %s, "
            "result_rows = coalesce(%s, result_rows), state_bytes = coalesce(%s, state_bytes) "
            "WHERE name = %s",
            (pid, host, lag_ms, rows, state_bytes, name),
        )

    def stopped(self, name: str) -> None:
        """The view's streaming job stopped cleanly (no process runs it)."""
        self.conn.execute(
            f"UPDATE {SCHEMA}.views SET runner_pid = NULL, runner_host = NULL WHERE name = %s",
            (name,),
        )

    def record_state(self, states: dict[str, int]) -> None:
        """The views' operator state is committed up to these LSNs."""
        if states:
            names, lsns = zip(*((n, int_to_lsn(lsn)) for n, lsn in states.items()), strict=True)
            self.conn.execute(
                f"UPDATE {SCHEMA}.views v SET state_lsn = s.lsn::pg_lsn FROM "
                "unnest(%s::text[], %s::text[]) AS s(name, lsn) WHERE v.name = s.name",
                (list(names), list(lsns)),
            )

    def min_state_lsn(self) -> int | None:
        """The smallest state LSN over every view (None if some view has none yet)."""
        row = self.conn.execute(
            f"SELECT bool_or(state_lsn IS NULL), min(state_lsn)::text FROM {SCHEMA}.views"
        ).fetchone()
        if row is None or row[0] is None or row[0]:
            return None
        return lsn_to_int(row[1])

    def delete(self, name: str) -> None:
        self.conn.execute(f"DELETE FROM {SCHEMA}.views WHERE name = %s", (name,))

    @staticmethod
    def record_applied(
        cur: psycopg.Cursor, name: str, lsn: int, rows: int, ms: float, commit_time: datetime | None
    ) -> None:
        """Inside the sink's transaction: the view now reflects everything up to ``lsn``; ``rows``
        result rows were written (inserted + deleted) by this batch."""
        cur.execute(ViewCatalog.applied_statement(name, lsn, rows, ms, commit_time))

    @staticmethod
    def applied_statement(
        name: str,
        lsn: int,
        rows: int,
        ms: float,
        commit_time: datetime | None,
        *,
        only_if_behind: bool = False,
    ) -> sql.Composed:
        """``record_applied``'s statement with its values in it (no parameters), so that it can
        share a round trip with others (the sink sends its ``COMMIT`` along). ``only_if_behind``:
        it changes nothing where the row already holds ``lsn`` or a later one."""
        at = sql.Literal(int_to_lsn(lsn))
        return sql.SQL(
            "UPDATE {}.views SET last_lsn = {}::pg_lsn, last_batch_rows = {}, last_batch_ms = {}, "
            "last_commit_time = coalesce({}::timestamptz, last_commit_time), "
            "last_change_lsn = CASE WHEN {} > 0 THEN {}::pg_lsn ELSE last_change_lsn END "
            "WHERE name = {}{}"
        ).format(
            sql.Identifier(SCHEMA),
            at,
            sql.Literal(rows),
            sql.Literal(float(ms)),
            sql.Literal(commit_time),
            sql.Literal(rows),
            at,
            sql.Literal(name),
            sql.SQL(" AND (last_lsn IS NULL OR last_lsn < {}::pg_lsn)").format(at)
            if only_if_behind
            else sql.SQL(""),
        )

    @staticmethod
    def applied_lsn(cur: psycopg.Cursor, name: str, lock: bool = False) -> int | None:
        """The view's last applied LSN, read (and row-locked if ``lock``) inside a transaction."""
        row = cur.execute(ViewCatalog.applied_lsn_query(name, lock=lock)).fetchone()
        return lsn_to_int(row[0]) if row else None

    @staticmethod
    def applied_lsn_query(
        name: str, *, lock: bool = False, also: sql.Composable | None = None
    ) -> sql.Composed:
        """``applied_lsn``'s query with the name in it (no parameters, so it can share a round
        trip); ``also``: an expression returned as a second column."""
        return sql.SQL("SELECT last_lsn::text{} FROM {}.views WHERE name = {}{}").format(
            sql.SQL(", ") + also if also is not None else sql.SQL(""),
            sql.Identifier(SCHEMA),
            sql.Literal(name),
            sql.SQL(" FOR UPDATE" if lock else ""),
        )


def view_records(conn: psycopg.Connection) -> list[ViewRecord]:
    """Every view of the catalog (``incview.views``), by name order; the schema is created or
    migrated on first use. Part of the engine's face (``from engine import view_records``)."""
    return ViewCatalog.open(conn).all()
