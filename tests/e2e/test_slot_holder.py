"""Dropping the last view drops the slot even while a backend still holds it: a peek whose
client went away (a stopped streaming query's last ``latestOffset`` over a long backlog) keeps
decoding until the server notices, and the drop failed with "replication slot is active". The
engine waits a moment, then ends that backend (a peek consumes nothing). Here the holder is
``pg_recvlogical`` streaming from the slot."""

from __future__ import annotations

import os
import subprocess
import time

import psycopg
import pytest

from engine import Engine
from engine.engine_names import PUBLICATION, SLOT
from engine.postgres.embedded import find_bindir


def _slot_holder(conn) -> int | None:
    row = conn.execute(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
    ).fetchone()
    return None if row is None else row[0]


@pytest.mark.slow
def test_the_last_drop_ends_a_backend_still_holding_the_slot(pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
        conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO t SELECT i, i FROM generate_series(1, 100) i")
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("tv", "SELECT id, v FROM t WHERE v > 10")
            info = conn.info
            holder = subprocess.Popen(
                [
                    os.path.join(find_bindir(), "pg_recvlogical"),
                    "-h", info.host, "-p", str(info.port), "-U", info.user, "-d", info.dbname,
                    "--slot", SLOT, "--start", "-f", os.devnull,
                    "-o", "proto_version=1", "-o", f"publication_names={PUBLICATION}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )  # fmt: skip
            try:
                deadline = time.monotonic() + 30
                while _slot_holder(conn) is None:
                    assert holder.poll() is None, holder.stderr.read().decode()
                    assert time.monotonic() < deadline, "pg_recvlogical did not take the slot"
                    time.sleep(0.1)
                eng.drop_view("tv")
            finally:
                holder.kill()
                holder.wait()
        slots = conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0]
        assert slots == 0
        assert conn.execute("SELECT to_regclass('tv')").fetchone() == (None,)
