"""``RecoveryMixin``: how an ``Engine`` repairs itself: a lost database, a lost slot, changed sources.

* the database went away (``engine.outage``): ``_reopen`` closes every connection, stream and
  state store and opens them again; the views resume from their committed state exactly;
* the slot no longer holds a view's changes (``engine.slot_guard``): ``check_slot`` re-creates
  it and re-populates those views, saying why in ``list_views``;
* a source column or table a view reads changed (``engine.source_schema``): ``check_sources``
  puts that view in ``error`` with the fix and stops maintaining it; the others go on;
* a view failed inside the engine (a bug in an operator, state it cannot read):
  ``_internal_error`` sends it back to population, right away and then with backoff, and gives
  up after too many failures in a row (``engine.view_repairs``); ``repair_due`` re-populates;
* the partitions or inheritance children below a source changed (ATTACH, DETACH, a new
  partition or child: ``engine.postgres.source_tree``): ``check_partitions`` publishes new
  children, gives new leaf tables REPLICA IDENTITY FULL and re-populates the views reading it
  (an attached partition's rows, or a detached one's, never pass through the slot).
Mixed into ``Engine``; it uses the engine's connections, catalog, reader and views.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import psycopg

from engine.api_lock import serialized
from engine.engine_names import REPOPULATE_MARKER, SLOT
from engine.errors import ViewError
from engine.outage import is_disk_full, is_outage
from engine.postgres.source_catalog import PostgresCatalog, unique_keys, view_definitions
from engine.postgres.source_tree import descendant_names
from engine.postgres.view_catalog import ViewCatalog
from engine.slot_guard import slot_losses, slot_state
from engine.source_schema import FIX as SOURCE_FIX
from engine.source_schema import current_columns
from engine.view_runtime import ViewRuntime

log = logging.getLogger("engine.engine")


class RecoveryMixin:
    def _break(self, name: str, why: str) -> None:
        """``name``'s sources changed under it: error phase with ``why``, no longer maintained
        (its state and result table stay until it is dropped; other views go on)."""
        log.warning("view %s stops: %s", name, why)
        self.broken[name] = why
        self.catalog.set_phase(name, "error", why)
        view = self.views.pop(name, None)
        if view is not None:
            view.stop_stream()
            view.close()

    @serialized
    def check_sources(self) -> dict[str, str]:
        """Compare every open view's sources with the database; break those that changed.
        Returns view name -> why, for every view broken so far."""
        views = list(self.views.values())
        tables = sorted({t for v in views for t in v.expected.tables})
        current = current_columns(self.conn, tables) if tables else {}
        source_views = sorted({s for v in views for s in v.expected.views})
        definitions = view_definitions(self.conn, source_views) if source_views else {}
        keyed = sorted({t for v in views for t in v.expected.keys})
        keys = unique_keys(self.conn, keyed) if keyed else {}
        for view in views:
            drift = view.expected.drift(self.conn, current, definitions, keys)
            if drift is None and view.name in self.broken:  # a stream batch saw it first
                drift = self.broken[view.name]
            if drift is not None:
                self._break(view.name, drift)
        return dict(self.broken)

    @serialized
    def check_slot(self) -> dict[str, str]:
        """Re-populate the open views whose changes the replication slot no longer holds (it
        was dropped, invalidated or re-created: ``engine.slot_guard``); the slot is re-created
        first. Returns view name -> why (empty when the slot serves every view)."""
        if not self.views:
            return {}
        state = slot_state(self.conn, SLOT)
        needed = {v.name: max(v.state_time, v.record.state_lsn or 0) for v in self.views.values()}
        lost = slot_losses(SLOT, state, needed)
        if not lost:
            return {}
        if state.exists and not state.usable:
            self.conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
        # creates the slot when missing
        self.reader.ensure(sorted(self._inputs_of_all()), adopt_children=True)
        lsn = self.reader.confirmed_lsn()
        for name, why in lost.items():
            view = self.views[name]
            log.warning("view %s is re-populated: %s", name, why)
            self._send_back(view, lsn, f"re-populated: {why}")
        self.reader.rewind(min(v.state_time for v in self.views.values()))
        return lost

    def _send_back(self, view: ViewRuntime, time_: int, message: str | None) -> None:
        """Re-populate ``view`` at ``time_`` (its streaming query stopped; it restarts from the
        state, ``SparkRunnerMixin._start_streams``), then phase ``running`` with ``message`` as
        ``last_error`` (None: as the population left it). The caller rewinds the reader."""
        view.stop_stream()
        self._repopulate(view, time_)
        # a view re-populated before it applied any change (state time POPULATION_TIME) needs
        # the changes after the slot's position, not after 0/1 (that would read as a lost slot)
        self.catalog.record_state({view.name: max(view.state_time, self.reader.confirmed_lsn())})
        if message is not None:
            self.catalog.set_phase(view.name, "running", message)
        view.record = self.catalog.get(view.name) or view.record

    def _internal_error(self, view: ViewRuntime, exc: BaseException) -> None:
        """``view`` failed inside the engine (not the database's fault): what the failed time
        staged is dropped and the view waits for its re-population (``repair_due``), which is
        due at once the first time, then with backoff; after ``repairs.max_attempts`` failures
        in a row it stays in ``error`` (until ``repopulate`` or a restart). Other views go on."""
        error = f"{type(exc).__name__}: {exc}"
        full = is_disk_full(exc)
        log.error("view %s failed inside the engine: %s", view.name, error, exc_info=not full)
        with contextlib.suppress(Exception):
            view.physical.dataflow.abort()
        repair = self.repairs.failed(view.name, error, repopulate=not full)
        if full:
            with contextlib.suppress(Exception):
                view.store.close()  # RocksDB refuses writes after a failed one: reopened later
            wait = repair.due - time.monotonic()
            why = (
                f"the state directory {self.state_dir} is full ({exc}); free space there: "
                f"retrying in {max(wait, 0):.0f} s (attempt {repair.failures})"
            )
        elif self.repairs.gave_up(repair):
            why = (
                f"internal error ({error}), {repair.failures} times in a row: no longer "
                f"maintained; call repopulate({view.name!r}) or restart incview to try again, "
                "or drop the view"
            )
        else:
            wait = repair.due - time.monotonic()
            when = f" in {wait:.0f} s" if wait >= 1 else ""
            why = (
                f"internal error ({error}); re-populating{when} "
                f"(attempt {repair.failures} of {self.repairs.max_attempts})"
            )
        self._advance_catalog.set_phase(view.name, "error", why)  # any thread (Spark's)
        view.record = self._advance_catalog.get(view.name) or view.record

    def repair_due(self) -> list[str]:
        """Re-populate the views whose re-population after an internal error is due; returns
        their names. A view that fails again while re-populating counts another failure."""
        done = []
        for name in self.repairs.due():
            view = self.views.get(name)
            if view is None:
                self.repairs.forget(name)
                continue
            error = self.repairs.error_of(name)
            view.stop_stream()
            repair = self.repairs.get(name)
            marker = view.dir / REPOPULATE_MARKER  # a population the disk cut short
            try:
                if repair is not None and not repair.repopulate and not marker.exists():
                    view.reopen_state()  # after a full disk: the committed state, retried
                elif repair is not None and repair.failures == 0:  # requested, not a failure
                    log.info("view %s goes back to population: %s", name, error)
                    self._send_back(view, view.state_time, None)  # as after a local TRUNCATE
                    self.repairs.forget(name)
                    done.append(name)
                    continue
                else:
                    message = f"re-populated after an internal error: {error}"
                    self._send_back(view, view.state_time, message)
                    log.warning("view %s %s", name, message)
            except Exception as e:
                if is_outage(e):
                    raise
                self._internal_error(view, e)
                continue
            self.repairs.repaired(name)
            done.append(name)
        if done:
            self.reader.rewind(min(v.state_time for v in self.views.values()))
        return done

    @serialized
    def check_partitions(self) -> dict[str, str]:
        """Re-populate the open views whose sources' partitions or inheritance children are not
        those their population read (an ATTACH, DETACH, DROP or CREATE ... PARTITION OF / a new
        INHERITS child). Their population publishes new children and gives every leaf table
        below the sources REPLICA IDENTITY FULL (without it Postgres refuses their UPDATEs, or
        logs them without the old values). Returns view name -> why."""
        views = list(self.views.values())
        if not views:
            return {}
        now = descendant_names(self.conn, sorted({t for v in views for t in v.inputs}))
        changed: dict[str, str] = {}
        for view in views:
            current = {t: now[t] for t in view.inputs}
            if view.tree is None:  # a view of an older version: from now on
                view.save_tree(current)
            elif current != view.tree:
                changed[view.name] = _tree_change(view.tree, current)
        if not changed:
            return {}
        self.reader.forget_tree()
        for name, why in changed.items():
            view = self.views[name]
            log.warning("view %s is re-populated: %s", name, why)
            try:
                self._send_back(view, view.state_time, f"re-populated: {why}")
            except ViewError as e:  # e.g. a foreign table attached as a partition
                self._break(name, f"{why}, and it cannot follow: {e}; {SOURCE_FIX}")
        if self.views:
            self.reader.rewind(min(v.state_time for v in self.views.values()))
        return changed

    def _db_down(self) -> bool:
        """Whether the database is unreachable right now (a fresh connection fails)."""
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
            return False
        except psycopg.Error:
            return True

    def _reopen(self) -> None:
        """Close every connection, stream and open view and open them again: after an outage of
        the database. Nothing is lost or doubled: each view resumes from its committed state,
        the result tables skip the transactions they already hold (their LSN)."""
        self._close_connections()
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        self.sink_conn = psycopg.connect(self.dsn, autocommit=True)
        self.stream_conn = self._stream_connection()
        self.catalog = ViewCatalog.open(self.conn)
        self.sources = PostgresCatalog(self.conn)
        self._open_views()

    def _close_connections(self) -> None:
        """Best effort: streams, the slot keeper, views' state and connections (after an outage
        most of them are broken already)."""
        steps: list[Callable[[], object]] = []
        for view in self.views.values():
            if view.stream is not None:
                steps.append(view.stream.stop)
        steps.append(self._stop_shared_stream)
        if hasattr(self, "_slot_keeper"):
            steps.append(self._slot_keeper.stop)
        steps += [view.close for view in self.views.values()]
        steps += [self.reader.close, self._advancer.close, self._advance_catalog.conn.close]
        steps += [self.conn.close, self.sink_conn.close]
        if self.stream_conn is not None:
            steps.append(self.stream_conn.close)
        for step in steps:
            try:
                step()
            except Exception as e:
                log.debug("closing after an outage: %s", e)
        for view in self.views.values():
            view.stream = None
        self.views.clear()


def _tree_change(before: dict[str, list[str]], after: dict[str, list[str]]) -> str:
    """What changed below the sources, for ``list_views``' last_error."""
    parts = []
    for table in sorted(after):
        old, new = set(before.get(table, [])), set(after[table])
        if old == new:
            continue
        what = [f"{t} added" for t in sorted(new - old)]
        what += [f"{t} removed" for t in sorted(old - new)]
        parts.append(f"the partitions or children of {table} changed ({', '.join(what)})")
    return "; ".join(parts)
