"""The running phase of an Engine's views as ONE Spark Structured Streaming query.

``readStream.format("incview_cdc")`` (LSN offsets, whole transactions, see
``engine.spark.cdc_source``) -> ``foreachBatch``: every micro-batch is read once (on the
executors) and comes to the driver (streamed with ``toLocalIterator()``, or as Arrow with
``toArrow()`` when ``max_buffered_changes`` is 0), is reassembled into transactions (a huge one
partly on disk) and fanned out to every member view through the engine's ``apply(view, txs)``
callback, which feeds that view's dataflow, writes the net diff and the LSN through its sink in
one Postgres transaction and commits its state. Each view skips the transactions it already
applied (end LSN <= its state time), so the result is exactly-once.

``SharedCdcStream`` is the query; each view holds a ``StreamMember`` (``ViewRuntime.stream``).
The query starts at the smallest state LSN of its first members (its checkpoint is dropped
before each start: the views' states, not Spark's offsets, say where they are). A view that
joins a running query (a new view after its population, a repaired one) is first brought, on
the driver and while no batch fans out, to the WAL's flushed end with a bounded read of the slot
(``CdcReader.read_range``), past anything the query has fanned out; batches then carry on for
it. Joining and leaving never restart the query or touch the other views. A member whose apply
fails (its sink, an outage) is out of the fan-out with its error until the engine handles it.

The trigger is ``processingTime`` (50 ms by default): when a batch overruns it, the next starts
at once and takes everything that arrived meanwhile (up to ``max_rows`` changes), so batches grow
under load and lag stays bounded. Per view, per-batch metrics (rows, duration, commit->visible
lag) are kept for ``list_views``, Dagster and the benchmark. This module must not plan views or
write SQL results itself.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from engine.outage import is_outage, is_outage_text
from engine.postgres.cdc import CdcReader, Transaction
from engine.spark.cdc_payloads import transactions_from_rows
from engine.spark.cdc_source import NAME


@dataclass(frozen=True)
class BatchMetrics:
    batch_id: int
    transactions: int
    changes: int
    duration_ms: float
    lag_ms: float | None  # now - commit time of the batch's last transaction, at sink commit
    end_lsn: int
    tx_lags_ms: tuple[float, ...] = ()  # commit -> visible of each transaction of the batch


class StreamMember:
    """One view's part in the shared query (``ViewRuntime.stream``): its metrics, its error."""

    def __init__(self, shared: SharedCdcStream, view) -> None:
        self.shared = shared
        self.view = view
        self.name = view.name
        self.metrics: deque[BatchMetrics] = deque(maxlen=10_000)
        self.error: BaseException | None = None

    @property
    def spilled_transactions(self) -> int:
        return self.shared.spilled_transactions

    @property
    def active(self) -> bool:
        return self.error is None and self.shared.active and self.shared.has(self)

    def failure(self) -> str | None:
        """Why the view stopped receiving batches (its apply failed, or the query died)."""
        if self.error is not None:
            return f"{type(self.error).__name__}: {self.error}"
        return self.shared.failure()

    def died_of_outage(self) -> bool:
        """Whether it stopped because the database went away (its error, or the query's task's
        traceback, is a lost connection), not of a fault of its own."""
        if self.error is not None:
            return is_outage(self.error)
        return is_outage_text(self.shared.failure())

    def stop(self) -> None:
        """Leave the fan-out; a batch in flight finishes first (its sink and state commit)."""
        self.shared.leave(self)

    def record(self, batch_id: int, txs: list[Transaction], started: float) -> None:
        now = datetime.now(UTC)
        lags = tuple((now - tx.commit_ts).total_seconds() * 1000.0 for tx in txs)
        self.metrics.append(
            BatchMetrics(
                batch_id,
                len(txs),
                sum(tx.change_count for tx in txs),
                (time.perf_counter() - started) * 1000.0,
                lags[-1],
                txs[-1].end_lsn,
                lags,
            )
        )


class SharedCdcStream:
    """The Engine's one streaming query. ``apply(view, txs)`` must apply and commit ``txs`` to
    ``view`` (skipping what it holds)."""

    def __init__(
        self,
        spark,
        apply: Callable[[object, list[Transaction]], None],
        *,
        dsn: str,
        slot: str,
        publication: str,
        checkpoint: Path,
        trigger_ms: int = 50,
        max_rows: int | None = None,
        max_buffered_changes: int = 0,
        read_on_driver: bool = False,
    ) -> None:
        self.spark = spark
        self._apply = apply
        self.options = {"dsn": dsn, "slot": slot, "publication": publication}
        # local master: the driver reads each batch's LSN range itself (``_read_on_driver``)
        self.read_on_driver = read_on_driver
        self._reader: CdcReader | None = None
        # one user of the driver's reader at a time: a batch's read (outside the fan-out's
        # lock) and a joining view's catch-up (inside it) share one connection, one named
        # server-side cursor and the reader's position
        self._reader_lock = threading.Lock()
        self._start_lsn = 0
        if max_rows is not None:
            self.options["max_rows"] = str(max_rows)
        # a huge transaction: spilled past this many diffs by the task and by the driver
        self.max_buffered_changes = max_buffered_changes
        self.spilled_transactions = 0  # transactions the driver received partly on disk
        if max_buffered_changes > 0:
            self.options["max_buffered_changes"] = str(max_buffered_changes)
        self.checkpoint = checkpoint
        self.trigger_ms = trigger_ms
        self.query = None
        self.members: dict[str, StreamMember] = {}
        # held while a batch fans out and while a view joins or leaves
        self._lock = threading.RLock()
        self._fanout_thread: int | None = None  # the thread fanning a batch out, meanwhile

    # -- membership ------------------------------------------------------------------------------
    def has(self, member: StreamMember) -> bool:
        return self.members.get(member.name) is member

    def join(self, view) -> StreamMember:
        """Add ``view`` to the fan-out (caught up first if the query runs already)."""
        member = StreamMember(self, view)
        with self._lock:
            if self.query is not None:
                try:
                    self._catch_up(view)
                except Exception as e:  # the engine sees it as the view's failure
                    member.error = e
                    return member
            old = self.members.get(view.name)
            if old is not None:
                old.error = old.error or RuntimeError("replaced by a new member")
            self.members[view.name] = member
        return member

    def leave(self, member: StreamMember) -> None:
        """Take ``member`` out; the last one to leave stops the query (it holds the slot busy
        while it peeks: the last view's drop drops the slot), unless it leaves from within a
        batch (the query cannot wait for its own batch: the engine stops it later)."""
        with self._lock:
            self._remove(member)
            idle = not self.members and threading.get_ident() != self._fanout_thread
        if idle:
            self.stop()

    def _remove(self, member: StreamMember) -> None:
        with self._lock:
            if self.has(member):
                del self.members[member.name]

    # -- the query ------------------------------------------------------------------------------
    def start(self, start_lsn: int) -> None:
        """Start reading at ``start_lsn`` (the smallest state LSN of the members)."""
        shutil.rmtree(self.checkpoint, ignore_errors=True)
        self._start_lsn = start_lsn
        reader = self.spark.readStream.format(NAME).option("start_lsn", str(start_lsn))
        for key, value in self.options.items():
            reader = reader.option(key, value)
        self.query = (
            reader.load()
            .writeStream.queryName("incview")
            .foreachBatch(self._batch)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(processingTime=f"{self.trigger_ms} milliseconds")
            .start()
        )

    def _batch(self, df, batch_id: int) -> None:
        started = time.perf_counter()
        txs = self._read_on_driver(batch_id) if self.read_on_driver else self._transactions(df)
        if not txs:
            return
        self.spilled_transactions += sum(tx.spilled is not None for tx in txs)
        with self._lock:
            self._fanout_thread = threading.get_ident()
            try:
                for member in list(self.members.values()):
                    try:
                        self._apply(member.view, txs)
                    except Exception as e:  # out of the fan-out until the engine handles it
                        member.error = e
                        self._remove(member)
                        continue
                    member.record(batch_id, txs, started)
            finally:
                self._fanout_thread = None

    def _catch_up(self, view) -> None:
        """Bring ``view``, joining the running query, to the WAL's flushed end (past anything
        the query fanned out) with the driver's reader; the caller holds the fan-out's lock."""
        with self._driver_reader() as reader:
            target = reader.flush_wal()
            txs = reader.read_range(view.state_time, target) if view.state_time < target else []
        if txs:
            self._apply(view, txs)

    @contextlib.contextmanager
    def _driver_reader(self) -> Iterator[CdcReader]:
        """The driver's reader of the slot (batches read on the driver, joining views'
        catch-ups), held by one caller at a time and closed if a read fails."""
        with self._reader_lock:
            if self._reader is None:
                self._reader = CdcReader(
                    self.options["dsn"],
                    self.options["slot"],
                    self.options["publication"],
                    max_buffered_changes=self.max_buffered_changes,
                )
            try:
                yield self._reader
            except BaseException:
                self._reader.close()
                self._reader = None
                raise

    def _read_on_driver(self, batch_id: int) -> list[Transaction]:
        """The micro-batch's transactions read by the driver: the LSN range (start, end] the
        query logged for ``batch_id`` (its offset log, written before the batch runs) through
        ``CdcReader.read_range``, the very read the source's task would make. With a local
        master the task runs on this machine anyway; reading here saves its Spark job and
        Python worker round trip (~150 ms a batch, measured) and the transactions' pickling."""
        end = _logged_lsn(self.checkpoint, batch_id)
        start = self._start_lsn if batch_id == 0 else _logged_lsn(self.checkpoint, batch_id - 1)
        if end <= start:
            return []
        with self._driver_reader() as reader:
            return reader.read_range(start, end)

    def _transactions(self, df) -> list[Transaction]:
        if self.max_buffered_changes > 0:
            # streamed row by row (one partition, in (end_lsn, seq) order): a huge
            # transaction goes to disk past the bound instead of into memory whole
            rows = ((r.end_lsn, r.seq, bytes(r.payload)) for r in df.toLocalIterator())
            return transactions_from_rows(rows, self.max_buffered_changes, presorted=True)
        table = df.toArrow()
        rows = zip(
            table.column("end_lsn").to_pylist(),
            table.column("seq").to_pylist(),
            table.column("payload").to_pylist(),
            strict=True,
        )
        return transactions_from_rows(rows)

    @property
    def active(self) -> bool:
        return self.query is not None and self.query.isActive

    def failure(self) -> str | None:
        """The query's exception message if it died, else None."""
        if self.query is None or self.query.isActive:
            return None
        exc = self.query.exception()
        return None if exc is None else str(exc)

    def stop(self) -> None:
        """Stop the query; a batch in flight finishes (its sinks and state commits) first."""
        if self.query is not None:
            try:
                self.query.stop()
            finally:
                with self._lock:
                    pass
        shutil.rmtree(self.checkpoint, ignore_errors=True)
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None


def _logged_lsn(checkpoint: Path, batch_id: int) -> int:
    """The source offset the query logged for ``batch_id`` (the offset log's last line is the
    source's offset JSON, ``{"lsn": n}``)."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().split("\n")
    return int(json.loads([line for line in lines if line.strip()][-1])["lsn"])
