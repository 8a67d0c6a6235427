"""The Spark runtime end to end on a real local SparkSession, real Postgres and real rocksdict
state: population as a Spark job, the views as one Structured Streaming query, a writer active
while the queries run (SIGKILL of the streaming process and its restart: the Spark kill matrix,
``tests/reliability/test_kill_matrix.py``). After every catch-up
each result table equals its query run by Postgres (multisets, EXCEPT ALL both ways)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from engine.engine import Engine
from tests.e2e.test_engine_oracle_many import QUICK, Workload, diff_counts, run_engine_oracle
from tests.engine_running import running

pytestmark = pytest.mark.slow

# views of the planner's oracle run on Spark: every family of constructs
SPARK_VIEWS = [
    "expr_case",
    "join_inner",
    "join_four_way",
    "join_left",
    "agg_basic",
    "agg_count_distinct",
    "agg_having",
    "agg_min_max_deletes",
    "agg_left_join_count",
    "except_all",
    "subquery_not_in_nulls",
    "subquery_exists",
    "subquery_scalar_correlated",
    "limit_over_aggregate",
    "window_top_k_per_group",
]

STREAM_VIEWS = {
    "order_totals": "SELECT c.name, count(*) AS n, sum(o.qty) AS qty FROM orders o "
    "JOIN customers c ON c.id = o.customer_id GROUP BY c.name",
    "big_orders": "SELECT id, qty FROM orders WHERE qty > 5",
    "customers_without_orders": "SELECT c.id FROM customers c WHERE NOT EXISTS "
    "(SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
}


def check(conn, views: dict[str, str]) -> None:
    bad = {n: d for n, d in ((n, diff_counts(conn, n, q)) for n, q in views.items()) if d != (0, 0)}
    assert not bad, f"result tables differ from their queries (missing, extra): {bad}"


def test_planner_views_on_spark(spark, pg_dsn, tmp_path):
    assert len(SPARK_VIEWS) >= 15 and set(SPARK_VIEWS) <= set(QUICK)
    during, truncates = run_engine_oracle(
        pg_dsn, tmp_path / "state", SPARK_VIEWS, batches=3, seed=41, runner="spark"
    )
    assert during > 0 and truncates > 0


def test_streaming_queries_keep_up_with_a_writer(spark, pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        work = Workload(conn, 5)
        work.setup()
        with Engine(pg_dsn, tmp_path / "state", runner="spark", trigger_ms=50) as eng:
            for name, sql in STREAM_VIEWS.items():
                eng.create_view(name, sql)
            eng.catch_up(120)  # starts the streaming queries
            check(conn, STREAM_VIEWS)
            stop = threading.Event()

            def writer() -> None:
                with psycopg.connect(pg_dsn, autocommit=True) as wconn:
                    w = Workload(wconn, 6)
                    w.models = work.models
                    while not stop.is_set():
                        w.transaction(3)
                        work.committed += 1

            t = threading.Thread(target=writer)
            t.start()
            time.sleep(12)
            # a slow or busy machine makes slow batches: the writer goes on until three have run
            deadline = time.monotonic() + 180
            while len(eng.views["order_totals"].stream.metrics) < 3:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            stop.set()
            t.join()
            eng.catch_up(120)
            check(conn, STREAM_VIEWS)
            metrics = list(eng.views["order_totals"].stream.metrics)
            # the queries ran while the writer did (not only in the final catch-up), and under
            # load batches grew: far fewer batches than transactions
            assert len(metrics) >= 3
            assert max(m.transactions for m in metrics) > 1
            assert len(metrics) < sum(m.transactions for m in metrics) / 2
            status = {s.name: s for s in eng.list_views()}
            assert all(s.phase == "running" and s.lag_ms == 0 for s in status.values())


def test_spark_views_keep_within_the_engines_memory_budget(spark, pg_dsn, tmp_path, monkeypatch):
    """The Spark runner applies its micro-batches on the driver, in the engine's process: its
    views' state lives within the engine's budget (``INCVIEW_MEMORY_MB``: one block cache, the
    memtables and the collections' caches its shares), populated by a Spark job and kept up to
    date by the streaming query, and every view stays exactly its query with the smallest budget
    and memtables of 64 kB (many flushes)."""
    import engine.dataflow.state.memory_budget as memory_budget
    from engine.memory_setting import MEMORY_MB_ENV

    monkeypatch.setenv(MEMORY_MB_ENV, "32")
    monkeypatch.setattr(memory_budget, "MIN_MEMTABLE", 64 << 10)  # RocksDB's least
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        work = Workload(conn, 13)
        work.setup()
        with Engine(pg_dsn, tmp_path / "state", runner="spark", trigger_ms=50) as eng:
            budget = eng.memory_budget
            assert budget is not None and budget.total_bytes == 32 << 20
            for name, sql in STREAM_VIEWS.items():
                eng.create_view(name, sql)
            check(conn, STREAM_VIEWS)
            stores = [eng.views[name].store for name in STREAM_VIEWS]
            assert all(s._cache is budget.block_cache for s in stores)
            assert all(s._memtable_size == budget.memtable_size for s in stores)
            caches = [c for s in stores for c in s._caches]
            assert caches and budget.caches == len(caches)
            budget.rebalance()  # caches emptied after their populations, none filling: equal parts
            assert {c.cache_bytes for c in caches if hasattr(c, "cache_bytes")} == {
                budget.cache_share
            }
            for _ in range(6):
                for _ in range(4):
                    work.transaction(12)
                eng.catch_up(120)
                check(conn, STREAM_VIEWS)
            assert eng._shared_stream is not None and eng._shared_stream.active  # on Spark
            status = {s.name: s for s in eng.list_views()}
            assert all(s.phase == "running" for s in status.values()), status


def test_population_through_spark_equals_the_in_process_one(spark, pg_dsn, tmp_path, monkeypatch):
    import engine.spark.population as population

    monkeypatch.setattr(population, "MIN_SLICE_BLOCKS", 2)  # many slices per table
    sql = STREAM_VIEWS["order_totals"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        work = Workload(conn, 9)
        work.setup()
        conn.execute(
            "INSERT INTO orders (id, customer_id, qty) SELECT 10000 + i, i % 7, i % 13 FROM generate_series(1, 20000) i"
        )
        with Engine(pg_dsn, tmp_path / "spark", runner="spark") as on_spark:
            from engine.postgres.snapshot import snapshot_reader

            with snapshot_reader(pg_dsn) as reader:
                orders = on_spark.sources.lookup("public", "orders")
                assert len(population.plan_slices(reader, [(orders, ("id",), None)], 2)) > 1
            on_spark.create_view("totals_spark", sql)
            with Engine(pg_dsn, tmp_path / "local", runner="local", views=[]) as local:
                local.create_view("totals_local", sql)
                same = conn.execute(
                    "SELECT (SELECT count(*) FROM (TABLE totals_spark EXCEPT ALL TABLE totals_local) a)"
                    " + (SELECT count(*) FROM (TABLE totals_local EXCEPT ALL TABLE totals_spark) b)"
                ).fetchone()[0]
                assert same == 0
                assert conn.execute("SELECT count(*) FROM totals_spark").fetchone()[0] > 0
                # both states are right: the same changes keep both equal to the query
                for _ in range(5):
                    work.transaction(10)
                on_spark.catch_up(120)
                local.catch_up(60)
                check(conn, {"totals_spark": sql, "totals_local": sql})


def test_population_reads_on_the_driver_with_a_local_master(spark, pg_dsn, tmp_path, monkeypatch):
    """``spark.incview.populationReads`` = auto on a local master: the snapshot is read in the
    driver's process (no Spark job: the read is not even importable), then the view streams on
    Spark like any other. A value other than auto/driver/executors is refused, named."""
    import engine.spark.population as population
    from engine.errors import ViewError
    from engine.spark_runner import POPULATION_READS_CONF

    def no_spark_job(*args, **kwargs):
        raise AssertionError("population read by Spark tasks")

    monkeypatch.setattr(population, "read_sources", no_spark_job)
    sql = STREAM_VIEWS["order_totals"]
    spark.conf.set(POPULATION_READS_CONF, "auto")
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            work = Workload(conn, 11)
            work.setup()
            with Engine(pg_dsn, tmp_path / "state", runner="spark") as eng:
                eng.create_view("totals_driver", sql)
                check(conn, {"totals_driver": sql})
                for _ in range(5):
                    work.transaction(10)
                eng.catch_up(120)
                check(conn, {"totals_driver": sql})
                spark.conf.set(POPULATION_READS_CONF, "cluster")
                with pytest.raises(ViewError, match="populationReads must be auto, driver or exec"):
                    eng.create_view("refused", sql)
                assert "refused" not in eng.views
                assert conn.execute("SELECT to_regclass('refused')").fetchone()[0] is None
                assert "refused" not in {v.name for v in eng.list_views()}
    finally:
        spark.conf.set(POPULATION_READS_CONF, "executors")


def test_views_created_and_dropped_in_sql_on_spark(spark, pg_dsn, tmp_path):
    """``incview run`` on Spark answers CALL incview.create_view while a writer runs: the view
    is populated by a Spark job and joins the engine's one streaming query (caught up first
    with what was committed since its snapshot) without restarting it; the view already running
    goes on; CALL drop_view takes the view out, and the query still serves the other."""
    views = {name: STREAM_VIEWS[name] for name in ("order_totals", "big_orders")}
    with (
        psycopg.connect(pg_dsn, autocommit=True) as conn,
        psycopg.connect(pg_dsn, autocommit=True) as writer_conn,
    ):
        work = Workload(writer_conn, 7)
        work.setup()
        with Engine(pg_dsn, tmp_path / "state", runner="spark", trigger_ms=50) as eng:
            eng.create_view("order_totals", views["order_totals"])
            with running(eng) as run:
                deadline = time.monotonic() + 180
                while eng._shared_stream is None or not eng._shared_stream.active:
                    assert time.monotonic() < deadline and not run.failure, run.failure
                    time.sleep(0.1)
                query_id = eng._shared_stream.query.id
                stop = threading.Event()

                def write() -> None:
                    while not stop.is_set():
                        work.transaction(3)
                        time.sleep(0.05)

                writer = threading.Thread(target=write)
                writer.start()
                try:
                    conn.execute("SET incview.command_timeout = 300")
                    conn.execute(
                        "CALL incview.create_view(%s, %s)", ("big_orders", views["big_orders"])
                    )
                    time.sleep(1.0)  # changes after the new view joined
                finally:
                    stop.set()
                    writer.join()
                deadline = time.monotonic() + 180
                while any(diff_counts(conn, n, q) != (0, 0) for n, q in views.items()):
                    assert time.monotonic() < deadline and not run.failure, run.failure
                    time.sleep(0.5)
                assert eng.views["big_orders"].stream.active  # a member of the running query
                assert eng._shared_stream.query.id == query_id  # not restarted
                assert [q.name for q in spark.streams.active] == ["incview"]  # one for both
                conn.execute("CALL incview.drop_view('big_orders')")
                assert conn.execute("SELECT to_regclass('big_orders')").fetchone() == (None,)
                assert set(eng._shared_stream.members) == {"order_totals"}
                for _ in range(5):
                    work.transaction(3)
                deadline = time.monotonic() + 180
                while diff_counts(conn, "order_totals", views["order_totals"]) != (0, 0):
                    assert time.monotonic() < deadline and not run.failure, run.failure
                    time.sleep(0.5)
                assert eng._shared_stream.query.id == query_id
            assert not spark.streams.active  # run's end stopped the query


def test_column_types_on_spark(spark, pg_dsn, tmp_path):
    """uuid, jsonb, arrays, bytea, inet, enums and domains through Spark population and the
    streaming queries' CDC (tests/e2e/test_column_types.py runs them all on the local runner)."""
    import random

    from tests.e2e import test_column_types as types

    views = {
        n: types.VIEWS[n]
        for n in ("all_cols", "group_many", "json_get", "array_index", "array_agg", "to_text")
    }
    rng = random.Random(19)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(types.DDL)
        keys: set[int] = set()
        next_key = types.INSERT_FIRST_KEY
        for _ in range(3):
            next_key = types.random_round(conn, rng, keys, next_key)
        with Engine(pg_dsn, tmp_path / "state", runner="spark", trigger_ms=50) as eng:
            for name, sql in views.items():
                eng.create_view(name, sql)
            check(conn, views)
            for _ in range(3):
                next_key = types.random_round(conn, rng, keys, next_key)
                eng.catch_up(120)
                check(conn, views)
