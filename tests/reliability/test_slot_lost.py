"""Fault: the replication slot is dropped, or re-created behind the views' backs (both runners).

Never a silent loss: the views whose changes the slot no longer holds are re-populated by
themselves (``list_views`` says why), and afterwards equal their queries again. Covered: the
slot dropped while no engine runs (the engine must still start), dropped while an engine is
open (between two catch_ups, and under ``incview run``), and re-created by an operator after
changes it never delivered.
"""

from __future__ import annotations

import signal
import time

import psycopg
import pytest

from engine import Engine
from engine.engine import SLOT
from tests.e2e.test_engine_oracle import diff_rows
from tests.reliability.incview_process import incview_run
from tests.reliability.runners import RUNNERS, use_runner

VIEWS = {
    "totals": "SELECT customer, count(*) AS n, sum(amount) AS s FROM orders GROUP BY customer",
    "rows": "SELECT id, amount FROM orders WHERE amount > 20",
}


def _setup(conn):
    conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer int, amount numeric(10,2))")
    conn.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
    conn.execute("INSERT INTO orders SELECT i, i % 5, i FROM generate_series(1, 50) i")


def _write(conn, start):
    conn.execute(
        "INSERT INTO orders SELECT i, i %% 5, i FROM generate_series(%s::int, %s::int) i",
        (start, start + 9),
    )
    conn.execute("UPDATE orders SET amount = amount + 3 WHERE id % 4 = 0")
    conn.execute("DELETE FROM orders WHERE id % 9 = 0")


def _drop_slot(conn):
    conn.execute(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
        "WHERE slot_name = %s AND active",
        (SLOT,),
    )
    for _ in range(50):
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
            return
        except psycopg.errors.ObjectInUse:
            time.sleep(0.1)
    raise AssertionError("the slot stayed in use")


def _equal(conn):
    return {name: diff_rows(conn, name, sql) for name, sql in VIEWS.items()}


def _reasons(eng):
    return {s.name: (s.phase, s.last_error or "") for s in eng.list_views()}


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
def test_dropped_slot_repopulates_the_views(pg_dsn, tmp_path, request, runner):
    state = tmp_path / "state"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _setup(conn)
        with Engine(pg_dsn, state, runner=use_runner(request, runner)) as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
            _write(conn, 100)
            eng.catch_up()

            # dropped while the engine is open: changes made meanwhile are not in any slot
            _drop_slot(conn)
            _write(conn, 200)
            eng.catch_up()
            assert _equal(conn) == {n: (0, 0) for n in VIEWS}
            for phase, why in _reasons(eng).values():
                assert phase == "running" and "replication slot" in why and "re-populated" in why
            _write(conn, 300)
            eng.catch_up()
            assert _equal(conn) == {n: (0, 0) for n in VIEWS}

        # dropped while no engine runs: the engine starts and repairs
        _drop_slot(conn)
        _write(conn, 400)
        with Engine(pg_dsn, state, runner=use_runner(request, runner)) as eng:
            eng.catch_up()
            assert _equal(conn) == {n: (0, 0) for n in VIEWS}
            for _, why in _reasons(eng).values():
                assert "was dropped" in why

        # re-created by an operator after changes it never delivered
        _write(conn, 500)
        _drop_slot(conn)
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
        _write(conn, 600)
        with Engine(pg_dsn, state, runner=use_runner(request, runner)) as eng:
            eng.catch_up()
            assert _equal(conn) == {n: (0, 0) for n in VIEWS}
            for _, why in _reasons(eng).values():  # the re-created slot was noticed as such
                assert "re-populated" in why and "re-created or restored" in why


@pytest.mark.slow
def test_incview_run_repairs_a_dropped_slot(pg_dsn, tmp_path):
    state = tmp_path / "state"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _setup(conn)
        with Engine(pg_dsn, state, runner="local") as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
        with incview_run(pg_dsn, state, tmp_path / "run.log") as proc:
            _write(conn, 100)
            _wait_equal(conn, proc, tmp_path)
            _drop_slot(conn)
            _write(conn, 200)
            _wait_equal(conn, proc, tmp_path)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, (tmp_path / "run.log").read_text()


def _wait_equal(conn, proc, tmp_path, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "run.log").read_text()
        if _equal(conn) == {n: (0, 0) for n in VIEWS}:
            return
        time.sleep(0.3)
    raise AssertionError(
        f"not equal after {timeout_s} s: {_equal(conn)}\n{(tmp_path / 'run.log').read_text()}"
    )
