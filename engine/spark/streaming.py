"""A view's running phase as a Spark Structured Streaming query.

``readStream.format("incview_cdc")`` (LSN offsets, whole transactions, see
``engine.spark.cdc_source``) -> ``foreachBatch``: the batch comes to the driver (streamed with
``toLocalIterator()``, or as Arrow with ``toArrow()`` when ``max_buffered_changes`` is 0), is
reassembled into transactions (a huge one partly on disk) and handed to the engine's ``apply`` callback,
which feeds the view's dataflow, writes the net diff and the LSN through the consolidating sink in
one Postgres transaction and commits the view's state. The query reads from ``start_lsn`` (the
view's committed state; the engine drops the checkpoint before each start, see
``SparkRunnerMixin._start_streams``), and the transactions the view already applied (end LSN <=
its state time) are skipped, so the result is exactly-once. The trigger is ``processingTime`` (50 ms by default): when a batch overruns it, the
next starts at once and takes everything that arrived meanwhile (up to ``max_rows`` changes), so
batches grow under load by themselves and lag stays bounded. Per-batch metrics (rows, duration,
commit->visible lag) are kept for ``list_views``, Dagster and the benchmark. This module must not
plan views or write SQL results itself.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from engine.outage import is_outage, is_outage_text
from engine.postgres.cdc import Transaction
from engine.spark.cdc_source import NAME, transactions_from_rows


@dataclass(frozen=True)
class BatchMetrics:
    batch_id: int
    transactions: int
    changes: int
    duration_ms: float
    lag_ms: float | None  # now - commit time of the batch's last transaction, at sink commit
    end_lsn: int
    tx_lags_ms: tuple[float, ...] = ()  # commit -> visible of each transaction of the batch


class StreamingView:
    """One view's streaming query. ``apply(txs)`` must apply and commit the transactions."""

    def __init__(
        self,
        spark,
        name: str,
        apply: Callable[[list[Transaction]], None],
        *,
        dsn: str,
        slot: str,
        publication: str,
        tables: list[str],
        start_lsn: int,
        checkpoint: Path,
        trigger_ms: int = 50,
        max_rows: int | None = None,
        max_buffered_changes: int = 0,
    ) -> None:
        self.spark = spark
        self.name = name
        self._apply = apply
        self.options = {
            "dsn": dsn,
            "slot": slot,
            "publication": publication,
            "tables": ",".join(sorted(tables)),
            "start_lsn": str(start_lsn),
        }
        if max_rows is not None:
            self.options["max_rows"] = str(max_rows)
        # a huge transaction: spilled past this many diffs by the task and by the driver
        self.max_buffered_changes = max_buffered_changes
        self.spilled_transactions = 0  # transactions the driver received partly on disk
        if max_buffered_changes > 0:
            self.options["max_buffered_changes"] = str(max_buffered_changes)
        self.checkpoint = checkpoint
        self.trigger_ms = trigger_ms
        self.metrics: deque[BatchMetrics] = deque(maxlen=10_000)
        self.query = None
        self.error: BaseException | None = None
        self._busy = threading.Lock()

    def start(self, available_now: bool = False) -> None:
        """Start the query (``available_now``: process what is there, then stop)."""
        reader = self.spark.readStream.format(NAME)
        for key, value in self.options.items():
            reader = reader.option(key, value)
        writer = (
            reader.load()
            .writeStream.queryName(f"incview:{self.name}")
            .foreachBatch(self._batch)
            .option("checkpointLocation", str(self.checkpoint))
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.trigger_ms} milliseconds")
        self.query = writer.start()

    def _batch(self, df, batch_id: int) -> None:
        with self._busy:
            start = time.perf_counter()
            if self.max_buffered_changes > 0:
                # streamed row by row (one partition, in (end_lsn, seq) order): a huge
                # transaction goes to disk past the bound instead of into memory whole
                rows = ((r.end_lsn, r.seq, bytes(r.payload)) for r in df.toLocalIterator())
                txs = transactions_from_rows(rows, self.max_buffered_changes, presorted=True)
            else:
                table = df.toArrow()
                rows = zip(
                    table.column("end_lsn").to_pylist(),
                    table.column("seq").to_pylist(),
                    table.column("payload").to_pylist(),
                    strict=True,
                )
                txs = transactions_from_rows(rows)
            if not txs:
                return
            self.spilled_transactions += sum(tx.spilled is not None for tx in txs)
            try:
                self._apply(txs)
            except BaseException as e:
                self.error = e
                raise
            last = txs[-1]
            now = datetime.now(UTC)
            lags = tuple((now - tx.commit_ts).total_seconds() * 1000.0 for tx in txs)
            lag = lags[-1]
            self.metrics.append(
                BatchMetrics(
                    batch_id,
                    len(txs),
                    sum(tx.change_count for tx in txs),
                    (time.perf_counter() - start) * 1000.0,
                    lag,
                    last.end_lsn,
                    lags,
                )
            )

    @property
    def initializing(self) -> bool:
        """Whether the query is still starting its sources (its Python source process)."""
        if not self.active or self.query.lastProgress is not None:
            return False
        return self.query.status.get("message") in ("Initializing sources", "Initializing")

    @property
    def active(self) -> bool:
        return self.query is not None and self.query.isActive

    def failure(self) -> str | None:
        """The query's exception message if it died, else None."""
        if self.query is None or self.query.isActive:
            return None
        if self.error is not None:
            return f"{type(self.error).__name__}: {self.error}"
        exc = self.query.exception()
        return None if exc is None else str(exc)

    def died_of_outage(self) -> bool:
        """Whether the query died because the database went away (its batch's error, or its
        task's traceback, is a lost connection), not of a fault of its own."""
        if self.error is not None:
            return is_outage(self.error)
        return is_outage_text(self.failure())

    def wait(self) -> None:
        """Block until an availableNow run finished."""
        if self.query is not None:
            self.query.awaitTermination()

    def stop(self) -> None:
        """Stop the query; a batch in flight finishes (its sink and state commit) first."""
        if self.query is not None:
            try:
                self.query.stop()
            finally:
                with self._busy:
                    pass


def start_all(streams: list[StreamingView], at_once: int = 3, timeout_s: float = 180.0) -> None:
    """Start the queries, at most ``at_once`` initializing at a time: each launches a Python
    source process, and dozens launched together on a busy machine time out connecting back."""
    deadline = time.monotonic() + timeout_s
    starting: list[StreamingView] = []
    for stream in streams:
        while len(starting) >= at_once and time.monotonic() < deadline:
            time.sleep(0.05)
            starting = [s for s in starting if s.initializing]
        stream.start()
        starting.append(stream)
