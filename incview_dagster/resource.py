"""``IncViewResource``: the Dagster resource through which assets, sensors and checks reach incview.

One ``ConfigurableResource`` holds what every part needs: the database (``dsn``; None runs the
embedded PostgreSQL under ``state_dir``, started on first use and left running for the streaming
jobs), the state directory, the runner (``spark`` or ``local``) and extra Spark conf. Everything is
built lazily: constructing the resource (at definition load, in the sensor daemon) touches
nothing; an ``Engine`` opens only the views a caller names (RocksDB state is single-process), and
the SparkSession exists only in a process that populates on Spark (``spark_session``, handed out
through dagster-pyspark's ``LazyPySparkResource`` once incview's own builder configured it).
``populate`` is the population/recovery step of a view asset: stop the view's streaming job,
create the view (or re-populate it, or re-define it when its SQL changed), start the job again;
``resume`` is the cheaper recovery that restarts the job from the view's state.
This module must not build Dagster definitions or decide when to populate (that is the sensors').

Example::

    from incview_dagster import IncViewResource

    incview = IncViewResource(dsn="postgresql://app@db:5432/shop", state_dir="/var/lib/incview")
    with incview.connect() as conn:
        print(conn.execute("SELECT name, phase FROM incview.views").fetchall())
"""

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from engine import ViewError, ViewRecord, view_records
from incview_dagster.jobs import COMMANDER_JOB, StreamingJobLauncher, StreamingJobStatus
from incview_dagster.lineage import source_tables
from incview_dagster.view import IncView

_EMBEDDED: dict[Path, Any] = {}  # state dir -> its started EmbeddedPostgres (one per process)


def embedded_dsn(state_dir: str | Path) -> str:
    """DSN of the embedded PostgreSQL under ``state_dir`` (started if it does not run). It is
    never stopped from here: streaming jobs and other Dagster processes use it too."""
    from engine import EmbeddedPostgres

    directory = (Path(state_dir) / "postgres").absolute()
    server = _EMBEDDED.get(directory)
    if server is None:
        server = EmbeddedPostgres(directory).start()
        _EMBEDDED[directory] = server
    return server.dsn


@dataclass(frozen=True)
class PopulationReport:
    """What ``IncViewResource.populate`` did, for the asset's metadata."""

    view: str
    action: str  # created | repopulated | redefined | resumed
    rows: int
    seconds: float
    explain: str
    result_columns: list[tuple[str, str]]
    state_dir: Path
    job: StreamingJobStatus
    stopped_job: bool
    spark_startup_s: float | None = None  # getting the SparkSession (runner spark); not in seconds
    lag_ms: float | None = None  # the view's lag when the run ended (Engine.list_views)
    state_bytes: int | None = None  # the size of its operators' state then


class IncViewResource(ConfigurableResource):
    """Connection to incview: database, state directory, runner and Spark settings."""

    dsn: str | None = Field(
        default=None,
        description="Postgres connection string; None: the embedded PostgreSQL under state_dir",
    )
    state_dir: str = Field(
        default=".incview", description="views' state, streaming jobs' pid files and logs"
    )
    runner: str = Field(
        default="spark", description="spark (population and streaming on Spark) or local"
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description="extra Spark conf (spark.master, memory, ...)"
    )
    job_stop_timeout_s: float = Field(
        default=90.0, description="how long a streaming job gets to stop on SIGTERM"
    )
    memory_mb: int | None = Field(
        default=None,
        description="memory budget (MB) for the views' state in each process (a streaming job "
        "runs one view); None: INCVIEW_MEMORY_MB if set, else none",
    )

    _lazy_spark: LazyPySparkResource | None = PrivateAttr(default=None)

    # -- database ------------------------------------------------------------------------------
    def get_dsn(self) -> str:
        """The configured DSN, or the embedded server's (started on first use)."""
        return self.dsn or embedded_dsn(self.state_path)

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir).absolute()

    def connect(self) -> psycopg.Connection:
        """A new autocommit connection to the views' database."""
        return psycopg.connect(self.get_dsn(), autocommit=True)

    def view_records(self) -> dict[str, ViewRecord]:
        """Every view of the catalog (``incview.views``) by name: the state shared with the jobs."""
        with self.connect() as conn:
            return {r.name: r for r in view_records(conn)}

    @contextlib.contextmanager
    def open_engine(self, views: list[str] | None = None) -> Iterator[Any]:
        """An ``engine.Engine`` opening only ``views`` (None: all views; [] none). Close it
        before a streaming job takes a view over (RocksDB state is single-process)."""
        from engine import Engine

        eng = Engine(
            self.get_dsn(),
            self.state_path,
            runner=self.runner,
            views=views,
            spark_conf=dict(self.spark_conf),
            memory_mb=self.memory_mb,
        )
        try:
            yield eng
        finally:
            eng.close()

    # -- Spark ---------------------------------------------------------------------------------
    @property
    def spark_session(self) -> Any:
        """The process's SparkSession, created on first access: incview's builder
        (``engine.spark.session``: Java discovery, loopback, scratch dirs under the state dir,
        incview's data sources) with ``spark_conf``, handed out by dagster-pyspark's
        ``LazyPySparkResource`` (which returns the active session)."""
        if self._lazy_spark is None:
            from engine import spark_session

            spark_session(dict(self.spark_conf), self.state_path)
            self._lazy_spark = LazyPySparkResource(spark_config=dict(self.spark_conf))
        return self._lazy_spark.spark_session

    # -- streaming jobs ------------------------------------------------------------------------
    def streaming_jobs(self) -> StreamingJobLauncher:
        """The launcher of the views' long-lived ``incview run --view NAME`` processes."""
        return StreamingJobLauncher(
            self.state_path,
            self.get_dsn(),
            self.runner,
            dict(self.spark_conf),
            memory_mb=self.memory_mb,
        )

    def start_commander(self) -> StreamingJobStatus:
        """Start the commander's process (``incview_dagster.commander_job``: it answers ``CALL
        incview.create_view``) unless it runs; its status."""
        jobs = self.streaming_jobs()
        with jobs.lock(COMMANDER_JOB):
            status = jobs.status(COMMANDER_JOB)
            return status if status.alive else jobs.start(COMMANDER_JOB)

    # -- population / recovery -----------------------------------------------------------------
    def populate(self, view: IncView, log: Any = None) -> PopulationReport:
        """Population or recovery of ``view`` (the body of its asset), under the view's lock:

        1. stop the view's streaming job (it holds the state);
        2. in this process, with an Engine opening only this view: ``create_view`` when the
           catalog lacks it (or lacks a finished creation), ``repopulate`` when it exists with
           the same SQL (recovery: fresh state and snapshot, the result table corrected by
           difference), drop and create when its SQL changed;
        3. close the Engine and start the streaming job, detached.
        """

        def act(eng: Any) -> str:
            record = eng.catalog.get(view.name)
            if record is None:
                eng.create_view(view.name, view.sql)
                return "created"
            if record.sql != view.sql or view.name not in eng.views:
                # re-defined, or a creation that was interrupted (not openable)
                self._refuse_if_read_by_others(eng, view)
                eng.drop_view(view.name)
                eng.create_view(view.name, view.sql)
                return "redefined" if record.sql != view.sql else "created"
            eng.repopulate(view.name)
            return "repopulated"

        return self._restart_job(view, log, act, spark=self.runner == "spark")

    def resume(self, view: IncView, log: Any = None) -> PopulationReport:
        """Recovery that keeps the view's state: restart its streaming job, under its lock.

        A killed job or a failed sink write loses nothing: the state (RocksDB) and the result
        table commit with the view's LSN, exactly once, so the restarted job applies what the
        view has not applied yet (seed 003: a database-side error is retried, not re-populated).
        Opening the view here first checks that its state opens (a run that fails on it is
        followed by the recovery sensor's re-population). Falls back to ``populate`` when the
        view cannot resume: not in the catalog, its SQL changed, or its population never
        finished."""
        record = self.view_records().get(view.name)
        if record is None or record.sql != view.sql or record.phase == "populating":
            if log is not None:
                log.info(f"view {view.name} cannot resume (not populated as declared): populating")
            return self.populate(view, log)
        return self._restart_job(view, log, lambda eng: "resumed", spark=False)

    def _restart_job(
        self, view: IncView, log: Any, act: Callable[[Any], str], *, spark: bool
    ) -> PopulationReport:
        """Under the view's lock: stop its streaming job, ``act`` on an Engine opening only the
        view (returns what it did), close the Engine, start the job again, detached. With
        ``spark`` the SparkSession is built first (the Engine's population job runs on it)."""
        jobs = self.streaming_jobs()
        with jobs.lock(view.name):
            stopped = jobs.stop(view.name, self.job_stop_timeout_s)
            if stopped and log is not None:
                log.info(f"stopped the streaming job of {view.name}")
            spark_startup_s = None
            if spark:
                started = time.monotonic()
                session = self.spark_session
                spark_startup_s = time.monotonic() - started
                if log is not None:
                    log.info(
                        f"SparkSession ready ({session.sparkContext.master}) after "
                        f"{spark_startup_s:.1f} s"
                    )
            start = time.monotonic()
            with self.open_engine(views=[view.name]) as eng:
                action = act(eng)
                seconds = time.monotonic() - start
                if log is not None:
                    log.info(f"{action} view {view.name} in {seconds:.2f} s")
                explain = eng.explain(view.sql)
                rows, columns = _result_table_facts(eng.conn, view)
                status = next((s for s in eng.list_views() if s.name == view.name), None)
            job = jobs.start(view.name)
            if log is not None:
                log.info(
                    f"started the streaming job of {view.name}: pid {job.pid}, log {job.log_path}"
                )
        return PopulationReport(
            view.name,
            action,
            rows,
            seconds,
            explain,
            columns,
            self.state_path / "views" / view.name,
            job,
            stopped,
            spark_startup_s,
            status.lag_ms if status else None,
            status.state_bytes if status else None,
        )

    @staticmethod
    def _refuse_if_read_by_others(eng: Any, view: IncView) -> None:
        readers = []
        for record in eng.catalog.all():
            if record.name == view.name:
                continue
            try:
                tables = source_tables(record.sql)
            except Exception:
                continue
            if (view.result_schema, view.result_table) in tables:
                readers.append(record.name)
        if readers:
            raise ViewError(
                f"view {view.name}: its SQL changed, which re-creates its result table, but "
                f"view(s) {', '.join(readers)} read it: drop or re-define those first"
            )


def _result_table_facts(
    conn: psycopg.Connection, view: IncView
) -> tuple[int, list[tuple[str, str]]]:
    """(row count, [(column, Postgres type)]) of the view's result table."""
    rows = conn.execute(
        psycopg.sql.SQL("SELECT count(*) FROM {}").format(
            psycopg.sql.Identifier(view.result_schema, view.result_table)
        )
    ).fetchone()[0]
    columns = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (psycopg.sql.Identifier(view.result_schema, view.result_table).as_string(conn),),
    ).fetchall()
    return int(rows), [(c, t) for c, t in columns]
