"""Restart marks against a real PostgreSQL 15: a mark lets the next advance move the slot's
restart point up to it, a running transaction only bounds the wait, no marking slot is left
behind, a refused mark turns the marks off, and an Engine's slot keeper keeps its slot's restart
point near its confirmed position (every poll decodes from there)."""

from __future__ import annotations

import time

import psycopg
import pytest

from engine.engine import Engine
from engine.postgres.cdc import CdcReader
from engine.postgres.pgoutput import parse_lsn
from engine.postgres.restart_point import (
    MARK_TIMEOUT_MS,
    RESTART_LAG_BYTES,
    RestartMarks,
    mark_restart_point,
    slot_lag,
)
from tests.e2e.test_engine_oracle import diff_rows

SLOT = "test_restart"
PUB = "test_restart_pub"


@pytest.fixture
def reader(pg_dsn, pg_conn):
    pg_conn.execute("CREATE TABLE t (id int, pad text); ALTER TABLE t REPLICA IDENTITY FULL")
    r = CdcReader(pg_dsn, slot=SLOT, publication=PUB)
    r.ensure(["t"])
    yield r
    r.drop()
    r.close()


def _write(conn, rows: int, start: int = 0) -> None:
    conn.execute(
        "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(%s::int, %s::int) g",
        (start, start + rows - 1),
    )


def _apply_all(reader: CdcReader) -> None:
    """Poll what was committed and advance past it (as a view's sink commit would let it)."""
    reader.flush_wal()
    txs = reader.poll(100_000)
    assert txs
    reader.advance(txs[-1].end_lsn)


def _restart_lsn(conn) -> int:
    row = conn.execute(
        "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
    ).fetchone()
    return parse_lsn(row[0])


def _marking_slots(conn) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'incview\\_mark\\_%'"
    ).fetchone()[0]


def test_a_mark_lets_the_next_advance_move_the_restart_point(pg_conn, reader):
    _write(pg_conn, 20_000)  # ~3 MB of WAL behind the confirmed position once applied
    _apply_all(reader)
    conn = reader.connection()
    before = parse_lsn(conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0])
    after = mark_restart_point(conn, "incview_mark_test")
    assert after > before
    assert _marking_slots(pg_conn) == 0
    _write(pg_conn, 1, start=20_000)
    _apply_all(reader)
    # the restart point is the mark's record now, past everything the first poll decoded
    assert _restart_lsn(pg_conn) >= before
    assert slot_lag(conn, SLOT) < RESTART_LAG_BYTES


def test_marks_only_when_the_slot_lags(pg_conn, reader):
    _write(pg_conn, 20_000)
    _apply_all(reader)
    conn = reader.connection()
    lag = slot_lag(conn, SLOT)
    lazy = RestartMarks(threshold=lag + 1)
    assert not lazy.after_advance(conn, SLOT) and lazy.marks == 0
    eager = RestartMarks(threshold=lag - 1)
    assert eager.after_advance(conn, SLOT) and eager.marks == 1
    assert slot_lag(conn, "no_such_slot") is None
    assert not eager.after_advance(conn, "no_such_slot")


def test_a_running_transaction_bounds_the_wait(pg_dsn, pg_conn, reader):
    """Creating the marking slot waits for the transactions running at that moment: at most
    MARK_TIMEOUT_MS, then the mark returns (its record is written) and leaves no slot."""
    with psycopg.connect(pg_dsn) as other:  # a transaction holding an xid, left open
        other.execute("INSERT INTO t VALUES (-1, 'open')")
        t0 = time.monotonic()
        mark_restart_point(reader.connection(), "incview_mark_test")
        assert time.monotonic() - t0 < MARK_TIMEOUT_MS / 1000 + 2.0
        assert _marking_slots(pg_conn) == 0
        other.rollback()
    _write(pg_conn, 3)
    _apply_all(reader)  # the session goes on as before


def test_a_refused_mark_turns_the_marks_off(pg_conn, reader, caplog):
    _write(pg_conn, 20_000)
    _apply_all(reader)
    marks = RestartMarks(threshold=0)
    marks._name = "Not A Slot Name"  # refused by the server, as a full max_replication_slots is
    with caplog.at_level("INFO", logger="engine.postgres.restart_point"):
        assert not marks.after_advance(reader.connection(), SLOT)
    assert not marks.enabled and "cannot mark a restart point" in caplog.text
    assert not marks.after_advance(reader.connection(), SLOT)
    _write(pg_conn, 3, start=20_000)
    _apply_all(reader)


def test_the_engine_keeps_its_slot_restart_point_near(pg_dsn, pg_conn, tmp_path):
    pg_conn.execute("CREATE TABLE t (id int, pad text); ALTER TABLE t REPLICA IDENTITY FULL")
    query = "SELECT id % 7 AS k, count(*) AS n FROM t GROUP BY id % 7"
    with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
        eng.create_view("restart_v", query)
        slot = eng._advancer.slot
        for i in range(3):
            _write(pg_conn, 20_000, start=20_000 * i)  # each ~3 MB of WAL
            eng.catch_up()
            eng._slot_keeper.flush()  # what the background keeper does after a catch_up
            assert diff_rows(pg_conn, "restart_v", query) == (0, 0)
        # without marks the restart point would still be where the slot was created (Postgres
        # writes its own record every 15 s): ~9 MB back
        assert slot_lag(pg_conn, slot) < 2 * RESTART_LAG_BYTES + 4 * 2**20
        assert eng._restart_marks.marks >= 2
    assert _marking_slots(pg_conn) == 0
