"""Population: a view's first computation, and re-population (seed 003's "back to population").

``_populate`` reads every source of a view in one snapshot (in this process, or by parallel Spark
tasks sharing the exported snapshot), runs the dataflow over it in chunks, each committed to the
state, and streams the output into the result table (a new one, or only the difference to the
existing one). ``_repopulate`` does it again from fresh state, leaving a marker so that a crash
in the middle is finished at the next open.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator

import pyarrow as pa

from engine.api_lock import serialized
from engine.dataflow import preloaded_reduces
from engine.dataflow.batch import DiffBatch
from engine.dataflow.deferred_updates import deferred
from engine.engine_names import (
    POPULATION_CHUNK,
    POPULATION_TIME,
    REPOPULATE_MARKER,
    SMALL_TABLE_CHUNK,
    SMALL_TABLE_ROWS,
)
from engine.errors import ViewError
from engine.free_memory import release_free_memory
from engine.gc_pause import gc_paused
from engine.population_progress import PopulationProgress
from engine.postgres.arrow_snapshot import QUERY_ERRORS, typed_column
from engine.postgres.parallel_reads import parallel_reads
from engine.postgres.snapshot import snapshot_reader
from engine.postgres.waiting import waits_reported
from engine.sql.catalog import SourceTable
from engine.sql.population_filter import population_filters
from engine.view_runtime import ViewRuntime

log = logging.getLogger(__name__)

#: source batches a population reads ahead of its dataflow (``engine.postgres.read_ahead``), and
#: the bytes they may hold
READ_AHEAD_BATCHES = 128
READ_AHEAD_BYTES = 128 << 20


def _readers_setting() -> int:
    raw = os.environ.get("INCVIEW_POPULATION_READERS", "1")
    if not raw.strip().isdigit() or int(raw) < 1:
        raise ValueError(f"INCVIEW_POPULATION_READERS must be a whole number >= 1, got {raw!r}")
    return int(raw)


#: connections reading a population's sources at once (``engine.postgres.parallel_reads``;
#: ``INCVIEW_POPULATION_READERS``): one by default, as two lost on two cores (docs/cdc.md)
READ_READERS = _readers_setting()


class PopulationMixin:
    """The part of ``Engine`` described in the module docstring."""

    @gc_paused()
    def _populate(self, view: ViewRuntime, time_: int = POPULATION_TIME, lsn: int = 0) -> int:
        """Read every source in one snapshot, run the dataflow over it, write the result table
        (a new table, or only the difference to an existing one); returns the rows written.

        The input goes through the dataflow in chunks of ``POPULATION_CHUNK`` rows
        (``SMALL_TABLE_CHUNK`` of a table estimated under ``SMALL_TABLE_ROWS``), each its own
        time (1, 2, ...) committed to the state, so memory stays bounded whatever the tables'
        size; the chunks' outputs stream into the sink's population transaction (a
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
        # the state is written without RocksDB's log and flushed at the end: a population cut
        # short starts again from empty state anyway
        with (
            view.physical.dataflow.store.populating(),
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
            # ACCESS SHARE on every source now, as the COPYs would: a session holding a
            # conflicting lock is waited for and named here, also when Spark tasks read
            reader.lock_tables([source for source, _, _ in tables])
            tables = _read_order(view.physical.dataflow, tables)
            # GROUP BYs over one table that Postgres computes (engine.sql.population_aggregate):
            # their input chains are muted; a table feeding nothing else is not read at all
            mutes = self._preload_reduces(view, reader)
            if mutes:
                df = view.physical.dataflow
                with preloaded_reduces.muted(mutes):
                    tables = [
                        t
                        for t in tables
                        if preloaded_reduces.source_needed(df, t[0].qualified_name)
                    ]

            def outputs() -> Iterator[DiffBatch]:
                nonlocal final
                df = view.physical.dataflow
                t = pending = 0
                chunk = {source.qualified_name: _chunk_rows(source) for source, _, _ in tables}
                # a population time is bounded by its chunk: consolidating its buffered input on
                # the way (the bound of huge CDC transactions) only costs time (TPC-H Q1 at SF 1:
                # 20 consolidations, ~0.3 s of ~4 s); the state starts empty: point reads of keys
                # not written yet are skipped (state.written_keys)
                with (
                    df.inputs_uncompacted(),
                    df.store.fresh_reads(),
                    preloaded_reduces.muted(mutes),
                ):
                    # what reduces feed waits for their last versions (deferred_updates)
                    with PopulationProgress(view.name, tables) as progress, deferred(df):
                        for table, batch in self._read_sources(view, reader, tables):
                            df.push(table, batch)
                            progress.update(len(batch))
                            pending += len(batch)
                            if pending >= chunk.get(table, POPULATION_CHUNK):
                                t += 1
                                yield df.time_end(t).diffs
                                df.commit(t)
                                pending = 0
                    final = max(time_, t + 1)
                    yield df.time_end(final).diffs

            with view.population_sink() as sink:
                written = sink.populate(outputs(), lsn)
            view.save_snapshot(reader.snapshot)
            view.physical.dataflow.commit(final)
        view.committed(final)
        self._replica_identity_full(view.result_name)
        # populating -> running (or error)
        self._record_errors(view, view.physical.dataflow.errors())
        # what the state's caches hold was picked by the order population read its sources,
        # not by use: the changes to come find little of it (StateStore.drop_caches)
        view.physical.dataflow.store.drop_caches()
        release_free_memory()  # the population's batches are garbage now: give the pages back
        return written

    def _preload_reduces(self, view: ViewRuntime, reader) -> list:
        """Run each population query of the view's reduces in the snapshot and hand its result
        to the reduce; returns the nodes to mute. A query that fails or whose sums do not fit
        leaves its reduce to the rows (logged)."""
        mutes = []
        for node in view.physical.dataflow.nodes:  # nothing left from a population that failed
            if getattr(node.collection, "population_query", None) is not None:
                node.collection.clear_preload()
        for node, top in preloaded_reduces.candidates(view.physical.dataflow):
            reduce = node.collection
            query = reduce.population_query
            schema, _, name = query.table.partition(".")
            source = self.sources.lookup(schema, name)
            try:
                result = reader.query_arrow(query.sql) if source is not None else None
                if result is None:
                    continue
                keys = [
                    typed_column(source, column, result.column(i).combine_chunks(), t)
                    for i, (column, t) in enumerate(
                        zip(query.key_names, query.key_types, strict=True)
                    )
                ]
                if not all(isinstance(k, pa.Array) for k in keys):
                    raise ValueError("a numeric NaN or Infinity in a group key")
                parts = [result.column(i).combine_chunks() for i in query.layout]
                reduce.preload(keys, parts)
            except (ValueError, pa.ArrowException, *QUERY_ERRORS) as e:
                log.info(
                    "view %s: %s read row by row (%s: %s)",
                    view.name, reduce.describe(), type(e).__name__, e,
                )  # fmt: skip
                continue
            mutes.append(top)
        return mutes

    def _read_sources(self, view, reader, tables) -> Iterable[tuple[str, DiffBatch]]:
        """(table, batch) of every source row in ``reader``'s snapshot: read by parallel Spark
        tasks sharing the exported snapshot (runner spark, reads on the executors), or in this
        process on parallel connections (runner local, or Spark with
        ``spark.incview.populationReads`` on the driver)."""
        # Arrow only where columns reach a collection computing on them: turning Arrow into
        # tuples costs more than the row reader's own (a semi or outer join on top)
        df = view.physical.dataflow
        if self.runner == "spark" and not self._population_reads_on_driver():
            from engine.spark.population import read_sources

            yield from read_sources(
                self.spark, self.dsn, reader, tables, self.wait_timeout_s, df.reads_columns
            )
            return

        # the reads run on READ_READERS connections in the snapshot (a big table in block
        # ranges), up to READ_AHEAD_BATCHES batches and READ_AHEAD_BYTES ahead of the dataflow:
        # a slow server-side scan (a filter passing a quarter of lineitem) then goes on while
        # the dataflow works through a heavy stretch (TPC-H SF 1: Q10 7.29 s at 8 batches
        # ahead, 6.51 s at 128; a batch is <= 50,000 rows, 2-9 MB there; docs/cdc.md)
        with parallel_reads(
            reader, tables, df.reads_columns, READ_READERS, READ_AHEAD_BATCHES, READ_AHEAD_BYTES
        ) as batches:
            yield from batches

    @serialized
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


def _read_order(df, tables: list) -> list:
    """``tables`` in the order a population reads them: the sources below an outer join's side
    that is never padded (or an anti join's right side) first, the others after, each group in
    its order (``read_first_input`` of the collections).

    Any order gives the same state and result (the chunks are a Z-set), not the same work: read
    the other way, every row of the padded side first comes out padded (or, from an anti join,
    unmatched) and is retracted when its matches arrive, and the reduces above churn with it.
    TPC-H SF 1, Q13 (customer LEFT JOIN orders, counted twice), eight alternating runs each:
    3.45 s on average (3.05-4.02) -> 3.05 s (2.65-3.46) with orders read first. Ordering every
    view's sources by size instead measured mixed (the most rows first, by Postgres' estimate:
    Q5 6.3 -> 5.6 s, but Q3 4.2 -> 4.7, Q12 2.5 -> 2.85, Q10 with its nation last 6.9 -> 7.4;
    over all 11 views 40.2 s either way) and was not taken."""
    first: set[str] = set()
    for node in df.nodes:
        side = getattr(node.collection, "read_first_input", None)
        if side is not None:
            first |= df.sources_above(node.inputs[side])
    return sorted(tables, key=lambda t: t[0].qualified_name not in first)


def _chunk_rows(source: SourceTable) -> int:
    """Source rows per population time (``engine_names``: POPULATION_CHUNK, SMALL_TABLE_CHUNK)."""
    if source.row_estimate is not None and source.row_estimate < SMALL_TABLE_ROWS:
        return SMALL_TABLE_CHUNK
    return POPULATION_CHUNK
