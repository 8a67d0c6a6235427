"""Running views: ``catch_up`` (apply what was committed, then return) and ``run`` (until stopped).

Both wait out an outage of the database with backoff (the long-lived process never exits because
Postgres went away), repair views due for re-population, and check sources, slot and partitions.
The slot advances, in the slot keeper's thread, to the smallest state LSN over all views of the
catalog; when its restart point lags, the keeper marks a new one (``engine.postgres.restart_point``:
every poll decodes the WAL from there).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import psycopg

from engine.api_lock import serialized
from engine.engine_names import (
    POLL_CHANGES,
    POPULATION_TIME,
)
from engine.errors import ViewError
from engine.outage import Backoff, is_outage
from engine.view_runtime import ViewRuntime

if TYPE_CHECKING:
    from engine.commander import ViewHandoff

log = logging.getLogger(__name__)


class RunningMixin:
    """The part of ``Engine`` described in the module docstring."""

    @serialized
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
        self._catch_up_retrying(deadline, timeout_s)
        failed = sorted(n for n in self.views if self.repairs.gave_up_on(n) and n not in given_up)
        if failed:  # not brought up to date by this call: say so (list_views has the details)
            record = self.catalog.get(failed[0])
            raise ViewError(
                f"catch_up could not bring view(s) {', '.join(failed)} up to date: "
                f"{record.last_error if record else 'internal error'}"
            )

    def _catch_up_retrying(self, deadline: float, timeout_s: float) -> None:
        """``_catch_up_local`` (or the Spark runner's checks and ``_catch_up_spark``), waiting
        out an outage of the database within the deadline."""
        backoff = Backoff(cap=5.0)
        try:
            while True:
                try:
                    if self.conn.closed or self.sink_conn.closed:
                        self._reopen()  # an earlier call lost the database
                    if self.runner == "spark":
                        self.check_sources()
                        self.check_slot()
                        self.check_partitions()
                        self._catch_up_spark(deadline, timeout_s)
                    else:
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
            self._release_memory()  # the applied batches' pages, every 10 s at most

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
                # the next advance then moves the restart point, where every poll decodes from
                self._restart_marks.after_advance(self._advancer.connection(), self._advancer.slot)

    def run(
        self,
        views: Iterable[str] | None = None,
        *,
        heartbeat_s: float = 1.0,
        stop=None,
        commands: bool | ViewHandoff | None = None,
    ) -> None:
        """Run the views (all open ones, or ``views``) until SIGINT/SIGTERM (or ``stop``, a
        ``threading.Event``, is set): one streaming query per view on Spark, or a polling loop
        in-process (runner local). Keeps a heartbeat per view in the catalog. Stops cleanly: a
        batch in flight commits (sink and state) first; the slot is never advanced past what
        every view committed. Raises ViewError when a view's query fails.

        ``commands`` (default: when running all views): also answer the views commands issued
        in SQL (``CALL incview.create_view``, ``engine.commander``); views created that way are
        run too, dropped ones stop. A ``ViewHandoff`` (``engine.commander``) instead of True:
        answer them, and hand each view created to its own process (``views=[]``: this one runs
        none)."""
        every_view = views is None
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
        # the views commands issued in SQL (engine.commander), made once the database answers
        want_commander = commands if commands is not None else every_view
        commander = None
        try:
            next_beat = 0.0
            while not stop.is_set():
                try:
                    with self._api_lock:  # one poll: no other thread's call meanwhile
                        if lost is not None:  # the database went away: open everything anew
                            self._reopen()
                            running = [self.views[n] for n in names if n in self.views]
                            log.warning("the database is back; the views resume (%s)", lost)
                            lost = None
                            next_beat = 0.0
                        if self.repair_due():
                            running = [self.views[n] for n in names if n in self.views]
                        if want_commander and commander is None:
                            from engine.commander import Commander

                            handoff = None if isinstance(commands, bool) else commands
                            # it resumes the commands a crash interrupted
                            commander = Commander(self, handoff)
                            names = list(self.views) if every_view else names
                            running = [self.views[n] for n in names if n in self.views]
                        if commander is not None and commander.step():  # created/dropped views
                            names = list(self.views) if every_view else names
                            running = [self.views[n] for n in names if n in self.views]
                            next_beat = 0.0
                        if self.runner == "spark":
                            self._start_streams(running)
                        if running:  # (no view yet: waiting for CALL incview.create_view)
                            self._run_once(running)
                        if running and time.monotonic() >= next_beat:
                            self.check_sources()
                            self.check_slot()
                            self.check_partitions()
                            running = [v for v in running if v.name in self.views]
                            status = {s.name: s for s in self.list_views() if s.name in names}
                            for view in running:
                                s = status.get(view.name)
                                self.catalog.heartbeat(
                                    view.name,
                                    pid,
                                    host,
                                    s.lag_ms if s else None,
                                    rows=s.rows if s else None,
                                    state_bytes=s.state_bytes if s else None,
                                )
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
            with self._api_lock:  # stopping: no other thread's call meanwhile
                for view in running:
                    view.stop_stream()
                self._stop_shared_stream(only_if_idle=True)
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
                if commander is not None:
                    commander.close()

    def _run_once(self, running: list[ViewRuntime]) -> None:
        """One step of ``run``: a poll of the slot (runner local), or a check of the streams."""
        if self.runner == "local":
            self._run_local_once(running)
            return
        for view in running:
            why = view.stream.failure() if view.stream else None
            if why:
                if view.stream.died_of_outage() or self._db_down():
                    # the query died of the outage: restarted once it is over
                    raise psycopg.OperationalError(f"view {view.name}'s streaming query: {why}")
                self._stream_failed(view, why)
