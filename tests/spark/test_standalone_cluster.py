"""Views on a real Spark standalone cluster (Spark's own master and worker, on loopback).

``incview create-view`` and ``incview run`` run as driver processes with
``INCVIEW_SPARK_MASTER=spark://127.0.0.1:<port>``: population's snapshot slices and the CDC
source's reads run as tasks in the worker's executors. After every round of random DML each
view's result table equals its query (as multisets); the worker is then killed (with its
executors and their Python workers) while changes keep coming, and started again: the streaming
queries wait for an executor and go on, nothing lost or doubled, and ``run`` never stops.
"""

from __future__ import annotations

import random
import signal
import time

import psycopg
import pytest

from tests.e2e.test_engine_oracle import diff_rows, random_transaction, setup_tables
from tests.reliability.incview_process import incview_cli, incview_run
from tests.spark.standalone import StandaloneCluster

pytestmark = pytest.mark.slow

VIEWS = {
    "segments": "SELECT c.segment, count(*) AS n, sum(o.amount) AS total "
    "FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.segment",
    "named": "SELECT o.id, o.amount, c.name FROM orders o LEFT JOIN customers c "
    "ON o.customer_id = c.id WHERE o.amount > 4",
}


def wait_equal(conn: psycopg.Connection, proc, cluster, log, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        last = {name: diff_rows(conn, name, sql) for name, sql in VIEWS.items()}
        if all(d == (0, 0) for d in last.values()):
            return
        assert proc.poll() is None, log.read_text()[-4000:]
        if time.monotonic() > deadline:
            raise AssertionError(
                f"views not equal after {timeout_s} s: {last}\n{log.read_text()[-4000:]}\n"
                f"{cluster.log_tail()}"
            )
        time.sleep(0.5)


def write(conn: psycopg.Connection, rng: random.Random, next_id: list[int], n: int = 15) -> None:
    for _ in range(n):
        random_transaction(conn, rng, next_id)


def test_views_on_a_standalone_cluster_survive_losing_the_worker(pg_server, tmp_path):
    cluster = StandaloneCluster(tmp_path / "cluster").start()
    db = pg_server.create_database()
    dsn = pg_server.dsn_for(db)
    env = {"INCVIEW_SPARK_MASTER": cluster.url}
    state, log = tmp_path / "state", tmp_path / "incview.log"
    rng = random.Random(19)
    try:
        cluster.start_worker()
        with psycopg.connect(dsn, autocommit=True) as conn:
            next_id = setup_tables(conn, rng)
            conn.execute(
                "INSERT INTO orders SELECT i, i % 8, (i % 97) / 4.0, "
                "CASE WHEN i % 3 = 0 THEN 'paid' ELSE 'open' END FROM generate_series(100, 20000) i"
            )
            next_id[0] = 20_000
            for name, sql in VIEWS.items():  # population: snapshot slices on the executors
                proc = incview_cli(
                    dsn, state, log, "create-view", name, sql, runner="spark", env=env
                )
                assert proc.wait(timeout=300) == 0, log.read_text()[-4000:]
            populations = [a for a in cluster.apps() if a["name"] == "incview"]
            assert len(populations) == len(VIEWS), cluster.status()
            for name, sql in VIEWS.items():
                assert diff_rows(conn, name, sql) == (0, 0)

            with incview_run(dsn, state, log, runner="spark", env=env) as proc:
                for _ in range(2):
                    write(conn, rng, next_id)
                    wait_equal(conn, proc, cluster, log)
                running = [a for a in cluster.status()["activeapps"] if a["name"] == "incview"]
                assert len(running) == 1, cluster.status()

                cluster.kill_worker()  # the executors and their Python workers with it
                write(conn, rng, next_id)
                time.sleep(4)  # micro-batches now wait for an executor: reads run on the cluster
                unequal = {name: diff_rows(conn, name, sql) for name, sql in VIEWS.items()}
                assert any(d != (0, 0) for d in unequal.values()), unequal
                assert proc.poll() is None, log.read_text()[-4000:]
                cluster.start_worker()
                wait_equal(conn, proc, cluster, log)
                assert cluster.alive_workers()[0]["coresused"] > 0  # a new executor took over
                write(conn, rng, next_id)
                wait_equal(conn, proc, cluster, log)

                phases = dict(conn.execute("SELECT name, phase FROM incview.views").fetchall())
                assert phases == dict.fromkeys(VIEWS, "running")
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        cluster.stop()
        pg_server.drop_database(db)
