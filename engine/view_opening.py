"""Opening an Engine's views: the catalog's views, their state, and what a crash left.

``ViewOpeningMixin._open_views`` runs once when an ``Engine`` starts: it finishes drops and
creations that a crash cut short, removes state directories of views no longer in the catalog,
opens each view's state with the plan it was built by (``engine.plan_lock``), re-populates a view
whose state is missing, corrupt or of another plan, leaves a view whose sources changed under it
broken, and opens the shared CDC reader and the slot keeper.
"""

from __future__ import annotations

import logging
import shutil
import threading

import psycopg

from engine.dataflow.state.store import is_lock_error
from engine.engine_names import (
    POPULATION_TIME,
    PUBLICATION,
    REPOPULATE_MARKER,
    SLOT,
)
from engine.errors import IncviewError
from engine.free_memory import ThrottledRelease
from engine.outage import is_disk_full, is_outage
from engine.plan_lock import FrozenStats, PlanStats
from engine.postgres.cdc import (
    CdcReader,
)
from engine.postgres.restart_point import RestartMarks
from engine.postgres.view_catalog import ViewCatalog, ViewRecord
from engine.slot_keeper import SlotKeeper
from engine.source_schema import FIX as SOURCE_FIX
from engine.sql.planner import ViewPlan, plan_view
from engine.view_runtime import ViewRuntime

log = logging.getLogger(__name__)


class ViewOpeningMixin:
    """The part of ``Engine`` described in the module docstring."""

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
        self._restart_marks = RestartMarks()  # with the advancer's session
        # the slot keeper's own catalog connection (it runs beside the caller's thread)
        self._advance_catalog = ViewCatalog(psycopg.connect(self.dsn, autocommit=True))
        self._slot_keeper = SlotKeeper(self._advance_slot)
        self._release_memory = ThrottledRelease()  # after polls (engine.free_memory)
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
            record.sql,
            self.sources if stats is None else FrozenStats(self.sources, stats),
            record.time_zone,  # the creating session's, whatever this connection's is
        )
