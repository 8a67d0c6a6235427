"""The ``incview`` schema in the user's database: one row per view, migrated forward on open.

``incview.views`` holds each view's name, SQL, result table, phase (populating | running | dropping | error
| sink_error), creation time, last applied LSN, last error, heartbeat and last batch metrics.
``incview.meta`` holds the schema version; ``ViewCatalog.open`` applies the migrations a database
lacks, in order, each in its own transaction, so older databases move forward safely. The sink
updates ``last_lsn`` in its own transaction (``record_applied``) so results and LSN commit
together. This module must not plan or maintain views.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

SCHEMA = "incview"

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
    "runner_host, lag_ms, last_change_lsn::text"
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

    def insert(self, name: str, sql: str, result_schema: str, result_table: str) -> None:
        self.conn.execute(
            f"INSERT INTO {SCHEMA}.views (name, sql, result_schema, result_table, phase) "
            "VALUES (%s, %s, %s, %s, 'populating')",
            (name, sql, result_schema, result_table),
        )

    def set_phase(self, name: str, phase: str, error: str | None = None) -> None:
        self.conn.execute(
            f"UPDATE {SCHEMA}.views SET phase = %s, last_error = %s WHERE name = %s",
            (phase, error, name),
        )

    def heartbeat(
        self, name: str, pid: int | None = None, host: str | None = None, lag_ms=None
    ) -> None:
        """The view's streaming job is alive (in process ``pid`` on ``host``, ``lag_ms`` behind)."""
        self.conn.execute(
            f"UPDATE {SCHEMA}.views SET heartbeat = now(), runner_pid = coalesce(%s, runner_pid), "
            "runner_host = coalesce(%s, runner_host), lag_ms = %s WHERE name = %s",
            (pid, host, lag_ms, name),
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
        cur.execute(
            f"UPDATE {SCHEMA}.views SET last_lsn = %s::pg_lsn, last_batch_rows = %s, "
            "last_batch_ms = %s, last_commit_time = coalesce(%s, last_commit_time), "
            "last_change_lsn = CASE WHEN %s > 0 THEN %s::pg_lsn ELSE last_change_lsn END "
            "WHERE name = %s",
            (int_to_lsn(lsn), rows, ms, commit_time, rows, int_to_lsn(lsn), name),
        )

    @staticmethod
    def applied_lsn(cur: psycopg.Cursor, name: str, lock: bool = False) -> int | None:
        """The view's last applied LSN, read (and row-locked if ``lock``) inside a transaction."""
        row = cur.execute(
            f"SELECT last_lsn::text FROM {SCHEMA}.views WHERE name = %s"
            + (" FOR UPDATE" if lock else ""),
            (name,),
        ).fetchone()
        return lsn_to_int(row[0]) if row else None


def view_records(conn: psycopg.Connection) -> list[ViewRecord]:
    """Every view of the catalog (``incview.views``), by name order; the schema is created or
    migrated on first use. Part of the engine's face (``from engine import view_records``)."""
    return ViewCatalog.open(conn).all()
