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

``runner="local"`` drives the dataflow in-process; ``runner="spark"`` (the default of the
contract) arrives with the Spark runtime. This module orchestrates; it must not plan, decode or
write SQL results itself.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from engine.dataflow.batch import DiffBatch
from engine.dataflow.state.store import StateStore
from engine.errors import ViewError
from engine.postgres.cdc import (
    CdcReader,
    PgSnapshot,
    Transaction,
    visible_in_snapshot,
)
from engine.postgres.sink import ResultSink
from engine.postgres.snapshot import snapshot_reader
from engine.postgres.source_catalog import PostgresCatalog
from engine.postgres.view_catalog import ViewCatalog, ViewRecord
from engine.sql.physical_planner import PhysicalPlan
from engine.sql.planner import ViewPlan, build_dataflow, explain, plan_view

SLOT = "incview_slot"
PUBLICATION = "incview_pub"
_POPULATION_TIME = 1


@dataclass(frozen=True)
class ViewStatus:
    name: str
    phase: str  # populating | running | error | sink_error
    lag_ms: float | None
    rows: int | None
    state_bytes: int
    last_error: str | None


def split_view_name(name: str) -> tuple[str, str]:
    """``a.b`` -> (a, b); ``b`` -> (public, b)."""
    parts = name.split(".")
    if len(parts) == 1 and parts[0]:
        return "public", parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise ViewError(f"invalid view name {name!r}: use 'name' or 'schema.name'")


class _View:
    """One view at run time: plan, dataflow, state, sink, population snapshot."""

    def __init__(self, engine: Engine, record: ViewRecord, plan: ViewPlan) -> None:
        self.name = record.name
        self.record = record
        self.plan = plan
        self.dir = engine.state_dir / "views" / record.name
        self.store = StateStore(self.dir / "state")
        self.physical: PhysicalPlan = build_dataflow(plan, self.store)
        columns = list(zip(plan.output_names, plan.output_types, strict=True))
        self.sink = ResultSink(
            engine.sink_conn, record.name, record.result_schema, record.result_table, columns
        )
        self.snapshot: PgSnapshot | None = self._load_snapshot()
        self.lag_ms: float | None = None
        self._projections: dict[tuple[str, tuple[str, ...]], list[int]] = {}

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
        return self.store.committed_time or 0

    @property
    def inputs(self) -> dict[str, tuple[str, ...]]:
        return self.physical.inputs

    def project(self, table: str, batch: DiffBatch, column_names: tuple[str, ...]) -> DiffBatch:
        wanted = self.inputs[table]
        if column_names == wanted:
            return batch
        key = (table, column_names)
        idx = self._projections.get(key)
        if idx is None:
            idx = [column_names.index(c) for c in wanted]
            self._projections[key] = idx
        return DiffBatch([tuple(r[i] for i in idx) for r in batch.rows], list(batch.weights))

    def close(self) -> None:
        self.store.close()


class Engine:
    """Incremental materialized views over one Postgres database. See the module docstring."""

    def __init__(
        self,
        dsn: str | None = None,
        state_dir: str | Path = ".incview",
        runner: str = "spark",
    ) -> None:
        if runner not in ("local", "spark"):
            raise ValueError(f"runner must be 'local' or 'spark', not {runner!r}")
        if runner == "spark":
            raise ViewError(
                "runner='spark' is not available yet in this build (the Spark runtime is being "
                "built); use Engine(..., runner='local')"
            )
        if dsn is None:
            raise ViewError(
                "no dsn given: the embedded Postgres is not available yet; pass dsn=..."
            )
        self.dsn = dsn
        self.runner = runner
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.sink_conn = psycopg.connect(dsn, autocommit=True)
        self.catalog = ViewCatalog.open(self.conn)
        self.sources = PostgresCatalog(self.conn)
        self.views: dict[str, _View] = {}
        for record in self.catalog.all():
            if record.phase == "populating":
                continue  # an interrupted create_view: left for drop_view / re-creation
            self.views[record.name] = _View(self, record, plan_view(record.sql, self.sources))
        after = min((v.state_time for v in self.views.values()), default=0)
        self.reader = CdcReader(dsn, SLOT, PUBLICATION, after_lsn=after)

    # -- create ---------------------------------------------------------------------------------
    def create_view(self, name: str, sql: str) -> None:
        """Plan, populate and start maintaining ``name`` AS ``sql``."""
        schema, table = split_view_name(name)
        if self.catalog.get(name) is not None:
            raise ViewError(f"view {name} already exists: drop_view({name!r}) first")
        plan = plan_view(sql, self.sources)
        tables = [s.qualified_name for s in plan.sources]
        for t in tables:
            kind = self.sources.kinds.get(t)
            if kind not in ("r", "p"):
                raise ViewError(
                    f"{t} is not a table: incview reads changes of ordinary tables only"
                )
        self.reader.ensure(tables)  # checks wal_level and REPLICA IDENTITY FULL; creates the slot
        self.catalog.insert(name, sql, schema, table)
        record = self.catalog.get(name)
        assert record is not None
        view = None
        try:
            view = _View(self, record, plan)
            self._populate(view)
        except BaseException:
            if view is not None:
                view.close()
                shutil.rmtree(view.dir, ignore_errors=True)
            self.catalog.delete(name)
            raise
        self.views[name] = view

    def _populate(self, view: _View) -> None:
        """Read every source in one snapshot, run the dataflow once, write the result table."""
        df = view.physical.dataflow
        with snapshot_reader(self.dsn) as reader:
            for table, columns in view.inputs.items():
                schema, _, name = table.partition(".")
                source = self.sources.lookup(schema, name)
                for batch in reader.read_table(source, list(columns)):
                    df.push(table, batch)
            snap = reader.snapshot
        view.save_snapshot(snap)
        out = df.time_end(_POPULATION_TIME)
        view.sink.populate([out.diffs], 0)
        df.commit(_POPULATION_TIME)
        self._record_errors(view, df.errors())  # populating -> running (or error)

    # -- running --------------------------------------------------------------------------------
    def catch_up(self, timeout_s: float = 60) -> None:
        """Apply every change committed before this call to every view; return when done."""
        deadline = time.monotonic() + timeout_s
        if not self.views:
            return
        target = self.reader.flush_wal()
        while True:
            txs = self.reader.poll(10_000)
            if not txs:
                return
            self._apply(txs)
            if txs[-1].end_lsn >= target:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"catch_up did not reach {target} within {timeout_s} s")

    def _apply(self, txs: list[Transaction]) -> None:
        end = txs[-1].end_lsn
        for view in self.views.values():
            self._apply_view(view, txs, end)
        self.reader.advance(min(v.state_time for v in self.views.values()))

    def _apply_view(self, view: _View, txs: list[Transaction], end: int) -> None:
        if end <= view.state_time:
            return
        df = view.physical.dataflow
        inputs = view.inputs
        last_commit = None
        for tx in txs:
            if tx.end_lsn <= view.state_time:
                continue
            if view.snapshot is not None and visible_in_snapshot(tx.xid, view.snapshot):
                continue
            hit = tx.truncated.intersection(inputs)
            if hit:
                raise ViewError(
                    f"view {view.name}: TRUNCATE of {', '.join(sorted(hit))} is not supported yet; "
                    f"drop and re-create the view"
                )
            for table, batch in tx.changes.items():
                if table in inputs and batch:
                    cols = tuple(c.name for c in tx.relations[table].columns)
                    df.push(table, view.project(table, batch, cols))
                    last_commit = tx.commit_ts
        out = df.time_end(end)
        try:
            view.sink.apply(out.diffs, end, last_commit)
        except Exception as e:
            df.abort()
            self.catalog.set_phase(view.name, "sink_error", str(e))
            raise ViewError(f"view {view.name}: writing the result table failed: {e}") from e
        df.commit(end)
        if last_commit is not None:
            view.lag_ms = max(0.0, (datetime.now(UTC) - last_commit).total_seconds() * 1000)
        if out.errs or view.record.phase == "error":
            self._record_errors(view, df.errors())

    def _record_errors(self, view: _View, errors: dict[str, int]) -> None:
        """Phase ``error`` (with one message) while the errs collection is non-empty, else running."""
        phase = "error" if errors else "running"
        message = min(errors) if errors else None
        if (view.record.phase, view.record.last_error) != (phase, message):
            self.catalog.set_phase(view.name, phase, message)
            view.record = self.catalog.get(view.name) or view.record

    # -- inspection -----------------------------------------------------------------------------
    def list_views(self) -> list[ViewStatus]:
        out = []
        for record in self.catalog.all():
            view = self.views.get(record.name)
            rows = None
            if view is not None:
                rows = self.conn.execute(
                    psycopg.sql.SQL("SELECT count(*) FROM {}.{}").format(
                        psycopg.sql.Identifier(record.result_schema),
                        psycopg.sql.Identifier(record.result_table),
                    )
                ).fetchone()[0]
            out.append(
                ViewStatus(
                    record.name,
                    record.phase,
                    view.lag_ms if view is not None else None,
                    rows,
                    view.store.size_bytes() if view is not None else 0,
                    record.last_error,
                )
            )
        return out

    def explain(self, sql: str) -> str:
        return explain(sql, self.sources)

    # -- drop / close ---------------------------------------------------------------------------
    def drop_view(self, name: str) -> None:
        """Drop the result table, the state, and the slot/publication when no view needs them."""
        record = self.catalog.get(name)
        if record is None:
            raise ViewError(f"no view named {name}")
        view = self.views.pop(name, None)
        if view is not None:
            view.sink.drop()
            view.close()
        else:
            columns: list = []
            ResultSink(
                self.sink_conn, name, record.result_schema, record.result_table, columns
            ).drop()
        shutil.rmtree(self.state_dir / "views" / name, ignore_errors=True)
        self.catalog.delete(name)
        if not self.views:
            self.reader.drop()
        else:
            needed = sorted({t for v in self.views.values() for t in v.inputs})
            self.reader.set_tables(needed)

    def close(self) -> None:
        for view in self.views.values():
            view.close()
        self.views.clear()
        self.reader.close()
        self.conn.close()
        self.sink_conn.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
