"""Keeping a logical slot's restart point near its confirmed position.

Every peek of a logical slot, and every ``pg_replication_slot_advance``, decodes the WAL from
the slot's ``restart_lsn``, not from its confirmed position: transactions that began before the
confirmed position must be decoded whole. The restart point only moves to where an
``xl_running_xacts`` record was written (the decoding snapshot is saved there), and Postgres
writes one every 15 s while WAL is written (the background writer) and at checkpoints. A slot
polled after every commit therefore re-decodes up to ~15-30 s of WAL on every poll: at TPC-H SF 1
a poll of one 7,500-row stream took 31-33 ms with 3-5 MB of WAL behind the confirmed position,
45-50 ms with 19-25 MB, and a writer committing streams back to back piles up more
(``docs/cdc.md``).

``RestartMarks.after_advance`` has Postgres write that record whenever the slot lags more than
``RESTART_LAG_BYTES``; the next advance past it moves the restart point up, so a poll decodes
about one poll's worth of WAL it already applied, not a quarter minute. PostgreSQL 15 has no SQL
function for it (16's ``pg_log_standby_snapshot()`` is superuser-only by default): the record is
written by creating a temporary logical slot, which logs the running transactions before
anything else, and dropping it again. Creating a slot then waits for the transactions running at
that moment to end; ``MARK_TIMEOUT_MS`` bounds that wait, and a timeout loses nothing but the
temporary slot, which Postgres removes with the failed statement (the record is already
written). A server refusing it (no free slot under ``max_replication_slots``, no REPLICATION
privilege) turns the marks off for the session, logged once: the slot keeps working as before.
"""

from __future__ import annotations

import itertools
import logging
import os

import psycopg

from engine.postgres.pgoutput import parse_lsn

log = logging.getLogger(__name__)

#: mark a restart point when the slot's restart point lags its confirmed position by more
RESTART_LAG_BYTES = 1 << 20
#: how long creating the marking slot may wait for the transactions running at that moment
MARK_TIMEOUT_MS = 200

_NUMBERS = itertools.count(1)  # the marking slots' names: unique per session in this process


def slot_lag(conn: psycopg.Connection, slot: str) -> int | None:
    """Bytes of WAL between ``slot``'s restart point and its confirmed position (None: no slot)."""
    row = conn.execute(
        "SELECT (confirmed_flush_lsn - restart_lsn)::int8 FROM pg_replication_slots "
        "WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def mark_restart_point(conn: psycopg.Connection, name: str) -> int:
    """Have Postgres write an ``xl_running_xacts`` record now (see the module docstring), on
    ``conn`` (autocommit, outside a transaction); returns the WAL insert position after it.
    Raises ``psycopg.Error`` when the server refuses to create the temporary slot ``name``."""
    conn.execute(f"SET statement_timeout = {int(MARK_TIMEOUT_MS)}")
    try:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', true)", (name,))
    except psycopg.errors.QueryCanceled:
        pass  # waited for running transactions: the record is written, the slot removed
    finally:
        conn.execute("RESET statement_timeout")
    held = conn.execute(
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s "
        "AND active_pid = pg_backend_pid()",
        (name,),
    ).fetchone()
    if held and held[0]:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


class RestartMarks:
    """Per slot session: ``after_advance(conn, slot)`` marks a restart point when the slot lags
    (``RESTART_LAG_BYTES``); off for good once the server refused one."""

    def __init__(self, threshold: int = RESTART_LAG_BYTES) -> None:
        self.threshold = threshold
        self.enabled = True
        self.marks = 0  # how many were written (tests, counters)
        self._name = f"incview_mark_{os.getpid()}_{next(_NUMBERS)}"

    def after_advance(self, conn: psycopg.Connection, slot: str) -> bool:
        """Mark a restart point if ``slot`` lags by more than the threshold; whether it did."""
        if not self.enabled:
            return False
        lag = slot_lag(conn, slot)
        if lag is None or lag <= self.threshold:
            return False
        try:
            mark_restart_point(conn, self._name)
        except psycopg.Error as e:
            if conn.closed:
                raise  # the database went away: the caller's outage handling decides
            self.enabled = False
            log.info(
                "slot %s: cannot mark a restart point (%s); its polls decode the WAL from the "
                "restart point Postgres keeps (xl_running_xacts every 15 s)",
                slot,
                str(e).strip(),
            )
            return False
        self.marks += 1
        return True
