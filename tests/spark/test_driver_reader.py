"""The shared streaming query's driver reader on a real PostgreSQL: a micro-batch's read (made
outside the fan-out's lock) and a joining view's catch-up (made inside it) can come at the same
moment, from two threads; they share one connection, one named server-side cursor and the
reader's position, so they must take turns and each get its own whole range."""

from __future__ import annotations

import threading
import time

from engine.postgres.cdc import CdcReader
from engine.spark.streaming import SharedCdcStream

SLOT = "test_driver_reader"
PUB = "test_driver_reader_pub"


def test_concurrent_reads_of_the_driver_reader_take_turns(pg_dsn, pg_conn, tmp_path):
    pg_conn.execute("CREATE TABLE t (id int, v text); ALTER TABLE t REPLICA IDENTITY FULL")
    setup = CdcReader(pg_dsn, slot=SLOT, publication=PUB)
    setup.ensure(["t"])
    start = setup.flush_wal()
    for i in range(40):  # transactions of 500 rows: a peek over them takes a while
        pg_conn.execute(
            "INSERT INTO t SELECT g, repeat('x', 50) FROM generate_series(%s::int, %s::int) g",
            (i * 500, i * 500 + 499),
        )
    end = setup.flush_wal()
    stream = SharedCdcStream(
        None,
        lambda view, txs: None,
        dsn=pg_dsn,
        slot=SLOT,
        publication=PUB,
        checkpoint=tmp_path / "checkpoint",
        max_buffered_changes=1000,  # the streamed path: a named server-side cursor
    )
    expected = setup.read_range(start, end)
    assert len(expected) == 40
    got: list[list[int]] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(3):
                with stream._driver_reader() as reader:
                    got.append([tx.end_lsn for tx in reader.read_range(start, end)])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=read, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    try:
        assert not any(t.is_alive() for t in threads), "a read hung"
        assert errors == []
        assert got == [[tx.end_lsn for tx in expected]] * 9
    finally:
        stream.stop()
        setup.drop()
        setup.close()
