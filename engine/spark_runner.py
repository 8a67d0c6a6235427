"""``SparkRunnerMixin``: an ``Engine``'s views as Spark Structured Streaming queries.

One streaming query per engine (``engine.spark.streaming``): each micro-batch is read once and
fanned out to every running view through the same ``_apply_view`` as the local runner;
``catch_up`` waits for the views to reach the WAL position of the call. Mixed into ``Engine``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import psycopg

from engine.engine_names import ADVANCE_EVERY_S, PUBLICATION, SLOT
from engine.errors import SourceChanged, ViewError
from engine.outage import is_outage
from engine.postgres.cdc import Transaction, visible_in_snapshot
from engine.spark.session import CDC_READS_CONF, POPULATION_READS_CONF
from engine.view_runtime import ViewRuntime


class SparkRunnerMixin:
    @property
    def spark(self):
        """The SparkSession (built on first use, ``engine.spark.session``)."""
        if self._spark is None:
            from engine.spark.session import get_spark

            self._spark = get_spark(self.spark_conf, self.state_dir)
        return self._spark

    def _start_streams(self, views: Iterable[ViewRuntime]) -> None:
        """Make ``views`` members of the engine's one streaming query (started if it is not
        running: from the smallest state LSN of the views that start it)."""
        from engine.spark.streaming import SharedCdcStream

        # a member whose apply failed waits for its failure to be handled (``_stream_failed``,
        # or the outage path), which stops its stream; then it joins again
        todo = [
            v for v in views if v.stream is None or (not v.stream.active and v.stream.error is None)
        ]
        if not todo:
            return
        shared = self._shared_stream
        if shared is not None and shared.active:
            for view in todo:
                view.stream = shared.join(view)
            return
        if shared is not None:
            shared.stop()
        # a query starts from the views' committed states, never from Spark's offsets: those
        # may be past micro-batches a view skipped (while it waited for a repair, or after it
        # was given up on); SharedCdcStream.start drops the checkpoint
        shared = self._shared_stream = SharedCdcStream(
            self.spark,
            self._apply_stream_batch,
            dsn=self.dsn,
            slot=SLOT,
            publication=PUBLICATION,
            checkpoint=self.state_dir / "spark" / f"checkpoint-{os.getpid()}",
            trigger_ms=self.trigger_ms,
            max_buffered_changes=self.max_buffered_changes,
            read_on_driver=self._cdc_reads_on_driver(),
        )
        for view in todo:
            view.stream = shared.join(view)
        shared.start(min(v.state_time for v in todo))

    def _cdc_reads_on_driver(self) -> bool:
        """Where micro-batches are read: Spark conf ``spark.incview.cdcReads``."""
        return self._reads_on_driver(CDC_READS_CONF)

    def _population_reads_on_driver(self) -> bool:
        """Where population reads the snapshot: Spark conf ``spark.incview.populationReads``."""
        return self._reads_on_driver(POPULATION_READS_CONF)

    def _reads_on_driver(self, key: str) -> bool:
        """Spark conf ``key`` = ``driver``, ``executors``, or ``auto`` (default: the driver with a
        local master, whose tasks would run on the driver's machine and cores anyway, behind a
        round trip through the JVM; executors on a cluster)."""
        where = self.spark.conf.get(key, "auto")
        if where not in ("auto", "driver", "executors"):
            raise ViewError(f"{key} must be auto, driver or executors, not {where!r}")
        if where == "auto":
            return self.spark.sparkContext.master.startswith("local")
        return where == "driver"

    def _stream_connection(self) -> psycopg.Connection | None:
        """Runner spark: the connection every view's sink writes batches through. Only the
        shared query's fan-out uses it (one batch, one view at a time, and a joining view's
        catch-up under the same lock), so connections do not grow with the number of views;
        population writes through a connection of its own (``ViewRuntime.population_sink``)."""
        if self.runner != "spark":
            return None
        return psycopg.connect(self.dsn, autocommit=True)

    def _stop_shared_stream(self, only_if_idle: bool = False) -> None:
        """Stop the views' streaming query (``only_if_idle``: if no view is a member)."""
        shared = self._shared_stream
        if shared is not None and not (only_if_idle and shared.members):
            self._shared_stream = None
            shared.stop()

    def _apply_stream_batch(self, view: ViewRuntime, txs: list[Transaction]) -> None:
        """One micro-batch of ``view``'s streaming query (runs on a Spark callback thread)."""
        if view.name in self.broken or self.repairs.is_pending(view.name):
            return  # the run loop stops its query (and re-populates the view when due)
        truncate = self._truncate_in(view, txs)
        if truncate is not None:
            # back to population, but not on this thread: it needs the engine's shared
            # connections, which the run loop's thread and other streams use meanwhile
            self.repairs.requested(view.name, truncate)
            return
        try:
            self._apply_view(view, txs, txs[-1].end_lsn)
        except SourceChanged as e:
            self.broken[view.name] = str(e)
            self._advance_catalog.set_phase(view.name, "error", str(e))
            return
        except ViewError:
            raise  # its sink failed: the query fails, the run loop retries
        except Exception as e:
            if is_outage(e):
                raise
            self._internal_error(view, e)  # a bug: back to population (engine.recovery)
            return
        self.repairs.applied(view.name)
        if time.monotonic() >= self._next_advance:
            # advancing decodes the WAL from the slot's restart point: not after every batch
            self._next_advance = time.monotonic() + ADVANCE_EVERY_S
            self._slot_keeper.request()

    @staticmethod
    def _truncate_in(view: ViewRuntime, txs: list[Transaction]) -> str | None:
        """Why ``view`` must be re-populated before applying ``txs``: a transaction it has not
        applied (and its snapshot does not hold) TRUNCATEs one of its inputs; else None."""
        for tx in txs:
            if tx.end_lsn <= view.state_time:
                continue
            if view.snapshot is not None and visible_in_snapshot(tx.xid, view.snapshot):
                continue
            hit = tx.truncated.intersection(view.inputs)
            if hit:
                return f"a TRUNCATE of {', '.join(sorted(hit))} at LSN {tx.end_lsn:X}"
        return None

    def _stream_failed(self, view: ViewRuntime, why: str) -> None:
        """``view``'s streaming query failed (not for an outage): an internal error."""
        view.stop_stream()
        self._internal_error(view, ViewError(f"its streaming query failed: {why}"))

    def _last_commit_upto(self, target: int) -> int | None:
        """End LSN of the last transaction in the slot that ends at or before ``target``."""
        with self._advance_lock:
            ends, _ = self._advancer.commit_ends(None)  # type: ignore[arg-type]
        done = [end for end, _ in ends if end <= target]
        return done[-1] if done else None

    def _catch_up_spark(self, deadline: float, timeout_s: float) -> None:
        """Start the views' streaming queries if needed and wait until each has applied every
        transaction committed before the call (and, for views on views, what the upstream views
        wrote meanwhile)."""
        self._start_streams(self.views.values())
        upstream = {v.name for v in self.views.values() if v.result_name in self._inputs_of_all()}
        while True:
            writes = {n: self.views[n].writes for n in upstream}
            target = self._last_commit_upto(self.reader.flush_wal())
            while target is not None:
                failed = [(v.name, v.stream.failure()) for v in self.views.values() if v.stream]
                for name, why in failed:
                    stream = self.views[name].stream
                    if why and (stream.died_of_outage() or self._db_down()):
                        # died of an outage (maybe over by now): catch_up waits it out, the
                        # queries restart from the views' state; not an internal error
                        raise psycopg.OperationalError(f"view {name}'s streaming query: {why}")
                    if why:
                        self._stream_failed(self.views[name], why)
                if self.repair_due():
                    self._start_streams(self.views.values())
                waiting = [v for v in self.views.values() if not self.repairs.gave_up_on(v.name)]
                if all(v.state_time >= target for v in waiting):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"catch_up did not reach LSN {target:X} within {timeout_s} s: call it "
                        "again (or with a larger timeout_s); the views keep what they applied"
                    )
                time.sleep(0.005)  # a few Python checks: a short poll keeps the wait short
            if all(self.views[n].writes == writes[n] for n in upstream):
                self._slot_keeper.request()
                return
