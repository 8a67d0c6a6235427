"""The commander: runs the views commands that users issue in SQL (``CALL incview.create_view``).

The procedures of the ``incview`` schema (``engine.postgres.view_catalog``, version 7) insert a
row into ``incview.commands``, NOTIFY ``incview_commands`` and wait for the row's answer. A
``Commander`` lives in the long-lived process (``Engine.run``, hence ``incview run``): on its own
autocommit connection it LISTENs, and each ``step`` claims the oldest pending command (``FOR UPDATE
SKIP LOCKED``, so several engines never take the same one), marks it ``running``, runs
``Engine.create_view`` / ``drop_view`` / ``explain`` and records ``done`` or ``failed`` (with a
SQLSTATE the procedure raises). While it runs a command it holds a session advisory lock on it.

Exactly once: a command is claimed only while ``pending`` (an expired one is never run), and the
claim commits before anything runs. If the process dies between the claim and the answer, the
row stays ``running`` and its advisory lock goes with the session; the next ``Commander`` (after
``Engine`` finished or undid the interrupted creation) takes such rows whose lock it can get and
runs them again idempotently: a view already in the catalog with the same SQL is ``done``, a view
already gone is ``done`` for a drop.

Privileges, as Postgres would check them: the caller (``commands.caller``, set to the role that
inserted the row; row level security forbids another) must be a member of ``incview_admin`` to
create or drop, and must have USAGE on the schema and SELECT on every source table (or on every
column the query reads) to create or explain; the result table is granted (SELECT) to the caller.
Names reach SQL only as ``psycopg.sql.Identifier`` or bind parameters. A view is created and
explained under the caller's ``TimeZone`` (``commands.time_zone``, recorded by the column's
default in the calling session), as Postgres would evaluate the query in that session. This module must not plan
or maintain views itself: it calls the Engine.

A commands-only process (no view of its own: ``Engine(views=[])``, as under Dagster, where each
view runs in its own streaming job) gives the Commander a ``ViewHandoff``: each view it creates
is released (``Engine.release_view``) and handed to its own job, and a view is taken from its
job before it is dropped, all under the handoff's lock of that view.

Example (what ``Engine.run`` does)::

    commander = Commander(engine)
    while not stopped:
        if commander.step():  # a view was created or dropped
            ...
    commander.close()
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import psycopg
from psycopg import sql
from sqlglot import exp

from engine.errors import IncviewError, UnsupportedSQL, ViewError
from engine.outage import is_outage
from engine.postgres.view_catalog import ADMIN_ROLE, COMMANDS_CHANNEL, SCHEMA
from engine.sql.logical_plan import LogicalPlan, Scan
from engine.sql.planner import plan_view
from engine.view_names import split_view_name

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger(__name__)

# seconds to sleep after a claim, before running the command (tests kill the engine in there)
SLEEP_AFTER_CLAIM_ENV = "INCVIEW_TEST_SLEEP_AFTER_CLAIM"
POLL_S = 1.0  # look for pending commands this often even without a NOTIFY


@dataclass(frozen=True)
class Command:
    id: int
    verb: str
    name: str | None
    query: str | None
    caller: str
    time_zone: str | None = None  # the caller's session TimeZone (the view is planned under it)


class CommandFailed(Exception):
    """A command's answer: ``message`` raised by the procedure with ``sqlstate``."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class ViewHandoff(Protocol):
    """Where a commands-only process sends the views it creates (``incview_dagster``: to each
    view's streaming job)."""

    def holding(self, name: str) -> AbstractContextManager[None]:
        """Held while the view is created (and handed over) or dropped."""

    def take_over(self, name: str) -> None:
        """Run the view, created and released by this process, elsewhere."""

    def give_back(self, name: str) -> None:
        """Stop running the view elsewhere (it is about to be dropped here)."""


class Commander:
    """Claims, runs and answers ``incview.commands`` for one Engine (see the module docstring)."""

    def __init__(self, engine: Engine, handoff: ViewHandoff | None = None) -> None:
        self.engine = engine
        self.handoff = handoff
        self._resumed: set[int] = set()  # commands being run again after an interruption
        self._next_poll = 0.0
        self._connect()
        try:
            self.resume_interrupted()
        except BaseException:
            self.conn.close()  # with the advisory lock of a command it was resuming
            raise

    def _connect(self) -> None:
        self.conn = psycopg.connect(self.engine.dsn, autocommit=True)
        self._lock_class = self.conn.execute("SELECT hashtext('incview.command')").fetchone()[0]
        self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(COMMANDS_CHANNEL)))

    def close(self) -> None:
        self.conn.close()

    # -- the loop ------------------------------------------------------------------------------

    def step(self) -> bool:
        """Run every pending command (on a NOTIFY, or every ``POLL_S``); True if views changed."""
        if self.conn.closed or self.conn.broken:  # an outage: Engine.run reopened the rest
            self.conn.close()
            self._connect()
            self._next_poll = 0.0  # look for commands the outage interrupted
        woken = False
        for _ in self.conn.notifies(timeout=0):
            woken = True
        if not woken and time.monotonic() < self._next_poll:
            return False
        self._next_poll = time.monotonic() + POLL_S
        changed = self.resume_interrupted()  # e.g. another engine died holding one
        while (command := self.claim()) is not None:
            changed |= self.execute(command)
        return changed

    def claim(self) -> Command | None:
        """The oldest pending command, now ``running`` and advisory-locked by this session."""
        with self.conn.transaction():
            row = self.conn.execute(
                f"SELECT id, verb, name, query, caller, time_zone FROM {SCHEMA}.commands "
                "WHERE state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
            ).fetchone()
            if row is None:
                return None
            command = Command(*row)
            self.conn.execute(
                f"UPDATE {SCHEMA}.commands SET state = 'running', claimed_at = now(), "
                "claimed_pid = pg_backend_pid() WHERE id = %s",
                (command.id,),
            )
            self._lock(command.id, wait=True)
        log.info("command %d: %s %s claimed", command.id, command.verb, command.name or "")
        pause = float(os.environ.get(SLEEP_AFTER_CLAIM_ENV) or 0)
        if pause:
            time.sleep(pause)
        return command

    def resume_interrupted(self) -> bool:
        """Run again the ``running`` commands whose process died (nobody holds their lock);
        True if views changed."""
        rows = self.conn.execute(
            f"SELECT id, verb, name, query, caller, time_zone FROM {SCHEMA}.commands "
            "WHERE state = 'running' ORDER BY id"
        ).fetchall()
        changed = False
        for row in rows:
            command = Command(*row)
            if self._lock(command.id, wait=False):
                state = self.conn.execute(
                    f"SELECT state FROM {SCHEMA}.commands WHERE id = %s", (command.id,)
                ).fetchone()
                if state != ("running",):  # answered between the read and the lock
                    self._unlock(command.id)
                    continue
                log.warning("command %d (%s): resuming after an interruption", *row[:2])
                changed |= self.execute(command)
        return changed

    def execute(self, command: Command) -> bool:
        """Execute a claimed (and locked) ``command`` and record its answer; True if a view was
        created or dropped."""
        changed = False
        result = None
        try:
            try:
                result, changed = self._execute(command)
            except CommandFailed:
                raise
            except psycopg.errors.InsufficientPrivilege as e:
                raise CommandFailed("42501", str(e).strip()) from e
            except IncviewError as e:
                raise CommandFailed(sqlstate_of(e), str(e)) from e
        except CommandFailed as e:
            log.info("command %d (%s) failed: %s", command.id, command.verb, e)
            self._answer(command.id, "failed", e.sqlstate, str(e), None)
        except Exception as e:
            if is_outage(e):  # left running: resumed once the database is back
                raise
            log.exception("command %d (%s) failed", command.id, command.verb)
            self._answer(
                command.id, "failed", "XX000", f"internal error: {type(e).__name__}: {e}", None
            )
        else:
            self._answer(command.id, "done", None, None, result)
        return changed

    # -- the verbs -----------------------------------------------------------------------------

    def _execute(self, command: Command) -> tuple[str | None, bool]:
        eng = self.engine
        if command.verb == "explain":
            self._check_can_read(command)
            return eng.explain(command.query or "", command.time_zone), False
        if not self._is_admin(command.caller):
            raise CommandFailed(
                "42501",
                f"permission denied to {command.verb.replace('_', ' ')} {command.name}: role "
                f"{command.caller} is not a member of {ADMIN_ROLE}",
            )
        name = command.name or ""
        holding = self.handoff.holding(name) if self.handoff else contextlib.nullcontext()
        with holding:
            return self._create_or_drop(command, name)

    def _create_or_drop(self, command: Command, name: str) -> tuple[None, bool]:
        eng = self.engine
        record = eng.catalog.get(name)
        if command.verb == "drop_view":
            if record is None and self._done_before(command):
                return None, False  # dropped before an interruption
            if record is not None and self.handoff is not None:
                self.handoff.give_back(name)
            eng.drop_view(name)
            return None, True
        if record is not None and record.sql == command.query and self._done_before(command):
            # created before an interruption (Engine finished it on open); granted again, in
            # case the interruption came before the grant
            if name in eng.views or (self.handoff is not None and record.phase != "populating"):
                self._grant(name, command.caller)
                self._hand_over(name)
                return None, False
            if self.handoff is None:
                return None, False  # it broke on open: list_views() says why
            # a commands-only process does not open views: a creation cut short starts over
            eng.drop_view(name)
        self._check_can_read(command)
        eng.create_view(name, command.query or "", command.time_zone)
        self._grant(name, command.caller)
        self._hand_over(name)
        return None, True

    def _hand_over(self, name: str) -> None:
        """A commands-only process lets the view's own job run it (see ``ViewHandoff``)."""
        if self.handoff is not None:
            self.engine.release_view(name)
            self.handoff.take_over(name)

    def _done_before(self, command: Command) -> bool:
        """Whether ``command`` was claimed before (it is being resumed, not run the first time)."""
        return command.id in self._resumed

    def _is_admin(self, role: str) -> bool:
        row = self.conn.execute(
            "SELECT pg_has_role(%s, %s, 'MEMBER') FROM pg_roles WHERE rolname = %s",
            (role, ADMIN_ROLE, ADMIN_ROLE),
        ).fetchone()
        if row is None:  # no admin role (the engine could not create it): superusers only
            row = self.conn.execute(
                "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)
            ).fetchone()
        return bool(row and row[0])

    def _check_can_read(self, command: Command) -> None:
        """Raise ``CommandFailed`` 42501 unless the caller may read what the query reads."""
        role = command.caller
        plan = plan_view(command.query or "", self.engine.sources, command.time_zone)
        for scan in _scans(plan.optimized):
            schema = self.conn.execute(
                "SELECT has_schema_privilege(%s, %s, 'USAGE')", (role, scan.schema)
            ).fetchone()[0]
            if not schema:
                raise CommandFailed("42501", f"permission denied for schema {scan.schema}")
            oid = self.conn.execute(
                "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s",
                (scan.schema, scan.table),
            ).fetchone()[0]
            if self.conn.execute(
                "SELECT has_table_privilege(%s, %s, 'SELECT')", (role, oid)
            ).fetchone()[0]:
                continue
            columns = _columns_read(scan)
            if columns:
                ok = self.conn.execute(
                    "SELECT bool_and(has_column_privilege(%s, %s, c, 'SELECT')) "
                    "FROM unnest(%s::text[]) AS c",
                    (role, oid, sorted(columns)),
                ).fetchone()[0]
            else:  # count(*): Postgres asks for SELECT on some column
                ok = self.conn.execute(
                    "SELECT has_any_column_privilege(%s, %s, 'SELECT')", (role, oid)
                ).fetchone()[0]
            if not ok:
                raise CommandFailed("42501", f"permission denied for table {scan.table}")

    def _grant(self, name: str, role: str) -> None:
        """The caller may read the view's result table (and reach its schema)."""
        schema, table = split_view_name(name)
        conn = self.engine.conn
        if not conn.execute(
            "SELECT has_schema_privilege(%s, %s, 'USAGE')", (role, schema)
        ).fetchone()[0]:
            conn.execute(
                sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                    sql.Identifier(schema), sql.Identifier(role)
                )
            )
        conn.execute(
            sql.SQL("GRANT SELECT ON TABLE {} TO {}").format(
                sql.Identifier(schema, table), sql.Identifier(role)
            )
        )
        conn.execute(f"UPDATE {SCHEMA}.views SET created_by = %s WHERE name = %s", (role, name))

    # -- bookkeeping ---------------------------------------------------------------------------

    def _lock(self, command_id: int, wait: bool) -> bool:
        fn = "pg_advisory_lock" if wait else "pg_try_advisory_lock"
        row = self.conn.execute(
            f"SELECT {fn}(%s, %s)::text", (self._lock_class, command_id)
        ).fetchone()
        got = wait or row[0] == "true"
        if got and not wait:
            self._resumed.add(command_id)
        return got

    def _answer(
        self, command_id: int, state: str, sqlstate: str | None, message: str | None, result
    ) -> None:
        self.conn.execute(
            f"UPDATE {SCHEMA}.commands SET state = %s, sqlstate = %s, message = %s, "
            "result = %s, finished_at = now() WHERE id = %s",
            (state, sqlstate, message, result, command_id),
        )
        self._unlock(command_id)

    def _unlock(self, command_id: int) -> None:
        self.conn.execute("SELECT pg_advisory_unlock(%s, %s)", (self._lock_class, command_id))
        self._resumed.discard(command_id)


def install(dsn: str) -> str:
    """Install or upgrade the ``incview`` schema (catalog, commands, procedures, the role
    ``incview_admin``) in the database at ``dsn``; idempotent. Returns what it did, in words."""
    from engine.postgres.view_catalog import MIGRATIONS, ViewCatalog

    with psycopg.connect(dsn, autocommit=True) as conn:
        ViewCatalog.open(conn)
        role = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ADMIN_ROLE,)).fetchone()
    note = (
        f"members of role {ADMIN_ROLE} may CALL incview.create_view(name, query)"
        if role
        else f"role {ADMIN_ROLE} is missing (a superuser can create it): only superusers may "
        "create views from SQL"
    )
    return f"the incview schema is installed (version {len(MIGRATIONS)}); {note}"


def sqlstate_of(error: IncviewError) -> str:
    """The SQLSTATE a procedure raises for the engine's ``error``."""
    text = str(error)
    if isinstance(error, UnsupportedSQL):
        if text.startswith("syntax error"):
            return "42601"  # syntax_error
        if text.startswith("unknown table"):
            return "42P01"  # undefined_table
        if text.startswith("column") and "does not exist" in text:
            return "42703"  # undefined_column
        if text.startswith("operator does not exist"):
            return "42883"  # undefined_function
        return "0A000"  # feature_not_supported
    if isinstance(error, ViewError):
        if "already exists" in text:
            return "42P07"  # duplicate_table
        if text.startswith("no view named"):
            return "42P01"
    return "55000"  # object_not_in_prerequisite_state


def _scans(plan: LogicalPlan) -> list[Scan]:
    if isinstance(plan, Scan):
        return [plan]
    return [s for child in plan.children for s in _scans(child)]


def _columns_read(scan: Scan) -> set[str]:
    """The table columns a scan reads: its projection and those its pushed filters use."""
    fields = scan.table_fields if scan.projection is None else scan.fields
    names = {f.name for f in fields}
    for predicate in scan.filters:
        names.update(c.name for c in predicate.find_all(exp.Column))
    return names
