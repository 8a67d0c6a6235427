"""``ApplyMixin``: how an ``Engine`` applies polled transactions to its views.

For each view: the changes of its input tables (projected onto the columns it reads), skipping
what its population snapshot already holds; TRUNCATE sends it back to population; the time's
output goes to the result table with the LSN in one Postgres transaction, then the state
commits. A failed view rewinds the reader so the batch is read again (the views that applied it
skip it); a view that fails inside the engine (a bug) is sent back to population instead
(``engine.recovery``). Mixed into ``Engine``.

A huge transaction (more diffs than ``max_buffered_changes``) arrives partly on disk
(``Transaction.spilled``): it is pushed into each view's dataflow chunk by chunk, all as the one
time of the polled batch, so the sink still writes it in one Postgres transaction (a failure
anywhere leaves the result table as it was, and the batch is read again).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from engine.engine_names import MAX_BUFFERED_CHANGES, MAX_BUFFERED_CHANGES_ENV, POLL_CHANGES
from engine.errors import SourceChanged, ViewError
from engine.gc_pause import gc_paused
from engine.outage import is_outage
from engine.postgres.cdc import Transaction, visible_in_snapshot
from engine.view_runtime import ViewRuntime


def buffered_changes_setting(value: int | None) -> int:
    """The ``max_buffered_changes`` setting: ``value``, else the environment variable, else the
    default. Raises ``ValueError`` for a negative or non-integer setting."""
    source = "max_buffered_changes"
    if value is None:
        raw = os.environ.get(MAX_BUFFERED_CHANGES_ENV)
        if raw is None:
            return MAX_BUFFERED_CHANGES
        source = MAX_BUFFERED_CHANGES_ENV
        try:
            value = int(raw)
        except ValueError:
            value = -1
    if not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{source} must be a whole number of changes >= 0 (0: no bound), not {value!r}"
        )
    return value


class ApplyMixin:
    def spill_counts(self) -> dict[str, int]:
        """How often the memory bound made this engine spill: source transactions (and their
        chunks) the CDC reader put on disk (on Spark: the shared query's reads), times whose output the views' sinks spilled, and
        compactions of buffered input in stateful collections."""
        views = list(self.views.values())
        return {
            "cdc_transactions": self.reader.spilled_transactions
            + (self._shared_stream.spilled_transactions if self._shared_stream else 0),
            "cdc_chunks": self.reader.spilled_chunks,
            "sink_times": sum(v.physical.dataflow.sink_spills for v in views),
            "compactions": sum(v.physical.dataflow.compactions for v in views),
        }

    def _run_local_once(self, running: list[ViewRuntime]) -> None:
        """One poll of the slot applied to ``running`` (runner local's streaming loop)."""
        txs = self.reader.poll(POLL_CHANGES)
        if txs:
            self._apply(txs, running)
            self._slot_keeper.request()
        else:  # idle: what the applied batches left, back to the OS (every 10 s at most)
            self._release_memory()

    def _apply(self, txs: list[Transaction], views: Iterable[ViewRuntime]) -> None:
        """One polled batch to ``views``. If a view fails (its sink, say), it kept its state
        before the batch: the reader is rewound so the batch is read again next time (views
        that applied it skip it), then the error is raised."""
        end = txs[-1].end_lsn
        # not the ones broken meanwhile, nor those waiting to be re-populated (engine.recovery)
        views = [v for v in views if v.name in self.views and not self.repairs.is_pending(v.name)]
        downstream = self._inputs_of_all()
        try:
            for view in views:
                try:
                    wrote = self._apply_view(view, txs, end)
                except SourceChanged as e:
                    self._break(view.name, str(e))
                    continue
                except ViewError:
                    raise  # its sink failed: the batch is read again (``sink_error``)
                except Exception as e:
                    if is_outage(e):
                        raise
                    self._internal_error(view, e)  # a bug: back to population
                    continue
                self.repairs.applied(view.name)
                if wrote and view.result_name in downstream:
                    self._downstream_dirty = True
        except BaseException:
            self.reader.rewind(min(v.state_time for v in views))
            raise

    @gc_paused()
    def _apply_view(self, view: ViewRuntime, txs: list[Transaction], end: int) -> bool:
        """Apply the transactions of ``txs`` the view has not applied yet, as one time ``end``.
        Returns whether result rows were written (a re-population flags its own writes).

        A transaction that TRUNCATEs one of the view's inputs sends the view back to population
        (at the time the view had reached before this batch): the fresh snapshot holds that
        transaction and everything before it, so diffs pushed so far are dropped with the old
        state, and the batch is scanned again from its start, applying what the new snapshot
        does not show (the xid rule; a transaction committed just before the TRUNCATE but not
        yet visible when the snapshot was taken is thus not lost)."""
        base = view.state_time
        if end <= base:
            return False
        if base < view.sink_lsn < end:
            # the result table already reflects the transactions up to sink_lsn (a crash came
            # between the sink's commit and the state's): apply those to the state alone first
            head = [tx for tx in txs if tx.end_lsn <= view.sink_lsn]
            self._apply_view(view, head, view.sink_lsn)
            txs = [tx for tx in txs if tx.end_lsn > view.sink_lsn]
            base = view.state_time
        repopulations = 0
        i = 0
        last_commit = None
        while i < len(txs):
            tx = txs[i]
            i += 1
            if tx.end_lsn <= base:
                continue
            if view.snapshot is not None and visible_in_snapshot(tx.xid, view.snapshot):
                continue
            inputs = view.inputs
            if tx.truncated.intersection(inputs):
                repopulations += 1
                if repopulations > len(txs) + 1:
                    raise ViewError(
                        f"view {view.name}: a TRUNCATE of its inputs at LSN {tx.end_lsn:X} stays "
                        "invisible to fresh snapshots; check the server, then catch_up again"
                    )
                self._repopulate(view, base)
                i = 0
                last_commit = tx.commit_ts
                continue
            df = view.physical.dataflow
            for table, batch in tx.iter_changes():
                if table in inputs and batch:
                    cols = tuple(c.name for c in tx.relations[table].columns)
                    df.push(table, view.project(table, batch, cols))
                    last_commit = tx.commit_ts
        df = view.physical.dataflow
        out = df.time_end(end)
        try:
            if view.sink.apply(out.diffs, end, last_commit):
                view.sink_lsn = end
        except Exception as e:
            df.abort()
            self.catalog.set_phase(view.name, "sink_error", str(e))
            view.record = self.catalog.get(view.name) or view.record
            raise ViewError(f"view {view.name}: writing the result table failed: {e}") from e
        df.commit(end)
        view.committed(end)
        if last_commit is not None:
            view.last_commit = last_commit
        if out.errs or view.record.phase in ("error", "sink_error"):
            # also after a sink failure the database recovered from (seed 003: retried, not
            # re-populated): back to running, or to error while the errs collection holds rows
            self._record_errors(view, df.errors())
        if out.diffs:
            view.writes += 1
        return bool(out.diffs)

    def _record_errors(self, view: ViewRuntime, errors: dict[str, int]) -> None:
        """Phase ``error`` (with one message) while the errs collection is non-empty, else running."""
        phase = "error" if errors else "running"
        message = min(errors) if errors else None
        if (view.record.phase, view.record.last_error) != (phase, message):
            self.catalog.set_phase(view.name, phase, message)
            view.record = self.catalog.get(view.name) or view.record
