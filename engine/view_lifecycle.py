"""Creating and dropping views: catalog row, publication and slot, result table, state.

``create_view`` writes the catalog row first and holds a creation lock, so a crash at any point
leaves a view the next open finishes or undoes (``engine.view_opening``); a failure undoes what
the call added (``engine.view_creation``). A view is planned under the Postgres ``TimeZone`` of
the session that creates it (the caller's for the commander, the engine connection's otherwise),
which the catalog row keeps for every later planning. ``drop_view`` marks the view ``dropping``
first for the same reason. The publication always holds exactly the tables the catalog's views read; with
no view left, the slot and the publication are dropped.
"""

from __future__ import annotations

import contextlib
import logging
import shutil

import psycopg

from engine.api_lock import serialized
from engine.engine_names import (
    SOURCES_FILE,
)
from engine.errors import IncviewError, ViewError
from engine.outage import is_outage
from engine.postgres.sink import drop_result_table, drop_unused_diff_tables
from engine.postgres.view_catalog import ViewRecord
from engine.postgres.waiting import waits_reported
from engine.source_schema import SourceSchema
from engine.sql.planner import plan_view
from engine.view_creation import CreationUndo, check_result_name_free
from engine.view_names import split_view_name, storable_name
from engine.view_runtime import ViewRuntime

log = logging.getLogger(__name__)


class ViewLifecycleMixin:
    """The part of ``Engine`` described in the module docstring."""

    @serialized
    def create_view(self, name: str, sql: str, time_zone: str | None = None) -> None:
        """Plan, populate and start maintaining ``name`` AS ``sql``.

        ``time_zone``: the Postgres ``TimeZone`` the view's expressions over timestamptz are
        evaluated in, for good (``date_trunc('day', ts)``, ``ts::date``...); by default the
        engine connection's (the role's or the database's default, or ``PGTZ``).

        A view may read other views' result tables (views on views): they are published like
        any source table (result tables have REPLICA IDENTITY FULL) and ``catch_up`` runs until
        the downstream views have applied what their upstream views wrote.

        What a name may be and which table it writes: ``engine.view_names``. Bad input raises an
        ``IncviewError`` and leaves nothing behind (``engine.view_creation`` undoes a failure
        after the database was changed); an unexpected exception is reported as a
        ``ViewError``, an outage is raised as it is.
        """
        schema, table = split_view_name(name)  # ViewError for an unacceptable name
        try:
            self._create_view(name, sql, schema, table, time_zone or self.session_time_zone())
        except (IncviewError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:
            if is_outage(e):
                raise  # the database went away: the caller's outage handling applies
            raise ViewError(
                f"creating view {name} failed: {type(e).__name__}: {e}; nothing of the view "
                "was kept (this is a bug in incview: please report it with the view's SQL)"
            ) from e

    def session_time_zone(self) -> str:
        """The engine connection's ``TimeZone`` setting (``SHOW TimeZone``)."""
        return self.conn.execute("SHOW TimeZone").fetchone()[0]

    def _create_view(self, name: str, sql: str, schema: str, table: str, time_zone: str) -> None:
        if self.catalog.get(name) is not None:
            raise ViewError(f"view {name} already exists: drop_view({name!r}) first")
        plan = plan_view(sql, self.sources, time_zone)
        tables = [s.qualified_name for s in plan.sources]
        results = self._result_tables()
        for t in tables:
            kind = self.sources.kinds.get(t)
            if kind == "m":
                raise ViewError(
                    f"{t} is a materialized view: its rows change only by REFRESH MATERIALIZED "
                    "VIEW, which publishes no changes incview could follow; read the tables "
                    "under it (its defining query), or make it a plain view"
                )
            if kind not in ("r", "p"):
                raise ViewError(
                    f"{t} is not a table: incview reads changes of ordinary tables only"
                )
        check_result_name_free(self.conn, self.catalog.all(), name, schema, table)
        # from here on the database changes: a failure takes back what this call added
        undo = CreationUndo.record(self.conn, schema, table)
        # the row first: a crash from here on leaves a view in ``populating`` that the next
        # open finishes (``_open_views``), never a slot or publication nobody owns; the
        # creation lock tells other processes that this one is still at it
        self.catalog.creating(name, True)
        try:
            self.catalog.insert(name, sql, schema, table, time_zone)
        except BaseException:
            self.catalog.creating(name, False)
            raise
        view = None
        try:
            for t in tables:
                if t in results:
                    self._replica_identity_full(t)  # result tables of older versions lack it
            # checks wal_level and REPLICA IDENTITY FULL, publishes the tables, creates the slot
            self.reader.ensure(tables)
            # the slot must not move past what the population snapshot (taken next) lacks
            self.catalog.record_state({name: self.reader.confirmed_lsn()})
            record = self.catalog.get(name)
            assert record is not None
            view = ViewRuntime(self, record, plan)
            self._populate(view)
        except BaseException:
            if view is not None:
                with contextlib.suppress(Exception):
                    view.close()
            shutil.rmtree(self.state_dir / "views" / name, ignore_errors=True)
            own_result = False
            with contextlib.suppress(Exception):
                record = self.catalog.get(name)
                # the population's rename and its LSN commit together: the table is ours
                own_result = record is not None and record.last_lsn is not None
                self.catalog.delete(name)
            undo.undo(self.conn, own_result)
            try:  # the publication and the slot as the other views need them (none: dropped)
                self._release_sources()
            except Exception as e:  # noqa: BLE001 (the caller's error is the one to report)
                log.warning("undoing a failed create_view (publication, slot): %s", e)
            raise
        finally:
            with contextlib.suppress(psycopg.Error):
                self.catalog.creating(name, False)
        if self._only is not None:
            self._only.add(name)
        self.views[name] = view

    def _result_tables(self) -> dict[str, str]:
        """``schema.table`` of every view's result table -> view name."""
        return {f"{r.result_schema}.{r.result_table}": r.name for r in self.catalog.all()}

    def _replica_identity_full(self, qualified: str) -> None:
        """Give a result table REPLICA IDENTITY FULL (downstream views need old rows)."""
        schema, _, table = qualified.partition(".")
        row = self.conn.execute(
            "SELECT c.relreplident::text FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
            (schema, table),
        ).fetchone()
        if row is not None and row[0] != "f":
            what = f"setting REPLICA IDENTITY FULL on {qualified}"
            with waits_reported(self.conn, what, self.dsn, self.wait_timeout_s):
                self.conn.execute(
                    psycopg.sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(
                        psycopg.sql.Identifier(schema, table)
                    )
                )

    @serialized
    def drop_view(self, name: str) -> None:
        """Drop the result table, the state, and the slot/publication when no view needs them."""
        record = self.catalog.get(name) if storable_name(name) else None
        if record is None:
            raise ViewError(f"no view named {name!r}")
        result = f"{record.result_schema}.{record.result_table}"
        readers = sorted(
            r.name
            for r in self.catalog.all()
            if r.name != name and r.phase != "dropping" and result in self._inputs_or_none(r)
        )
        if readers:
            raise ViewError(
                f"view {name} is read by view(s) {', '.join(readers)}: drop those first "
                f"(drop_view({readers[0]!r}))"
            )
        # marked first: a crash in the middle leaves a view in ``dropping`` that the next open
        # finishes dropping (``_open_views``)
        self.catalog.set_phase(name, "dropping", None)
        view = self.views.pop(name, None)
        self.repairs.forget(name)
        if view is not None:
            view.stop_stream()
            view.close()
        self._drop_remains(record)
        self._release_sources()

    @serialized
    def release_view(self, name: str) -> None:
        """Close the view's state in this process and stop running it here, leaving it in the
        catalog: another process (its own streaming job) takes it over (RocksDB state is
        single-process)."""
        view = self.views.pop(name, None)
        if view is None:
            return
        if self._only is not None:
            self._only.discard(name)
        with self._advance_lock:  # its state LSN as the slot keeper reads it
            self._record_states([view])
        view.stop_stream()
        view.close()

    def _inputs_of(self, record: ViewRecord) -> list[str] | set[str]:
        """The tables a view of the catalog reads, whether this process opened it or not."""
        view = self.views.get(record.name)
        return view.inputs if view is not None else self._tables_needed_by(record)

    def _inputs_or_none(self, record: ViewRecord) -> list[str] | set[str]:
        """``_inputs_of``, or nothing for a view whose SQL no longer plans (its tables gone)."""
        try:
            return self._inputs_of(record)
        except IncviewError:
            return []

    def _drop_remains(self, record: ViewRecord) -> None:
        """What a view leaves in the database and on disk: result table, state, catalog row."""
        drop_result_table(self.sink_conn, record.result_schema, record.result_table)
        drop_unused_diff_tables(
            self.sink_conn, (v.sink.diff_table_name for v in self.views.values())
        )
        shutil.rmtree(self.state_dir / "views" / record.name, ignore_errors=True)
        self.catalog.delete(record.name)
        self.broken.pop(record.name, None)  # a view created again under this name starts afresh

    def _release_sources(self) -> None:
        """Publish exactly the tables the catalog's views read; no view: no slot, no publication."""
        others = self.catalog.all()
        if not others:
            with self._advance_lock:  # not while the slot keeper advances
                self.reader.drop()
        else:
            needed: set[str] = set()
            for r in others:
                if r.name in self.broken or r.phase == "dropping":
                    continue  # not maintained: its tables may be gone
                needed.update(self._inputs_of(r))
            self.reader.set_tables(sorted(needed), adopt_children=True)

    def _tables_needed_by(self, record: ViewRecord) -> list[str]:
        """Source tables of a view this process has not opened (or could not: a broken one)."""
        expected = SourceSchema.load(self.state_dir / "views" / record.name / SOURCES_FILE)
        if expected is not None:
            return list(expected.tables)
        return self._tables_of(record)

    def _tables_of(self, record: ViewRecord) -> list[str]:
        """Source tables of a view this process has not opened."""
        plan = plan_view(record.sql, self.sources, record.time_zone)
        return [s.qualified_name for s in plan.sources]
