"""Fault: Postgres restarts (fast and immediate shutdown) while ``incview run`` and ``catch_up``
run. The long-lived process must keep running, and once the server is back every view must
equal its query again, with nothing lost or applied twice (the result table is compared with
the query as multisets after every restart).

The test has its own Postgres cluster (restarting the session's shared one would break the
other tests' connections), with ``synchronous_commit = on``: the test clusters' default (off)
lets an immediate shutdown lose transactions whose commit was already acknowledged, which no
client can survive, incview or any other.
"""

from __future__ import annotations

import random
import signal
import threading
import time

import psycopg
import pytest

from engine import Engine
from tests.e2e.test_engine_oracle import diff_rows
from tests.engine_running import running
from tests.postgres_server import PostgresServer
from tests.reliability.incview_process import incview_run
from tests.reliability.runners import RUNNERS, use_runner

pytestmark = pytest.mark.slow

VIEWS = {
    "totals": "SELECT customer, count(*) AS n, sum(amount) AS total, avg(amount) AS mean "
    "FROM orders GROUP BY customer",
    "big_orders": "SELECT id, customer, amount FROM orders WHERE amount > 50",
}


@pytest.fixture(scope="module")
def server():
    srv = PostgresServer(settings={"synchronous_commit": "on"}).start()
    yield srv
    srv.stop()


@pytest.fixture
def dsn(server):
    """A fresh database of the restartable cluster, dropped after the test (with its slot:
    slot names are cluster-wide)."""
    name = server.create_database("restart")
    yield server.dsn_for(name)
    server.drop_database(name)


def restart(srv: PostgresServer, mode: str, down_s: float = 1.0) -> None:
    """Stop the cluster with ``pg_ctl stop -m mode``, stay down ``down_s``, start it again."""
    assert srv.server is not None
    srv.server._run("pg_ctl", "stop", "-D", srv.data_dir, "-m", mode, "-w", "-t", "60")
    time.sleep(down_s)
    srv.server.start()
    try:
        psycopg.connect(srv.dsn, connect_timeout=10).close()
    except psycopg.OperationalError as e:
        raise AssertionError(
            f"the restarted server does not answer: {e}\n{srv.server.log_tail()}"
        ) from e


def connect_retrying(dsn: str, timeout_s: float = 30) -> psycopg.Connection:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def write(conn: psycopg.Connection, rng: random.Random, next_id: list[int], n: int = 5) -> None:
    for _ in range(n):
        with conn.transaction():
            for _ in range(rng.randint(1, 4)):
                op = rng.random()
                if op < 0.6:
                    next_id[0] += 1
                    conn.execute(
                        "INSERT INTO orders VALUES (%s, %s, %s)",
                        (next_id[0], rng.randrange(6), rng.randrange(1, 10000) / 100),
                    )
                elif op < 0.8:
                    conn.execute(
                        "UPDATE orders SET amount = amount + 1 WHERE id = "
                        "(SELECT id FROM orders ORDER BY random() LIMIT 1)"
                    )
                else:
                    conn.execute(
                        "DELETE FROM orders WHERE id = (SELECT id FROM orders ORDER BY random() LIMIT 1)"
                    )


def wait_equal(dsn: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                last = {name: diff_rows(conn, name, sql) for name, sql in VIEWS.items()}
            if all(d == (0, 0) for d in last.values()):
                return
        except psycopg.OperationalError as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(f"the views did not catch up within {timeout_s} s: {last}")


def setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer int, amount numeric(10,2))")
        conn.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
        conn.execute(
            "INSERT INTO orders SELECT i, i % 6, (i * 37 % 10000) / 100.0 FROM generate_series(1, 200) i"
        )


def test_incview_run_survives_postgres_restarts(server, dsn, tmp_path):
    rng = random.Random(7)
    setup(dsn)
    state = tmp_path / "state"
    with Engine(dsn, state, runner="local") as eng:
        for view, sql in VIEWS.items():
            eng.create_view(view, sql)
    next_id = [1000]
    with incview_run(dsn, state, tmp_path / "run.log") as proc:
        for mode in ("fast", "immediate", "fast"):
            with connect_retrying(dsn) as conn:
                write(conn, rng, next_id)
            wait_equal(dsn)
            restart(server, mode)
            assert proc.poll() is None, (tmp_path / "run.log").read_text()
            try:
                conn = connect_retrying(dsn)
            except psycopg.OperationalError as e:
                raise AssertionError(f"{e}\n{server.server.log_tail()}") from e
            with conn:
                write(conn, rng, next_id)
            wait_equal(dsn)
            assert proc.poll() is None, (tmp_path / "run.log").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "run.log").read_text()
    assert "the database is unreachable" in (tmp_path / "run.log").read_text()


@pytest.mark.parametrize("runner", RUNNERS)
def test_catch_up_recovers_after_a_restart(server, dsn, tmp_path, request, runner):
    """catch_up() called while the server is down waits for it within its timeout and then
    applies everything exactly once; so does a call after an immediate restart (on Spark:
    the streaming queries that died of it are restarted, not taken for internal errors)."""
    rng = random.Random(3)
    setup(dsn)
    next_id = [1000]
    with Engine(dsn, tmp_path / "state", runner=use_runner(request, runner)) as eng:
        for view, sql in VIEWS.items():
            eng.create_view(view, sql)
        with psycopg.connect(dsn, autocommit=True) as conn:
            write(conn, rng, next_id)
        eng.catch_up()
        wait_equal(dsn, 5)
        restart(server, "immediate", down_s=0.5)
        with connect_retrying(dsn) as conn:
            write(conn, rng, next_id)
        eng.catch_up(timeout_s=60)
        wait_equal(dsn, 5)

        with psycopg.connect(dsn, autocommit=True) as conn:
            write(conn, rng, next_id)
        assert server.server is not None
        server.server._run("pg_ctl", "stop", "-D", server.data_dir, "-m", "fast", "-w")
        back = threading.Timer(2.0, server.server.start)
        back.start()
        try:
            eng.catch_up(timeout_s=60)  # waits out the outage
        finally:
            back.join()
        wait_equal(dsn, 5)
        assert {s.phase for s in eng.list_views()} == {"running"}
        # an outage is waited out, never taken for a bug (which would re-populate)
        assert not [s.last_error for s in eng.list_views() if s.last_error], eng.list_views()


def test_spark_runner_survives_postgres_restarts(spark, server, dsn, tmp_path):
    """``run()`` on the Spark runner (the test session's SparkSession) through a fast and an
    immediate restart: the streaming queries that die of the outage are restarted once the
    server is back, from the views' committed state; nothing lost or doubled."""
    rng = random.Random(11)
    setup(dsn)
    next_id = [1000]
    with Engine(dsn, tmp_path / "state", runner="spark") as eng:
        for view, sql in VIEWS.items():
            eng.create_view(view, sql)
        with running(eng, heartbeat_s=0.5) as run:
            for mode in ("fast", "immediate"):
                with connect_retrying(dsn) as conn:
                    write(conn, rng, next_id)
                wait_equal(dsn, 120)
                restart(server, mode)
                assert run.thread.is_alive(), run.failure
                with connect_retrying(dsn) as conn:
                    write(conn, rng, next_id)
                wait_equal(dsn, 120)
                assert run.thread.is_alive(), run.failure
        assert {s.phase for s in eng.list_views()} == {"running"}
        with psycopg.connect(dsn) as conn:  # a clean stop clears the job's pid
            pids = conn.execute("SELECT count(runner_pid) FROM incview.views").fetchone()[0]
        assert pids == 0
