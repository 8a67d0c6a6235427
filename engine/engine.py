"""``Engine``: the public API. Creates, maintains, lists, explains and drops views.

One ``Engine`` serves one database: a shared logical slot + publication (the CDC forwarder, see
``engine.postgres.cdc``) feeds every view; each view is a planned dataflow (``engine.sql``) with
its state under ``state_dir/views/<name>`` and a consolidating sink writing its result table.

Population: the slot is created first, then the sources are read in one REPEATABLE READ snapshot
and the snapshot's (xmin, xmax, xip) is kept with the view: CDC transactions visible in it are
skipped (seed 003's xid rule), so nothing is missed or applied twice while writers are active.
Running (``catch_up``): whole transactions are polled, each view applies those it has not yet
applied, its sink writes the net diff and the LSN in one Postgres transaction, then the view's
state commits; the slot advances only to what every view has committed.

TRUNCATE of an input sends the view back to population (seed 003: an internal problem means
re-population): fresh state, a fresh snapshot, only the difference written to the existing result
table, then the transactions not visible in the new snapshot. Views may read other views' result
tables: result tables get REPLICA IDENTITY FULL and are published when read, and ``catch_up``
repeats until no view wrote a table another view reads (a fixpoint). ``list_views``' lag_ms is 0
when nothing is pending for the view, else now minus the commit time of the last source
transaction it applied.

Huge transactions (runner local): ``max_buffered_changes`` (default 100,000, or the environment
variable ``INCVIEW_MAX_BUFFERED_CHANGES``; 0 for no bound) caps the diffs of one transaction held
in memory: past it the CDC reader spills them to a temporary file, the view receives them in
chunks (all in one time, the transaction's end LSN) and the sink streams a spilled output into
Postgres, still in one Postgres transaction (``engine.applying``).

``runner="spark"`` (the default) populates through a Spark batch job (parallel snapshot reads,
``engine.spark.population``) and runs each view as a Structured Streaming query
(``engine.spark.streaming``); ``catch_up`` then waits for the queries to reach the WAL position of
the call. ``runner="local"`` drives the same dataflow in-process. One process may open only some
views (``views=[...]``): a view's state is single-process, and the slot advances only to the
smallest state LSN recorded in the catalog over all views, whichever process runs them. This
module orchestrates; it must not plan, decode or write SQL results itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from engine.applying import ApplyMixin, buffered_changes_setting
from engine.dataflow.batch import DiffBatch
from engine.dataflow.state.store import is_lock_error
from engine.engine_names import (
    POLL_CHANGES,
    POPULATION_CHUNK,
    POPULATION_TIME,
    PUBLICATION,
    REPOPULATE_MARKER,
    SLOT,
    SOURCES_FILE,
)
from engine.errors import IncviewError, ViewError
from engine.outage import Backoff, is_disk_full, is_outage
from engine.plan_lock import FrozenStats, PlanStats
from engine.population_progress import PopulationProgress
from engine.postgres.cdc import (
    CdcReader,
    visible_in_snapshot,
)
from engine.postgres.pgoutput import Begin, Commit, PgOutputDecoder, Relation, Truncate
from engine.postgres.sink import drop_result_table
from engine.postgres.snapshot import snapshot_reader
from engine.postgres.source_catalog import PostgresCatalog
from engine.postgres.view_catalog import ViewCatalog, ViewRecord
from engine.postgres.waiting import waits_reported
from engine.recovery import RecoveryMixin
from engine.slot_keeper import SlotKeeper
from engine.source_schema import FIX as SOURCE_FIX
from engine.source_schema import SourceSchema
from engine.spark_runner import SparkRunnerMixin
from engine.sql.planner import ViewPlan, explain, plan_view
from engine.sql.population_filter import population_filters
from engine.view_creation import CreationUndo, check_result_name_free
from engine.view_names import split_view_name, storable_name
from engine.view_repairs import ViewRepairs
from engine.view_runtime import ViewRuntime

log = logging.getLogger(__name__)

__all__ = ["PUBLICATION", "SLOT", "Engine", "ViewStatus", "split_view_name"]


@dataclass(frozen=True)
class ViewStatus:
    name: str
    phase: str  # populating | running | error | sink_error
    lag_ms: float | None
    rows: int | None
    state_bytes: int
    last_error: str | None


class Engine(ApplyMixin, RecoveryMixin, SparkRunnerMixin):
    """Incremental materialized views over one Postgres database. See the module docstring."""

    def __init__(
        self,
        dsn: str | None = None,
        state_dir: str | Path = ".incview",
        runner: str = "spark",
        *,
        views: Iterable[str] | None = None,
        spark_conf: dict[str, str] | None = None,
        trigger_ms: int = 50,
        wait_timeout_s: float = 60.0,
        max_buffered_changes: int | None = None,
    ) -> None:
        if runner not in ("local", "spark"):
            raise ValueError(f"runner must be 'local' or 'spark', not {runner!r}")
        # the views whose state this process opens (None: all); others may run elsewhere
        self._only = None if views is None else set(views)
        self.spark_conf = dict(spark_conf or {})
        self.trigger_ms = trigger_ms
        # how long creating the slot, publishing a table... may wait on other sessions
        self.wait_timeout_s = wait_timeout_s
        self.max_buffered_changes = buffered_changes_setting(max_buffered_changes)
        self._spark = None
        self.embedded = None  # the embedded server when dsn is None (engine.postgres.embedded)
        self.views: dict[str, ViewRuntime] = {}
        self.broken: dict[str, str] = {}  # views whose sources changed under them -> why
        self.repairs = ViewRepairs()  # views that failed inside the engine (engine.recovery)
        try:
            if dsn is None:
                from engine.postgres.embedded import EmbeddedPostgres

                self.embedded = EmbeddedPostgres(Path(state_dir) / "postgres")
                self.embedded.start()
                dsn = self.embedded.dsn
            self.dsn = dsn
            self.runner = runner
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.conn = psycopg.connect(dsn, autocommit=True)
            self.sink_conn = psycopg.connect(dsn, autocommit=True)
            self.catalog = ViewCatalog.open(self.conn)
            self.sources = PostgresCatalog(self.conn)
            self._open_views()
        except BaseException:
            # Undo what was opened, best effort (the original error is what the caller sees):
            # the slot keeper's thread, views' state stores, CDC readers, connections; then the
            # embedded server, stopped if this Engine started it (release() needs our sessions
            # closed first: it stops only a server nobody else is connected to).
            opened = self.__dict__
            undo = []
            if "_slot_keeper" in opened:
                undo.append(self._slot_keeper.stop)
            undo += [view.close for view in self.views.values()]
            undo += [opened[n].close for n in ("reader", "_advancer") if n in opened]
            if "_advance_catalog" in opened:
                undo.append(self._advance_catalog.conn.close)
            undo += [opened[n].close for n in ("conn", "sink_conn") if n in opened]
            if self.embedded is not None:
                undo.append(self.embedded.release)
            for step in undo:
                try:
                    step()
                except Exception as e:
                    log.warning("cleaning up after a failed Engine start: %s", e)
            self.views.clear()
            raise

    def _open_views(self) -> None:
        """Open every view of the catalog and the shared CDC reader; finish re-populations that
        a crash interrupted (their dir holds the marker with the time to re-populate at)."""
        resume: list[tuple[ViewRuntime, int, str | None]] = []
        records = self.catalog.all()
        dropping = [r for r in records if r.phase == "dropping"]
        for record in dropping:  # a drop_view a crash interrupted: finished
            log.warning("view %s: finishing its interrupted drop", record.name)
            self._drop_remains(record)
        if self._only is None:  # the state of views not in the catalog (a crash in a drop)
            known = {r.name for r in records if r.phase != "dropping"}
            views_dir = self.state_dir / "views"
            for d in sorted(views_dir.iterdir()) if views_dir.exists() else []:
                if d.name not in known and d.is_dir():
                    log.warning("removing the state of view %s: not in the catalog", d.name)
                    shutil.rmtree(d, ignore_errors=True)
        for record in records:
            if record.phase == "dropping":
                continue
            if self._only is not None and record.name not in self._only:
                continue
            marker = self.state_dir / "views" / record.name / REPOPULATE_MARKER
            # a create_view whose process died (another process may still be at it: its
            # creation lock says so, and then the view is not this engine's to open)
            created = record.phase == "populating" and not marker.exists()
            if created and not self.catalog.creator_gone(record.name):
                continue
            if record.phase == "error" and (record.last_error or "").endswith(SOURCE_FIX):
                # its sources changed under it: it stays broken until dropped
                self.broken[record.name] = record.last_error or ""
                continue
            try:
                plan = self._plan_of(record)
            except IncviewError as e:
                self._break(
                    record.name, f"its query no longer plans over its sources ({e}); {SOURCE_FIX}"
                )
                continue
            view, lost = self._open_view(record, plan)
            drift = view.expected.drift(self.conn)
            if drift is not None:
                view.close()
                self._break(record.name, drift)
                continue
            self.views[record.name] = view
            if created:
                resume.append((view, POPULATION_TIME, "its creation was interrupted"))
            elif marker.exists():
                resume.append((view, int(marker.read_text()), None))
            elif lost is not None:
                resume.append((view, max(record.state_lsn or 0, view.sink_lsn), lost))
        self._downstream_dirty = False  # a result table read by another view was written
        self._advance_lock = threading.Lock()
        self._next_advance = 0.0
        after = min((v.state_time for v in self.views.values()), default=0)
        self.reader = CdcReader(
            self.dsn,
            SLOT,
            PUBLICATION,
            after_lsn=after,
            wait_timeout_s=self.wait_timeout_s,
            max_buffered_changes=self.max_buffered_changes,
        )
        self._advancer = CdcReader(self.dsn, SLOT, PUBLICATION)  # under _advance_lock only
        # the slot keeper's own catalog connection (it runs beside the caller's thread)
        self._advance_catalog = ViewCatalog(psycopg.connect(self.dsn, autocommit=True))
        self._slot_keeper = SlotKeeper(self._advance_slot)
        if dropping or (self._only is None and not records):
            self._release_sources()  # a crash in a drop_view left them for views now gone
        for view, time_, why in resume:
            if time_ == POPULATION_TIME and view.record.phase == "populating":
                # a create_view cut short: publish its tables and pin the slot as it would have
                try:
                    self.reader.ensure(list(view.inputs))
                except IncviewError as e:  # it cannot be created any more: undone
                    log.warning("dropping view %s, whose creation was cut short: %s", view.name, e)
                    self.views.pop(view.name).close()
                    self._drop_remains(view.record)
                    continue
                self.catalog.record_state({view.name: self.reader.confirmed_lsn()})
            self._repopulate(view, time_)
            if why is not None:
                log.warning("view %s was re-populated: %s", view.name, why)
                self.catalog.set_phase(view.name, "running", f"re-populated: {why}")
                view.record = self.catalog.get(view.name) or view.record
        self.check_slot()

    def _open_view(self, record: ViewRecord, plan) -> tuple[ViewRuntime, str | None]:
        """The view's runtime, and why its state must be re-populated (None: it need not be):
        its state directory is gone, or cannot be opened (it is then deleted)."""
        try:
            view = ViewRuntime(self, record, plan)
        except Exception as e:
            cause = e.__cause__ or e
            if is_outage(e) or is_disk_full(e) or is_lock_error(cause):
                raise  # not a state to throw away: another process holds it, or no space
            log.warning("view %s: its state cannot be opened: %s", record.name, e)
            shutil.rmtree(self.state_dir / "views" / record.name / "state", ignore_errors=True)
            view = ViewRuntime(self, record, plan)
            return view, f"its state could not be opened ({type(e).__name__}: {e})"
        if view.state_time == 0 and record.phase != "populating":
            return view, "its state directory was missing"
        return view, view.plan_changed

    def _plan_of(self, record: ViewRecord) -> ViewPlan:
        """``record``'s plan, made with the statistics it was created with (``plan_lock``):
        the state's layout depends on the join order they chose."""
        stats = PlanStats.load(self.state_dir / "views" / record.name)
        return plan_view(
            record.sql, self.sources if stats is None else FrozenStats(self.sources, stats)
        )

    # -- create ---------------------------------------------------------------------------------
    def create_view(self, name: str, sql: str) -> None:
        """Plan, populate and start maintaining ``name`` AS ``sql``.

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
            self._create_view(name, sql, schema, table)
        except (IncviewError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:
            if is_outage(e):
                raise  # the database went away: the caller's outage handling applies
            raise ViewError(
                f"creating view {name} failed: {type(e).__name__}: {e}; nothing of the view "
                "was kept (this is a bug in incview: please report it with the view's SQL)"
            ) from e

    def _create_view(self, name: str, sql: str, schema: str, table: str) -> None:
        if self.catalog.get(name) is not None:
            raise ViewError(f"view {name} already exists: drop_view({name!r}) first")
        plan = plan_view(sql, self.sources)
        tables = [s.qualified_name for s in plan.sources]
        results = self._result_tables()
        for t in tables:
            kind = self.sources.kinds.get(t)
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
            self.catalog.insert(name, sql, schema, table)
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

    def _populate(self, view: ViewRuntime, time_: int = POPULATION_TIME, lsn: int = 0) -> int:
        """Read every source in one snapshot, run the dataflow over it, write the result table
        (a new table, or only the difference to an existing one); returns the rows written.

        The input goes through the dataflow in chunks of ``POPULATION_CHUNK`` rows, each its
        own time (1, 2, ...) committed to the state, so memory stays bounded whatever the
        tables' size; the chunks' outputs stream into the sink's population transaction (a
        Z-set: retractions of earlier chunks' rows net out). The state ends at ``time_`` (or
        just after the last chunk, for a new view whose ``time_`` is 1)."""
        # the predicates the rules pushed into the scans, as COPY ... WHERE (engine.sql)
        filters = population_filters(view.plan.optimized)
        final = time_
        # the partitions and children below the sources, published (new inheritance children)
        # and given REPLICA IDENTITY FULL BEFORE the snapshot: one attached or created after
        # this is then noticed by check_partitions (and re-populates) even if the snapshot
        # shows its rows
        view.save_tree(
            self.reader.ensure(sorted(view.inputs), create_slot=False, adopt_children=True)
        )
        with (
            snapshot_reader(self.dsn) as reader,
            waits_reported(
                reader.conn,
                f"populating view {view.name}",
                self.dsn,
                self.wait_timeout_s,
                locks_only=True,
            ),
        ):
            tables = []
            for table, columns in view.inputs.items():
                schema, _, name = table.partition(".")
                source = self.sources.lookup(schema, name)
                if source is None:
                    raise ViewError(
                        f"view {view.name}: source table {table} does not exist any more; "
                        f"re-create it or drop_view({view.name!r})"
                    )
                tables.append((source, columns, filters.get(table)))

            def outputs() -> Iterator[DiffBatch]:
                nonlocal final
                df = view.physical.dataflow
                t = pending = 0
                with PopulationProgress(view.name, tables) as progress:
                    for table, batch in self._read_sources(reader, tables):
                        df.push(table, batch)
                        progress.update(len(batch))
                        pending += len(batch)
                        if pending >= POPULATION_CHUNK:
                            t += 1
                            yield df.time_end(t).diffs
                            df.commit(t)
                            pending = 0
                final = max(time_, t + 1)
                yield df.time_end(final).diffs

            written = view.sink.populate(outputs(), lsn)
            snap = reader.snapshot
        df = view.physical.dataflow
        view.save_snapshot(snap)
        df.commit(final)
        view.committed(final)
        self._replica_identity_full(view.result_name)
        self._record_errors(view, df.errors())  # populating -> running (or error)
        return written

    def _read_sources(self, reader, tables) -> Iterable[tuple[str, DiffBatch]]:
        """(table, batch) of every source row in ``reader``'s snapshot: read by parallel Spark
        tasks sharing the exported snapshot, or in this process (runner local)."""
        if self.runner == "spark":
            from engine.spark.population import read_sources

            yield from read_sources(self.spark, self.dsn, reader, tables)
            return
        for source, columns, where in tables:
            for batch in reader.read_table(source, list(columns), where):
                yield source.qualified_name, batch

    def repopulate(self, name: str) -> None:
        """Recovery: send view ``name`` back to population (fresh state and snapshot; the result
        table is corrected by difference). Its streaming job must not be running elsewhere."""
        view = self.views.get(name)
        if view is None:
            raise ViewError(
                f"view {name} is not open in this Engine (it does not exist, or another "
                f"process runs it: open it with Engine(..., views=[{name!r}]))"
            )
        self.repairs.forget(name)  # an internal error's count starts again
        self._send_back(view, view.state_time, None)

    def _repopulate(self, view: ViewRuntime, time_: int) -> None:
        """Send ``view`` back to population (seed 003): fresh state, a fresh snapshot, only the
        difference written to the result table; state and sink are then at ``time_`` and every
        later transaction not visible in the new snapshot is applied as usual."""
        time_ = max(time_, POPULATION_TIME)
        marker = view.dir / REPOPULATE_MARKER
        view.dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(time_))
        self.catalog.set_phase(view.name, "populating", None)
        view.record = self.catalog.get(view.name) or view.record
        view.reset_state()
        written = self._populate(view, time_, time_)
        marker.unlink()
        if written and view.result_name in self._inputs_of_all():
            self._downstream_dirty = True

    def _inputs_of_all(self) -> set[str]:
        return {t for v in self.views.values() for t in v.inputs}

    # -- running --------------------------------------------------------------------------------
    def catch_up(self, timeout_s: float = 60) -> None:
        """Apply every change committed before this call to every view; return when done.

        With views on views this runs to a fixpoint: an upstream view's sink write is itself a
        change of its downstream views' input, so after the target is reached the WAL is flushed
        again and polled until no view wrote a result table that another view reads.
        """
        deadline = time.monotonic() + timeout_s
        if not self.views:
            return
        given_up = {n for n in self.views if self.repairs.gave_up_on(n)}
        if self.runner == "spark":
            self.check_sources()
            self.check_slot()
            self.check_partitions()
            self._catch_up_spark(deadline, timeout_s)
        else:
            self._catch_up_local_retrying(deadline, timeout_s)
        failed = sorted(n for n in self.views if self.repairs.gave_up_on(n) and n not in given_up)
        if failed:  # not brought up to date by this call: say so (list_views has the details)
            record = self.catalog.get(failed[0])
            raise ViewError(
                f"catch_up could not bring view(s) {', '.join(failed)} up to date: "
                f"{record.last_error if record else 'internal error'}"
            )

    def _catch_up_local_retrying(self, deadline: float, timeout_s: float) -> None:
        """``_catch_up_local``, waiting out an outage of the database within the deadline."""
        backoff = Backoff(cap=5.0)
        try:
            while True:
                try:
                    if self.conn.closed or self.sink_conn.closed:
                        self._reopen()  # an earlier call lost the database
                    self._catch_up_local(deadline, timeout_s)
                    return
                except Exception as e:
                    if not is_outage(e) and self.check_slot():
                        continue  # the slot went away under the poll: repaired, go on
                    if not is_outage(e) or time.monotonic() > deadline:
                        raise
                    delay = min(backoff.next_delay(), max(0.0, deadline - time.monotonic()))
                    log.warning("the database is unreachable (%s); retrying in %.1f s", e, delay)
                    time.sleep(delay)
                    with contextlib.suppress(psycopg.Error):
                        self._reopen()
        finally:
            # in the background: the result tables are written, the slot's advance (which
            # decodes the WAL from its restart point) is housekeeping nobody waits for
            self._slot_keeper.request()

    def _catch_up_local(self, deadline: float, timeout_s: float) -> None:
        self.check_sources()
        self.check_slot()
        self.check_partitions()
        self._downstream_dirty = False
        target = self.reader.flush_wal()
        while True:
            self.repair_due()
            txs = self.reader.poll(POLL_CHANGES)
            if txs:
                self._apply(txs, self.views.values())
            if not txs or txs[-1].end_lsn >= target or self.reader.exhausted:
                wait = self.repairs.next_due_in()  # a view failed: done once it is re-populated
                if wait is not None:
                    time.sleep(min(wait, max(0.0, deadline - time.monotonic())) + 0.001)
                elif not self._downstream_dirty:
                    return
                else:
                    self._downstream_dirty = False
                    target = self.reader.flush_wal()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"catch_up did not reach LSN {target:X} within {timeout_s} s: call it "
                    "again (or with a larger timeout_s); the views keep what they applied"
                )

    def _record_states(self, views: Iterable[ViewRuntime]) -> None:
        changed = {
            v: v.state_time
            for v in views
            if v.state_time > POPULATION_TIME and v.state_time != v.recorded_time
        }
        self._advance_catalog.record_state({v.name: t for v, t in changed.items()})
        for v, t in changed.items():
            v.recorded_time = t

    def _advance_slot(self) -> None:
        """Record the open views' state LSNs and move the slot to the smallest over ALL views
        of the catalog (other processes may run other views). Runs in the slot keeper's thread
        (``SlotKeeper.request``) or, via ``SlotKeeper.flush``, in the caller's."""
        with self._advance_lock:
            views = list(self.views.values())  # the caller's thread may add or drop views
            if not views:
                return
            self._record_states(views)
            target = self._advance_catalog.min_state_lsn()
            if target is not None:
                self._advancer.advance(target)

    def run(
        self, views: Iterable[str] | None = None, *, heartbeat_s: float = 1.0, stop=None
    ) -> None:
        """Run the views (all open ones, or ``views``) until SIGINT/SIGTERM (or ``stop``, a
        ``threading.Event``, is set): one streaming query per view on Spark, or a polling loop
        in-process (runner local). Keeps a heartbeat per view in the catalog. Stops cleanly: a
        batch in flight commits (sink and state) first; the slot is never advanced past what
        every view committed. Raises ViewError when a view's query fails."""
        names = list(self.views) if views is None else list(views)
        missing = [n for n in names if n not in self.views]
        if missing:
            raise ViewError(
                f"cannot run view(s) {', '.join(missing)}: not created, or not opened by this "
                "Engine (views=[...])"
            )
        stop = stop or threading.Event()
        restore = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                restore[sig] = signal.signal(sig, lambda *_: stop.set())
        running = [self.views[n] for n in names]
        pid, host = os.getpid(), socket.gethostname()
        backoff = Backoff()
        lost: BaseException | None = None  # the outage being waited out
        try:
            next_beat = 0.0
            while not stop.is_set():
                try:
                    if lost is not None:  # the database went away: open everything anew
                        self._reopen()
                        running = [self.views[n] for n in names if n in self.views]
                        log.warning("the database is back; the views resume (%s)", lost)
                        lost = None
                        next_beat = 0.0
                    if self.repair_due():
                        running = [self.views[n] for n in names if n in self.views]
                    if self.runner == "spark":
                        self._start_streams(running)
                    self._run_once(running)
                    if time.monotonic() >= next_beat:
                        self.check_sources()
                        self.check_slot()
                        self.check_partitions()
                        running = [v for v in running if v.name in self.views]
                        lags = {s.name: s.lag_ms for s in self.list_views() if s.name in names}
                        for view in running:
                            self.catalog.heartbeat(view.name, pid, host, lags.get(view.name))
                        self._slot_keeper.request()  # also records the state LSNs of quiet views
                        next_beat = time.monotonic() + heartbeat_s
                    backoff.reset()
                except Exception as e:
                    if not is_outage(e) and self.check_slot():
                        continue  # the slot was dropped or re-created: views re-populated
                    if not is_outage(e) and not (self.runner == "spark" and self._db_down()):
                        raise
                    lost = e
                    delay = backoff.next_delay()
                    log.warning("the database is unreachable (%s); retrying in %.1f s", e, delay)
                    stop.wait(delay)
                    continue
                stop.wait(self.trigger_ms / 1000.0 if self.runner == "local" else 0.2)
        finally:
            for view in running:
                view.stop_stream()
            try:
                for view in running:
                    self.catalog.stopped(view.name)
                self._slot_keeper.flush()
            except Exception as e:
                if not is_outage(e):
                    raise
                log.warning("stopping while the database is unreachable: %s", e)
            for sig, handler in restore.items():
                signal.signal(sig, handler)

    def _run_once(self, running: list[ViewRuntime]) -> None:
        """One step of ``run``: a poll of the slot (runner local), or a check of the streams."""
        if self.runner == "local":
            self._run_local_once(running)
            return
        for view in running:
            why = view.stream.failure() if view.stream else None
            if why:
                if self._db_down():  # the query died of the outage: restarted once it is over
                    raise psycopg.OperationalError(f"view {view.name}'s streaming query: {why}")
                self._stream_failed(view, why)

    # -- inspection -----------------------------------------------------------------------------
    def list_views(self) -> list[ViewStatus]:
        """Every view's status.

        ``lag_ms``: 0 when the view has applied every committed change of its inputs (nothing
        pending in the slot beyond what it applied); while changes are pending, now minus the
        commit time of the last source transaction the view applied (or, before it applied any,
        of the oldest pending one); None for a view this engine has not opened.
        """
        pending = self._pending_commit_times()
        now = datetime.now(UTC)
        out = []
        for record in self.catalog.all():
            view = self.views.get(record.name)
            rows = None
            lag = None
            if view is not None:
                rows = view.sink.row_count()
                oldest = pending.get(record.name)
                if oldest is None:
                    lag = 0.0
                else:
                    since = view.last_commit or oldest
                    lag = max(0.0, (now - since).total_seconds() * 1000)
            out.append(
                ViewStatus(
                    record.name,
                    record.phase,
                    lag,
                    rows,
                    view.store.size_bytes() if view is not None else 0,
                    record.last_error,
                )
            )
        return out

    def _pending_commit_times(self, max_changes: int = 10_000) -> dict[str, datetime]:
        """View name -> commit time of its oldest pending transaction (one that touches its
        inputs and that it has not applied), from a peek of the slot; a fresh decoder, so the
        reader's own position and state are left alone."""
        if not self.views or not self.reader.slot_exists():
            return {}
        decoder = PgOutputDecoder()
        result: dict[str, datetime] = {}
        begin: Begin | None = None
        touched: set[str] = set()
        for data in self.reader.peek(max_changes):
            kind = data[0]
            if kind in (73, 85, 68, 84, 66, 67, 82, 89):  # I U D T B C R Y
                ev = decoder.decode(data)
            else:
                continue
            if isinstance(ev, Begin):
                begin, touched = ev, set()
            elif isinstance(ev, Commit):
                if begin is None:
                    continue
                for view in self.views.values():
                    if (
                        view.name not in result
                        and ev.end_lsn > view.state_time
                        and touched.intersection(view.inputs)
                        and not (
                            view.snapshot is not None
                            and visible_in_snapshot(begin.xid, view.snapshot)
                        )
                    ):
                        result[view.name] = ev.commit_ts
                begin = None
            elif isinstance(ev, Truncate):
                for o in ev.oids:
                    if o in decoder.relations:
                        touched.add(decoder.relations[o].qualified_name)
                        touched.update(self.reader.ancestors_of(o))  # a partition's parents
            elif not isinstance(ev, Relation) and hasattr(ev, "oid"):
                rel = decoder.relations.get(ev.oid)
                if rel is not None and rel.qualified_name not in touched:
                    touched.add(rel.qualified_name)
                    touched.update(self.reader.ancestors_of(ev.oid))
        return result

    def explain(self, sql: str) -> str:
        return explain(sql, self.sources)

    # -- drop / close ---------------------------------------------------------------------------
    def drop_view(self, name: str) -> None:
        """Drop the result table, the state, and the slot/publication when no view needs them."""
        record = self.catalog.get(name) if storable_name(name) else None
        if record is None:
            raise ViewError(f"no view named {name!r}")
        result = f"{record.result_schema}.{record.result_table}"
        readers = sorted(n for n, v in self.views.items() if n != name and result in v.inputs)
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

    def _drop_remains(self, record: ViewRecord) -> None:
        """What a view leaves in the database and on disk: result table, state, catalog row."""
        drop_result_table(self.sink_conn, record.result_schema, record.result_table)
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
                v = self.views.get(r.name)
                needed.update(v.inputs if v is not None else self._tables_needed_by(r))
            self.reader.set_tables(sorted(needed), adopt_children=True)

    def _tables_needed_by(self, record: ViewRecord) -> list[str]:
        """Source tables of a view this process has not opened (or could not: a broken one)."""
        expected = SourceSchema.load(self.state_dir / "views" / record.name / SOURCES_FILE)
        if expected is not None:
            return list(expected.tables)
        return self._tables_of(record.sql)

    def _tables_of(self, sql: str) -> list[str]:
        """Source tables of a view this process has not opened."""
        return [s.qualified_name for s in plan_view(sql, self.sources).sources]

    def close(self) -> None:
        for view in self.views.values():
            view.stop_stream()
        self._slot_keeper.stop()
        try:  # leave the slot where the views are, holding no WAL they do not need
            self._advance_slot()
        except (psycopg.Error, ViewError) as e:  # unreachable, or the slot is gone
            log.warning("could not advance the slot on close: %s", e)
        for view in self.views.values():
            view.close()
        self.views.clear()
        self.reader.close()
        self._advancer.close()
        self._advance_catalog.conn.close()
        self.conn.close()
        self.sink_conn.close()
        if self.embedded is not None:
            self.embedded.release()  # stops the server only if this Engine started it

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
