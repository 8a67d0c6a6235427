"""``ViewRuntime``: one view at run time inside an ``Engine``: plan, dataflow, state, sink.

It owns the view's state store and result sink, knows the columns its dataflow reads from each
source (and what they were when the view was created: ``SourceSchema``), projects incoming
changes onto them, and keeps the view's population snapshot and committed state time. It must
not poll the slot or decide anything about other views: the ``Engine`` drives it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from datetime import datetime
from operator import itemgetter

import psycopg

from engine.dataflow.batch import DiffBatch
from engine.dataflow.state.store import StateStore
from engine.engine_names import SOURCES_FILE, TREE_FILE
from engine.errors import SourceChanged
from engine.plan_lock import PlanStats, fingerprint, save_fingerprint, saved_fingerprint
from engine.postgres.cdc import PgSnapshot
from engine.postgres.sink import ResultSink
from engine.postgres.view_catalog import ViewRecord
from engine.source_schema import SourceSchema
from engine.sql.physical_planner import PhysicalPlan
from engine.sql.planner import ViewPlan, build_dataflow


class ViewRuntime:
    """One view at run time: plan, dataflow, state, sink, population snapshot."""

    def __init__(self, engine, record: ViewRecord, plan: ViewPlan) -> None:
        self.name = record.name
        self.record = record
        self.plan = plan
        self.dir = engine.state_dir / "views" / record.name
        self.max_buffered_changes: int = engine.max_buffered_changes
        self._budget = engine.memory_budget
        self._open_state()
        # the plan the state was built by (engine.plan_lock): why it differs now, if it does
        self.plan_changed: str | None = None
        built_by = saved_fingerprint(self.dir)
        if built_by is None:
            save_fingerprint(self.dir, fingerprint(self.physical.explain()))
        elif built_by != fingerprint(self.physical.explain()):
            self.plan_changed = (
                "its physical plan is not the one its state was built by (planned again with "
                "other statistics, or by another incview version)"
            )
        if PlanStats.load(self.dir) is None:
            PlanStats.of_sources(plan.sources).save(self.dir)
        self.recorded_time = 0  # state time last written to the catalog
        # the columns (and types) of the sources this view reads, as when it was created
        self.expected = SourceSchema.load(self.dir / SOURCES_FILE)
        if self.expected is None:
            self._expect_sources()
        self._columns = list(zip(plan.output_names, plan.output_types, strict=True))
        self._dsn = engine.dsn
        # on Spark the views' batches run on the shared query's thread, through its connection
        self._spark = engine.stream_conn is not None
        self.sink = self._new_sink(engine.stream_conn or engine.sink_conn)
        # the LSN the result table reflects (ahead of state_time after a crash between the
        # sink's commit and the state's: the transactions up to it are then applied to the
        # state only)
        self.sink_lsn: int = record.last_lsn or 0
        self.stream = None  # engine.spark.streaming.StreamMember while running on Spark
        self.writes = 0  # batches that wrote result rows
        self.snapshot: PgSnapshot | None = self._load_snapshot()
        # commit time of the last source transaction applied (list_views' lag)
        self.last_commit: datetime | None = record.last_commit_time
        # (table, its column names) -> (indices of the view's columns, a row picker)
        self._projections: dict[tuple[str, tuple[str, ...]], tuple[list[int], Callable]] = {}
        # source -> the tables below it (partitions, inheritance children) its last population
        # read (None: not recorded, a view of an older version)
        tree = self.dir / TREE_FILE
        self.tree: dict[str, list[str]] | None = (
            json.loads(tree.read_text()) if tree.exists() else None
        )

    def save_tree(self, tree: dict[str, list[str]]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / (TREE_FILE + ".tmp")
        tmp.write_text(json.dumps(tree, sort_keys=True))
        tmp.replace(self.dir / TREE_FILE)
        self.tree = tree

    # population snapshot ---------------------------------------------------------------------
    def _load_snapshot(self) -> PgSnapshot | None:
        p = self.dir / "population.json"
        if not p.exists():
            return None
        d = json.loads(p.read_text())
        return PgSnapshot(d["xmin"], d["xmax"], tuple(d["xip"]))

    def save_snapshot(self, snap: PgSnapshot) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "population.json.tmp"
        tmp.write_text(json.dumps({"xmin": snap.xmin, "xmax": snap.xmax, "xip": list(snap.xip)}))
        tmp.replace(self.dir / "population.json")
        self.snapshot = snap

    @property
    def state_time(self) -> int:
        """The time (LSN) the view's state is committed at. Cached: other threads read it while
        the view's own thread may be using the store (a rocksdict is single-threaded)."""
        return self._state_time

    def committed(self, time_: int) -> None:
        """Call right after the dataflow committed ``time_``."""
        self._state_time = time_

    @property
    def inputs(self) -> dict[str, tuple[str, ...]]:
        return self.physical.inputs

    def project(self, table: str, batch: DiffBatch, column_names: tuple[str, ...]) -> DiffBatch:
        wanted = self.inputs[table]
        if column_names == wanted:
            return batch
        key = (table, column_names)
        cached = self._projections.get(key)
        if cached is None:
            gone = self.expected.missing_columns(table, column_names)
            if gone is not None:
                raise SourceChanged(gone)
            idx = [column_names.index(c) for c in wanted]
            if len(idx) > 1:
                pick = itemgetter(*idx)  # a tuple of the columns, in C
            else:
                pick = (lambda r, _i=idx[0]: (r[_i],)) if idx else (lambda r: ())
            cached = self._projections[key] = (idx, pick)
        idx, pick = cached
        if batch.columns is not None:  # Arrow columns (the columnar CDC decode): picked as they are
            return DiffBatch.from_columns([batch.columns[i] for i in idx], batch.column_weights)
        return DiffBatch(list(map(pick, batch.rows)), list(batch.weights))

    def _new_sink(self, conn: psycopg.Connection) -> ResultSink:
        r = self.record
        return ResultSink(conn, r.name, r.result_schema, r.result_table, self._columns)

    @contextlib.contextmanager
    def population_sink(self) -> Iterator[ResultSink]:
        """The sink a population writes through: the view's own; on Spark, whose query thread
        shares the views' sink connection meanwhile, one on a connection of its own."""
        if not self._spark:
            yield self.sink
            return
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            yield self._new_sink(conn)

    def stop_stream(self) -> None:
        """Stop the view's streaming query, if one runs (runner spark)."""
        if self.stream is not None:
            self.stream.stop()
            self.stream = None

    def reopen_state(self) -> None:
        """Close the state store (best effort) and open it again at its committed time, with a
        fresh dataflow: after a write failed (a full disk), RocksDB takes no more writes."""
        with contextlib.suppress(Exception):  # a store whose last write failed may refuse
            self.store.close()
        self._open_state()
        self._projections = {}

    def reset_state(self) -> None:
        """Close and delete the view's state and build an empty dataflow (re-population)."""
        self.store.close()
        shutil.rmtree(self.dir / "state", ignore_errors=True)
        self._open_state()
        self._projections = {}
        save_fingerprint(self.dir, fingerprint(self.physical.explain()))  # the new state's plan
        # the keys the new state relies on (its columns stay those the view was created with)
        self.expected = self.expected.with_keys(self.physical.unique_keys)
        self.expected.save(self.dir / SOURCES_FILE)
        self.plan_changed = None

    def _expect_sources(self) -> None:
        """Record the columns, source views and keys the view's dataflow reads and relies on."""
        self.expected = SourceSchema.of_plan(
            self.plan.sources, self.physical.inputs, self.plan.source_views,
            self.physical.unique_keys,
        )  # fmt: skip
        self.expected.save(self.dir / SOURCES_FILE)

    def _open_state(self) -> None:
        """Open the state store (within the engine's memory budget, if it has one) and build the
        dataflow on it, its buffered diffs bounded by ``max_buffered_changes``."""
        self.store = StateStore(self.dir / "state", budget=self._budget)
        self.physical: PhysicalPlan = build_dataflow(self.plan, self.store)
        self.physical.dataflow.bound_memory(self.max_buffered_changes)
        self._state_time: int = self.store.committed_time or 0

    @property
    def result_name(self) -> str:
        return f"{self.record.result_schema}.{self.record.result_table}"

    def close(self) -> None:
        self.store.close()
