"""Fault: creating the first view while another session sits idle in a transaction that wrote.

The replication slot cannot be created until that transaction ends. The engine says whom it
waits for (the blocking backend's pid, state and age) while it waits, gives up after its
``wait_timeout_s`` with an error naming that backend and leaves nothing behind (no slot,
publication, catalog row, result table or state); the same call works once the transaction
ended, and a blocker that ends within the timeout only delays it.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest

from engine import Engine
from engine.engine import PUBLICATION, SLOT
from engine.postgres.waiting import WaitedTooLong
from tests.e2e.test_engine_oracle import diff_rows
from tests.reliability.runners import RUNNERS, use_runner

SQL = "SELECT customer, count(*) AS n FROM orders GROUP BY customer"


def _setup(conn):
    conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer int, amount numeric(10,2))")
    conn.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
    conn.execute("INSERT INTO orders SELECT i, i % 5, i FROM generate_series(1, 50) i")


def _left_behind(conn, state_dir) -> dict[str, object]:
    one = lambda q, *a: conn.execute(q, a).fetchone()[0]  # noqa: E731
    return {
        "slot": one("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", SLOT),
        "publication": one("SELECT count(*) FROM pg_publication WHERE pubname = %s", PUBLICATION),
        "catalog rows": one("SELECT count(*) FROM incview.views"),
        "result table": one("SELECT to_regclass('public.totals') IS NOT NULL"),
        "state": sorted(p.name for p in (state_dir / "views").glob("*")),
    }


NOTHING = {"slot": 0, "publication": 0, "catalog rows": 0, "result table": False, "state": []}


@pytest.mark.slow
def test_an_idle_transaction_is_named_and_the_wait_ends(pg_conn, pg_dsn, state_dir, caplog):
    _setup(pg_conn)
    idle = psycopg.connect(pg_dsn)  # not autocommit: stays idle in its transaction
    idle.execute("UPDATE orders SET amount = amount + 1 WHERE id = 1")
    idle_pid = idle.info.backend_pid
    try:
        with Engine(pg_dsn, state_dir, runner="local", wait_timeout_s=2) as engine:
            caplog.set_level(logging.WARNING, logger="engine.postgres.waiting")
            started = time.monotonic()
            with pytest.raises(WaitedTooLong) as e:
                engine.create_view("totals", SQL)
            assert 1.5 < time.monotonic() - started < 30
            message = str(e.value)
            assert f"creating the replication slot {SLOT} gave up after waiting 2 s" in message
            assert f"backend pid {idle_pid}" in message and "idle in transaction" in message
            assert "UPDATE orders SET amount" in message
            assert f"pg_terminate_backend({idle_pid})" in message
            assert any(f"backend pid {idle_pid}" in r.getMessage() for r in caplog.records)
            assert _left_behind(pg_conn, state_dir) == NOTHING

            idle.commit()  # the transaction ends: the same call works
            engine.create_view("totals", SQL)
            pg_conn.execute("INSERT INTO orders VALUES (100, 9, 1)")
            engine.catch_up()
            assert diff_rows(pg_conn, "totals", SQL) == (0, 0)
    finally:
        idle.close()


def test_a_blocker_that_ends_in_time_only_delays(pg_conn, pg_dsn, state_dir):
    _setup(pg_conn)
    idle = psycopg.connect(pg_dsn)
    idle.execute("INSERT INTO orders VALUES (1000, 1, 1)")
    ender = threading.Timer(1.5, idle.commit)
    try:
        with Engine(pg_dsn, state_dir, runner="local", wait_timeout_s=30) as engine:
            ender.start()
            engine.create_view("totals", SQL)
            engine.catch_up()
            assert diff_rows(pg_conn, "totals", SQL) == (0, 0)
            assert pg_conn.execute("SELECT count(*) FROM totals").fetchone()[0] == 5
    finally:
        ender.join()
        idle.close()


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
def test_a_population_blocked_by_a_table_lock_gives_up(pg_conn, pg_dsn, state_dir, request, runner):
    """A second view on a published table: its population waits for a session holding an
    ACCESS EXCLUSIVE lock on the table; it gives up (lock timeout) naming that session, leaves
    nothing of the view, and works once the lock is gone. (On Spark the driver locks the
    sources before its tasks read, so the wait is reported and ends there.)"""
    _setup(pg_conn)
    big = "SELECT id, amount FROM orders WHERE amount > 10"
    with Engine(pg_dsn, state_dir, runner=use_runner(request, runner), wait_timeout_s=2) as engine:
        engine.create_view("totals", SQL)
        locker = psycopg.connect(pg_dsn)
        locker.execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        try:
            with pytest.raises(WaitedTooLong) as e:
                engine.create_view("big", big)
            message = str(e.value)
            assert "populating view big gave up after waiting 2 s" in message
            assert f"backend pid {locker.info.backend_pid}" in message
            assert "LOCK TABLE orders" in message
        finally:
            locker.rollback()
            locker.close()
        assert [s.name for s in engine.list_views()] == ["totals"]
        assert pg_conn.execute("SELECT to_regclass('public.big')").fetchone()[0] is None
        engine.create_view("big", big)
        pg_conn.execute("INSERT INTO orders VALUES (100, 9, 11)")
        engine.catch_up()
        assert diff_rows(pg_conn, "big", big) == (0, 0)


@pytest.mark.slow
def test_spark_tasks_give_up_waiting_for_a_lock(spark, pg_conn, pg_dsn, monkeypatch):
    """A Spark task queued behind a conflicting lock (e.g. an ALTER TABLE waiting for the
    driver) ends after the wait timeout; the error names the session holding the lock. (The
    driver's table size lookup is skipped: it would wait for the lock itself; in an Engine the
    driver holds the table's lock before it plans the slices.)"""
    from engine.postgres.snapshot import snapshot_reader
    from engine.spark import population
    from engine.spark.population import read_sources
    from engine.sql.catalog import DictCatalog

    monkeypatch.setattr(population, "table_blocks", lambda reader, table: 0)
    _setup(pg_conn)
    orders = DictCatalog({"orders": {"id": "int", "customer": "int"}}).lookup(None, "orders")
    with snapshot_reader(pg_dsn) as reader:
        locker = psycopg.connect(pg_dsn)
        locker.execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        try:
            with pytest.raises(WaitedTooLong) as e:
                list(read_sources(spark, pg_dsn, reader, [(orders, ("id",), None)], 1.0))
            assert "a Spark task reading the sources gave up after waiting 1 s" in str(e.value)
            assert f"backend pid {locker.info.backend_pid} holds AccessExclusiveLock" in str(
                e.value
            )
        finally:
            locker.rollback()
            locker.close()
        batches = list(read_sources(spark, pg_dsn, reader, [(orders, ("id",), None)], 1.0))
        assert sorted(r for _, b in batches for r in b.rows) == [(i,) for i in range(1, 51)]
