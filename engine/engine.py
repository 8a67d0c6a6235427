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

Memory: ``memory_mb`` (or the environment variable ``INCVIEW_MEMORY_MB``; unset or 0: none) is
one budget for the state of every view the engine opens: one RocksDB block cache, the memtables
of all views' tables sized within a quarter of it, and the collections' caches sharing the rest
by use (``engine.dataflow.state.memory_budget``). Without it each view's state has caches of its
own.

Threads: the public calls may come from several threads (``run()`` in one, ``create_view`` or
``list_views`` in another): they run one at a time (``engine.api_lock``), ``run()`` taking the
lock for each poll.

``runner="spark"`` (the default) populates through a Spark batch job (parallel snapshot reads,
``engine.spark.population``) and runs each view as a Structured Streaming query
(``engine.spark.streaming``); ``catch_up`` then waits for the queries to reach the WAL position of
the call. ``runner="local"`` drives the same dataflow in-process. One process may open only some
views (``views=[...]``): a view's state is single-process, and the slot advances only to the
smallest state LSN recorded in the catalog over all views, whichever process runs them. This
module orchestrates; it must not plan, decode or write SQL results itself.

``Engine`` is put together from one mixin per role, so that each concern has one home:
``engine.view_opening`` (opening views, finishing what a crash cut short), ``engine.view_lifecycle``
(create and drop), ``engine.population`` (population and re-population), ``engine.running``
(``catch_up`` and ``run``), ``engine.applying`` (applying transactions to views),
``engine.recovery`` (outages, lost slots, source changes, internal errors),
``engine.spark_runner`` (streaming queries) and ``engine.view_listing`` (``list_views``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path

import psycopg

from engine.api_lock import serialized
from engine.applying import ApplyMixin, buffered_changes_setting
from engine.engine_names import (
    PUBLICATION,
    SLOT,
)
from engine.errors import ViewError
from engine.memory_setting import memory_budget_setting
from engine.population import PopulationMixin
from engine.postgres.keepalives import with_keepalives
from engine.postgres.sink import close_sink_connection
from engine.postgres.source_catalog import PostgresCatalog
from engine.postgres.view_catalog import ViewCatalog
from engine.recovery import RecoveryMixin
from engine.running import RunningMixin
from engine.spark_runner import SparkRunnerMixin
from engine.view_lifecycle import ViewLifecycleMixin
from engine.view_listing import ViewListingMixin, ViewStatus
from engine.view_names import split_view_name
from engine.view_opening import ViewOpeningMixin
from engine.view_repairs import ViewRepairs
from engine.view_runtime import ViewRuntime

log = logging.getLogger(__name__)

__all__ = ["PUBLICATION", "SLOT", "Engine", "ViewStatus", "split_view_name"]


class Engine(
    ViewOpeningMixin,
    ViewLifecycleMixin,
    PopulationMixin,
    RunningMixin,
    ApplyMixin,
    RecoveryMixin,
    SparkRunnerMixin,
    ViewListingMixin,
):
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
        memory_mb: int | None = None,
    ) -> None:
        if runner not in ("local", "spark"):
            raise ValueError(f"runner must be 'local' or 'spark', not {runner!r}")
        self._api_lock = threading.RLock()  # one public call at a time (engine.api_lock)
        # the views whose state this process opens (None: all); others may run elsewhere
        self._only = None if views is None else set(views)
        self.spark_conf = dict(spark_conf or {})
        self.trigger_ms = trigger_ms
        # how long creating the slot, publishing a table... may wait on other sessions
        self.wait_timeout_s = wait_timeout_s
        self.max_buffered_changes = buffered_changes_setting(max_buffered_changes)
        self.memory_budget = memory_budget_setting(memory_mb)
        self._spark = None
        self._shared_stream = None  # runner spark: the views' one streaming query
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
            # every connection (CDC, sink, snapshots, Spark tasks) notices a silent network cut
            self.dsn = with_keepalives(dsn)
            self.runner = runner
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.conn = psycopg.connect(self.dsn, autocommit=True)
            self.sink_conn = psycopg.connect(self.dsn, autocommit=True)
            self.stream_conn = self._stream_connection()
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
            undo += [
                opened[n].close
                for n in ("conn", "sink_conn", "stream_conn")
                if opened.get(n) is not None
            ]
            if self.embedded is not None:
                undo.append(self.embedded.release)
            for step in undo:
                try:
                    step()
                except Exception as e:
                    log.warning("cleaning up after a failed Engine start: %s", e)
            self.views.clear()
            raise

    @serialized
    def close(self) -> None:
        for view in self.views.values():
            view.stop_stream()
        self._stop_shared_stream()
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
        close_sink_connection(self.sink_conn)
        if self.stream_conn is not None:
            close_sink_connection(self.stream_conn)
        if self.embedded is not None:
            self.embedded.release()  # stops the server only if this Engine started it

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
