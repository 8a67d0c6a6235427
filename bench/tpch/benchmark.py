"""One benchmark run at one scale factor: incview vs Postgres on the same data, view by view.

Steps (all on one database, in this order):
  1. generate and load the data (``datagen``, ``load``);
  2. writer baseline: a writer process commits RF1/RF2/UF streams with no slot and no engine;
  3. Postgres: ``CREATE TABLE AS`` (timed, dropped) and ``CREATE MATERIALIZED VIEW`` (timed,
     kept for REFRESH) per view;
  4. incview: ``create_view`` per view, one after the other (population time);
  5. the writer with incview attached, paired: rounds of RF1/RF2/UF streams committed with the
     engine applying each before the next ("attached, the engine caught up") alternate with
     rounds committed while the engine pauses ("paused": the slot there, nothing applied);
     then refresh streams, ``reps`` times each of RF1, RF2, UF: the stream's transaction
     commits, then ``catch_up`` is timed (commit -> every view caught up), with ``PhaseTimes``
     giving each view's time alone; then ``REFRESH MATERIALIZED VIEW`` of every view is timed
     on that data;
  6. sustained: a writer process commits ``rounds`` x (RF1, RF2, UF) back to back while the
     engine runs ``catch_up`` in a loop; changes/s = rows changed / (first commit -> all
     applied); the writer's transaction times are those "with incview attached";
  7. every view is compared with its query (EXCEPT ALL both ways) and ``list_views`` gives the
     state size; peak RSS comes from ``MemorySampler``.
A view the engine refuses (``create_view`` raises) is recorded with its error and skipped.
With ``runner="spark"`` the views run as concurrent streaming queries, so only the catch_up of
all views is timed (per-view figures: run with one view, ``--views Q18``).
This module measures and returns ``RunResult``; printing and files are ``report``'s.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench.tpch.datagen import generate_base_csv
from bench.tpch.load import load
from bench.tpch.phase_times import PhaseTimes
from bench.tpch.process_memory import MemorySampler, reset_high_water
from bench.tpch.queries import ViewQuery
from bench.tpch.schema import TABLES
from bench.tpch.settle import settle
from bench.tpch.streams import KINDS, RefreshStreams, Stream
from bench.tpch.writer import start_writer
from engine.engine import Engine

#: the writer's transactions without incview, attached and paused: this many of each
#: kind (three were too few: RF1's attached median moved 30 -> 46 ms between two runs)
WRITER_REPS = 7
#: the idle gap before step 4a's paused streams (the engine's background slot advance ends)
PAUSE_GAP_S = 0.5


@dataclass
class ViewResult:
    view: ViewQuery
    error: str | None = None  # create_view refused it
    populate_s: float | None = None
    populate_peak_mb: float | None = None  # engine process peak RSS during its population
    ctas_s: float | None = None
    cmv_s: float | None = None
    apply_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    refresh_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    rows: int | None = None
    state_bytes: int | None = None
    equal: bool | None = None
    diff: str = ""


@dataclass
class RunResult:
    sf: float
    runner: str
    generator: str = ""
    table_rows: dict[str, int] = field(default_factory=dict)
    load_s: float = 0.0
    views: list[ViewResult] = field(default_factory=list)
    all_apply_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    stream_changes: dict[str, list[int]] = field(default_factory=lambda: {k: [] for k in KINDS})
    breakdowns: dict[str, str] = field(default_factory=dict)  # kind -> median run's phases
    writer_without: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    writer_with: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    #: step 4a's stream transactions: incview attached, the engine caught up before each
    writer_idle: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    #: step 4a's paired baseline: the slot there, the engine paused (not applying)
    writer_paused: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    #: seconds waited for the machine to settle before the writer's times (``settle``)
    settle_s: dict[str, float] = field(default_factory=dict)
    sustained_changes: int = 0
    sustained_s: float = 0.0
    writer_s: float = 0.0
    peak_mb: dict[str, float] = field(default_factory=dict)
    state_bytes: int = 0
    #: the TPC-H tables' size in Postgres (heap, TOAST and indexes), the yardstick of the state
    source_bytes: int = 0
    #: the engine's memory budget for the views' state (``Engine(memory_mb=...)``; 0: none)
    memory_mb: int = 0
    spark_start_s: float = 0.0  # the SparkSession's start, before (not in) any population
    spark_first_batch_s: float = 0.0  # the streaming query's start and first batch

    @property
    def all_equal(self) -> bool:
        return all(v.equal for v in self.views if v.error is None)

    @property
    def refused(self) -> list[ViewResult]:
        return [v for v in self.views if v.error is not None]


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def timed(conn: psycopg.Connection, sql: str) -> float:
    t0 = time.perf_counter()
    conn.execute(sql)
    return time.perf_counter() - t0


def compare(conn: psycopg.Connection, v: ViewQuery) -> tuple[bool, str]:
    """Multiset equality of the result table and the query (EXCEPT ALL both ways)."""
    missing, extra = conn.execute(
        f"SELECT (SELECT count(*) FROM (({v.sql}) EXCEPT ALL SELECT * FROM {v.name}) a), "
        f"(SELECT count(*) FROM (SELECT * FROM {v.name} EXCEPT ALL ({v.sql})) b)"
    ).fetchone()
    return missing == 0 and extra == 0, f"{missing} rows missing, {extra} extra"


def run_writer(
    dsn: str,
    streams: list[Stream],
    engine: Engine | None = None,
    sampler: MemorySampler | None = None,
):
    """Commit ``streams`` from a writer process; with ``engine``, catch up in a loop meanwhile.
    Returns (writer report, seconds from the first commit's start to everything applied)."""
    proc, queue = start_writer(dsn, streams)
    if sampler is not None:
        sampler.exclude.add(proc.pid)  # the writer is not the engine
    report = None
    while report is None:
        if engine is not None:
            engine.catch_up(timeout_s=3600)
        else:
            time.sleep(0.05)
        if not queue.empty():
            report = queue.get()
        elif not proc.is_alive() and queue.empty():
            raise RuntimeError(f"the writer process died (exit code {proc.exitcode})")
    proc.join()
    if engine is not None:
        engine.catch_up(timeout_s=3600)
    return report, time.time() - report["start"]


def run(
    dsn: str,
    sf: float,
    views: tuple[ViewQuery, ...],
    runner: str = "local",
    reps: int = 3,
    rounds: int = 3,
    char: bool = False,
    work_dir: Path | None = None,
    writer_reps: int | None = None,
    memory_mb: int | None = None,
) -> RunResult:
    """One run (the module docstring's steps); ``writer_reps``: streams of each kind the writer's
    measurements commit (default ``WRITER_REPS``, at least ``reps``); ``memory_mb``: the engine's
    memory budget (``Engine(memory_mb=...)``; None: the environment's, else none)."""
    writer_n = writer_reps if writer_reps is not None else max(reps, WRITER_REPS)
    res = RunResult(sf, runner)
    with tempfile.TemporaryDirectory(prefix="tpch-", dir=work_dir) as tmp:
        tmp_path = Path(tmp)
        conn = psycopg.connect(dsn, autocommit=True)
        t0 = time.perf_counter()
        res.generator = generate_base_csv(sf, tmp_path / "data")
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        res.table_rows = load(conn, tmp_path / "data", char=char)
        res.load_s = time.perf_counter() - t0
        log(
            f"SF {sf:g}: generated ({res.generator}) in {gen_s:.1f} s, loaded in "
            f"{res.load_s:.1f} s: {res.table_rows['orders']:,} orders, "
            f"{res.table_rows['lineitem']:,} lineitems"
        )
        for table in res.table_rows:
            conn.execute(f"DROP MATERIALIZED VIEW IF EXISTS {table}_mv")
        streams = RefreshStreams(sf)

        # 2. Postgres' own answers
        res.views = [ViewResult(v) for v in views]
        for vr in res.views:
            v = vr.view
            conn.execute(f"DROP MATERIALIZED VIEW IF EXISTS {v.name}_mv")
            vr.ctas_s = timed(conn, f"CREATE TABLE {v.name}_ctas AS {v.sql}")
            conn.execute(f"DROP TABLE {v.name}_ctas")
            vr.cmv_s = timed(conn, f"CREATE MATERIALIZED VIEW {v.name}_mv AS {v.sql}")
        log("Postgres CREATE TABLE AS / MATERIALIZED VIEW done")

        # the writer alone (no slot exists yet), measured as the attached writer is in step 4a:
        # a stream's transaction at a time from this process, the tables read by step 2 as
        # population reads them before 4a, the server settled and checkpointed
        res.settle_s["without"] = settle(conn)
        for _ in range(writer_n):
            for kind in KINDS:
                _changed, seconds = streams.next(kind).apply(conn)
                res.writer_without[kind].append(seconds)
        log("writer without incview: " + _writer_line(res.writer_without))

        # 3. population
        sampler = MemorySampler().start()
        engine = Engine(dsn, tmp_path / "state", runner=runner, memory_mb=memory_mb)
        res.memory_mb = engine.memory_budget.total_bytes >> 20 if engine.memory_budget else 0
        try:
            if runner == "spark":  # once per engine, not a view's population: timed apart
                t0 = time.perf_counter()
                engine.spark  # noqa: B018 (the property starts the session)
                res.spark_start_s = time.perf_counter() - t0
                log(f"SparkSession started in {res.spark_start_s:.1f} s")
            for vr in res.views:
                sampler.note_high_water()
                can_reset = reset_high_water()
                t0 = time.perf_counter()
                try:
                    engine.create_view(vr.view.name, vr.view.sql)
                except Exception as e:  # refused or failed: reported, never hidden
                    vr.error = f"{type(e).__name__}: {e}"
                    log(f"{vr.view.label}: create_view FAILED: {vr.error}")
                    continue
                vr.populate_s = time.perf_counter() - t0
                if can_reset:
                    vr.populate_peak_mb = sampler.note_high_water()
                log(
                    f"{vr.view.label}: populated in {vr.populate_s:.2f} s "
                    f"(CREATE TABLE AS {vr.ctas_s:.2f} s), engine peak RSS "
                    f"{vr.populate_peak_mb or 0:,.0f} MB"
                )
            live = [vr for vr in res.views if vr.error is None]
            if runner == "spark":
                # the streaming query's start and first batch (Spark plans the Python source,
                # 1-5 s) once, timed apart: the streams below measure it running; a no-op
                # UPDATE of one lineitem (read by most views) makes that first batch
                t0 = time.perf_counter()
                conn.execute(
                    "UPDATE lineitem SET l_comment = l_comment WHERE (l_orderkey, l_linenumber) "
                    "= (SELECT l_orderkey, l_linenumber FROM lineitem LIMIT 1)"
                )
                engine.catch_up(timeout_s=600)
                res.spark_first_batch_s = time.perf_counter() - t0
                log(
                    f"streaming query started, first batch applied in {res.spark_first_batch_s:.1f} s"
                )
            phases = PhaseTimes(engine)
            # with Spark the views apply inside the shared query's batches: a catch_up's time
            # is not split per view, so only "all views" is reported
            per_view = phases.per_view and runner == "local"

            # 4a. the writer with incview attached, paired: each round commits one stream of
            # each kind with the engine applying it before the next commits (its background
            # slot advance may overlap the next transaction) and one of each kind with the engine
            # paused (the slot there, nothing applied: back to back after an idle gap, applied
            # after the round), the two halves' order alternating, so table growth and a
            # checkpoint's full-page writes weigh on both alike; not in 4b's loop, whose
            # REFRESHes write the views' data just before each stream
            res.settle_s["attached"] = settle(conn)  # the populations' compactions end
            for rnd in range(writer_n):
                for applying in (True, False) if rnd % 2 == 0 else (False, True):
                    if not applying:
                        time.sleep(PAUSE_GAP_S)
                    for kind in KINDS:
                        _changed, seconds = streams.next(kind).apply(conn)
                        (res.writer_idle if applying else res.writer_paused)[kind].append(seconds)
                        if applying:
                            engine.catch_up(timeout_s=3600)
                    if not applying:
                        engine.catch_up(timeout_s=3600)  # the paused half's streams (untimed)
            log("writer with incview paused: " + _writer_line(res.writer_paused))
            log("writer with incview attached: " + _writer_line(res.writer_idle))

            # 4b. refresh streams, one at a time
            for rep in range(reps):
                for kind in KINDS:
                    stream = streams.next(kind)
                    changed, _seconds = stream.apply(conn)
                    phases.reset()
                    t0 = time.perf_counter()  # committed
                    engine.catch_up(timeout_s=3600)
                    total = time.perf_counter() - t0
                    res.all_apply_s[kind].append(total)
                    res.stream_changes[kind].append(changed)
                    if rep == reps // 2:
                        res.breakdowns[kind] = phases.breakdown(total)
                    for vr in live if per_view else []:
                        vr.apply_s[kind].append(phases.alone(vr.view.name, total))
                    for vr in res.views:
                        vr.refresh_s[kind].append(
                            timed(conn, f"REFRESH MATERIALIZED VIEW {vr.view.name}_mv")
                        )
                    log(
                        f"{kind} #{rep + 1}: {changed:,} rows changed; all views caught up "
                        f"{total * 1000:.0f} ms; REFRESH of all views "
                        f"{sum(vr.refresh_s[kind][-1] for vr in live) * 1000:.0f} ms"
                    )

            # 5. sustained, with a concurrent writer
            batch = [streams.next(k) for _ in range(rounds) for k in KINDS]
            report, elapsed = run_writer(dsn, batch, engine, sampler)
            for kind, _n, s in report["times"]:
                res.writer_with[kind].append(s)
            res.sustained_changes = sum(n for _k, n, _s in report["times"])
            res.sustained_s = elapsed
            res.writer_s = report["end"] - report["start"]
            log(
                f"sustained: {res.sustained_changes:,} changes committed in {res.writer_s:.1f} s, "
                f"all applied after {elapsed:.1f} s: "
                f"{res.sustained_changes / elapsed:,.0f} changes/s"
            )
            log("writer with incview catching up: " + _writer_line(res.writer_with))

            # 6. checks and state
            engine.catch_up(timeout_s=3600)
            status = {s.name: s for s in engine.list_views()}
            for vr in live:
                vr.equal, vr.diff = compare(conn, vr.view)
                s = status[vr.view.name]
                vr.rows, vr.state_bytes = s.rows, s.state_bytes
                if not vr.equal:
                    log(f"{vr.view.label}: DIFFERS from its query: {vr.diff}")
            res.state_bytes = sum(vr.state_bytes or 0 for vr in live)
            res.source_bytes = source_bytes(conn)
            log(f"equality checks: {sum(bool(v.equal) for v in live)}/{len(live)} views equal")
            for vr in live:
                engine.drop_view(vr.view.name)
        finally:
            engine.close()
            res.peak_mb = sampler.stop()
            for vr in res.views:
                conn.execute(f"DROP MATERIALIZED VIEW IF EXISTS {vr.view.name}_mv")
            conn.close()
    return res


def source_bytes(conn: psycopg.Connection) -> int:
    """The TPC-H tables' total size in Postgres (``pg_total_relation_size``)."""
    row = conn.execute(
        "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0)::bigint"
        " FROM unnest(%s::text[]) AS t",
        (list(TABLES),),
    ).fetchone()
    return int(row[0])


def _writer_line(times: dict[str, list[float]]) -> str:
    return ", ".join(
        f"{k} median {statistics.median(v) * 1000:.1f} ms (n={len(v)})"
        for k, v in times.items()
        if v
    )
