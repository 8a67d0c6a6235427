"""``RecoveryMixin``: how an ``Engine`` repairs itself: a lost database, a lost slot, changed sources.

* the database went away (``engine.outage``): ``_reopen`` closes every connection, stream and
  state store and opens them again; the views resume from their committed state exactly;
* the slot no longer holds a view's changes (``engine.slot_guard``): ``check_slot`` re-creates
  it and re-populates those views, saying why in ``list_views``;
* a source column or table a view reads changed (``engine.source_schema``): ``check_sources``
  puts that view in ``error`` with the fix and stops maintaining it; the others go on;
* the partitions or inheritance children below a source changed (ATTACH, DETACH, a new
  partition or child: ``engine.postgres.source_tree``): ``check_partitions`` publishes new
  children, gives new leaf tables REPLICA IDENTITY FULL and re-populates the views reading it
  (an attached partition's rows, or a detached one's, never pass through the slot).
Mixed into ``Engine``; it uses the engine's connections, catalog, reader and views.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable

import psycopg

from engine.engine_names import SLOT
from engine.errors import ViewError
from engine.postgres.source_catalog import PostgresCatalog
from engine.postgres.source_tree import descendant_names
from engine.postgres.view_catalog import ViewCatalog
from engine.slot_guard import slot_losses, slot_state
from engine.source_schema import FIX as SOURCE_FIX
from engine.source_schema import current_columns

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
            if view.stream is not None:
                view.stream.stop()
                view.stream = None
            view.close()

    def check_sources(self) -> dict[str, str]:
        """Compare every open view's sources with the database; break those that changed.
        Returns view name -> why, for every view broken so far."""
        views = list(self.views.values())
        tables = sorted({t for v in views for t in v.expected.tables})
        current = current_columns(self.conn, tables) if tables else {}
        for view in views:
            drift = view.expected.drift(self.conn, current)
            if drift is None and view.name in self.broken:  # a stream batch saw it first
                drift = self.broken[view.name]
            if drift is not None:
                self._break(view.name, drift)
        return dict(self.broken)

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
            if view.stream is not None:
                view.stream.stop()
                view.stream = None
            self._repopulate(view, lsn)
            shutil.rmtree(view.checkpoint, ignore_errors=True)  # Spark offsets: from the state
            self.catalog.record_state({name: view.state_time})
            self.catalog.set_phase(name, "running", f"re-populated: {why}")
            view.record = self.catalog.get(name) or view.record
        self.reader.rewind(min(v.state_time for v in self.views.values()))
        return lost

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
            if view.stream is not None:
                view.stream.stop()
                view.stream = None
            try:
                self._repopulate(view, view.state_time)
            except ViewError as e:  # e.g. a foreign table attached as a partition
                self._break(name, f"{why}, and it cannot follow: {e}; {SOURCE_FIX}")
                continue
            shutil.rmtree(view.checkpoint, ignore_errors=True)  # Spark offsets: from the state
            self.catalog.record_state({name: view.state_time})
            self.catalog.set_phase(name, "running", f"re-populated: {why}")
            view.record = self.catalog.get(name) or view.record
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
        if hasattr(self, "_slot_keeper"):
            steps.append(self._slot_keeper.stop)
        steps += [view.close for view in self.views.values()]
        steps += [self.reader.close, self._advancer.close, self._advance_catalog.conn.close]
        steps += [self.conn.close, self.sink_conn.close]
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
