"""The ``incview_cdc`` stream reader against a real Postgres, called as Spark calls it (no JVM
needed): LSN offsets that never split a transaction, the per-batch row limit, deterministic
replays, the table filter, the slot lock, and the row encoding round trip."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from engine.postgres.cdc import CdcReader
from engine.spark.cdc_payloads import CHUNK_ROWS, transaction_rows, transactions_from_rows
from engine.spark.cdc_source import CdcStreamReader

SLOT = "test_src"
PUB = "test_src_pub"


@pytest.fixture
def cdc(pg_dsn, pg_conn):
    for t in ("a", "b"):
        pg_conn.execute(f"CREATE TABLE {t} (id int, v text); ALTER TABLE {t} REPLICA IDENTITY FULL")
    r = CdcReader(pg_dsn, SLOT, PUB)
    r.ensure(["public.a", "public.b"])
    yield r
    r.drop()
    r.close()


def stream_reader(pg_dsn, **options) -> CdcStreamReader:
    opts = {"dsn": pg_dsn, "slot": SLOT, "publication": PUB}
    opts.update({k: str(v) for k, v in options.items()})
    return CdcStreamReader(opts)


def read_batch(reader: CdcStreamReader, start: dict, end: dict):
    rows = [r for p in reader.partitions(start, end) for r in reader.read(p)]
    return transactions_from_rows(rows)


def write_txs(conn, n: int, rows_per_tx: int, table: str = "a", first: int = 0) -> None:
    for i in range(n):
        with conn.transaction():
            for j in range(rows_per_tx):
                conn.execute(
                    f"INSERT INTO {table} VALUES (%s, 'x')", (first + i * rows_per_tx + j,)
                )


def test_batches_hold_whole_transactions_and_cover_each_once(pg_dsn, pg_conn, cdc):
    write_txs(pg_conn, 30, 7)
    cdc.flush_wal()
    r = stream_reader(pg_dsn, max_rows=20)
    offset = r.initialOffset()
    seen = []
    while True:
        end = r.latestOffset(offset, r.getDefaultReadLimit())
        if end == offset:
            break
        txs = read_batch(r, offset, end)
        assert txs, "a moved offset always brings at least one transaction"
        # never more than the limit unless one transaction alone exceeds it
        assert sum(tx.change_count for tx in txs) <= 21
        for tx in txs:
            assert offset["lsn"] < tx.end_lsn <= end["lsn"]
            assert tx.change_count == 7
        seen.extend(txs)
        offset = end
    ids = sorted(row[0] for tx in seen for row in tx.changes["public.a"].rows)
    assert ids == list(range(210))
    assert len({tx.end_lsn for tx in seen}) == 30


def test_a_transaction_larger_than_the_limit_comes_whole(pg_dsn, pg_conn, cdc):
    write_txs(pg_conn, 1, 100)
    write_txs(pg_conn, 1, 3, first=1000)
    cdc.flush_wal()
    r = stream_reader(pg_dsn, max_rows=10)
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    txs = read_batch(r, start, end)
    assert [tx.change_count for tx in txs] == [100]
    everything = r.latestOffset(start, ReadAllAvailable())
    assert [tx.change_count for tx in read_batch(r, start, everything)] == [100, 3]
    assert r.latestOffset(start, ReadMaxRows(1000)) == everything


def test_replaying_a_batch_reads_the_same_rows(pg_dsn, pg_conn, cdc):
    write_txs(pg_conn, 5, 4)
    pg_conn.execute("UPDATE a SET v = 'y' WHERE id < 6")
    pg_conn.execute("DELETE FROM a WHERE id = 7")
    cdc.flush_wal()
    r = stream_reader(pg_dsn)
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    first = read_batch(r, start, end)
    write_txs(pg_conn, 3, 2, first=500)  # later transactions must not leak into the replay
    again = read_batch(stream_reader(pg_dsn), start, end)
    assert [(t.end_lsn, t.changes["public.a"].counts()) for t in first] == [
        (t.end_lsn, t.changes["public.a"].counts()) for t in again
    ]
    assert len(first) == 7


def test_only_the_views_tables_are_shipped_but_every_transaction_is_seen(pg_dsn, pg_conn, cdc):
    write_txs(pg_conn, 2, 2, table="a")
    write_txs(pg_conn, 2, 2, table="b")
    pg_conn.execute("TRUNCATE b")
    cdc.flush_wal()
    r = stream_reader(pg_dsn, tables="public.a")
    start = r.initialOffset()
    txs = read_batch(r, start, r.latestOffset(start, ReadAllAvailable()))
    assert len(txs) == 5
    assert [set(tx.changes) for tx in txs] == [{"public.a"}] * 2 + [set()] * 3
    assert all(not tx.truncated for tx in txs)  # the TRUNCATE of b is not this view's concern


def test_big_transactions_are_chunked_and_small_ones_grouped(pg_conn, cdc):
    pg_conn.execute(
        "INSERT INTO a SELECT i, 'v' || i FROM generate_series(1, %s) i", (CHUNK_ROWS + 5,)
    )
    write_txs(pg_conn, 40, 3, first=10**6)
    pg_conn.execute("TRUNCATE b")
    cdc.flush_wal()
    txs = cdc.poll(10**6)
    assert len(txs) == 42
    rows = list(transaction_rows(txs, None))
    assert len(rows) == 2  # the big one cut after CHUNK_ROWS changes; its rest and 41 small ones
    back = transactions_from_rows(reversed(rows))
    assert [(t.xid, t.end_lsn, t.commit_ts, t.truncated) for t in back] == [
        (t.xid, t.end_lsn, t.commit_ts, t.truncated) for t in txs
    ]
    assert [{k: b.counts() for k, b in t.changes.items()} for t in back] == [
        {k: b.counts() for k, b in t.changes.items()} for t in txs
    ]


def test_concurrent_readers_of_one_slot_wait_for_each_other(pg_dsn, pg_conn, cdc):
    """Without the slot lock a second peek fails with 'replication slot ... is active'."""
    write_txs(pg_conn, 20, 50)
    cdc.flush_wal()
    errors = []

    def peek_many() -> None:
        r = stream_reader(pg_dsn)
        try:
            for _ in range(15):
                start = r.initialOffset()
                read_batch(r, start, r.latestOffset(start, ReadAllAvailable()))
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=peek_many) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_shipped_rows_keep_the_shared_nan(pg_dsn, pg_conn):
    """Unpickling makes new NaN objects: the driver turns them back into the shared one."""
    from engine.dataflow.nan import NAN, NUMERIC_NAN

    pg_conn.execute(
        "CREATE TABLE fl (id int, x double precision, n numeric);"
        "ALTER TABLE fl REPLICA IDENTITY FULL"
    )
    r = CdcReader(pg_dsn, "test_src_nan", "test_src_nan_pub")
    try:
        r.ensure(["public.fl"])
        pg_conn.execute("INSERT INTO fl VALUES (1, 'NaN', 'NaN'), (2, 1.5, 2)")
        pg_conn.execute("UPDATE fl SET id = 1 WHERE id = 1")
        r.flush_wal()
        back = transactions_from_rows(transaction_rows(r.poll(1000), None))
    finally:
        r.drop()
        r.close()
    inserted = back[0].changes["public.fl"].rows
    assert inserted[0][1] is NAN and inserted[0][2] is NUMERIC_NAN and inserted[1][1] == 1.5
    assert not back[1].changes["public.fl"].consolidate()  # -old +new of an unchanged NaN row


def test_a_huge_transaction_stays_on_disk_in_the_task_and_in_the_driver(pg_dsn, pg_conn, cdc):
    """With ``max_buffered_changes`` the task's reader spills the transaction as it decodes it,
    ships it in chunks, and the driver's reassembly puts it on disk past the bound: the diffs
    read back chunk by chunk are the same as the unbounded read's."""
    with pg_conn.transaction():
        pg_conn.execute("INSERT INTO a SELECT i, 'v' || i FROM generate_series(1, 30000) i")
        pg_conn.execute("INSERT INTO b SELECT i, 'w' FROM generate_series(1, 500) i")
        pg_conn.execute("DELETE FROM a WHERE id % 3 = 0")
        pg_conn.execute("UPDATE b SET v = 'z' WHERE id < 100")
    write_txs(pg_conn, 3, 2, first=10**6)
    cdc.flush_wal()

    def counts(txs):
        out = []
        for tx in txs:
            merged: dict[str, dict] = {}
            for table, batch in tx.iter_changes():
                into = merged.setdefault(table, {})
                for row, w in batch.counts().items():
                    into[row] = into.get(row, 0) + w
            out.append(
                (tx.end_lsn, {t: {r: w for r, w in c.items() if w} for t, c in merged.items()})
            )
        return out

    plain = stream_reader(pg_dsn)
    start = plain.initialOffset()
    end = plain.latestOffset(start, ReadAllAvailable())
    expected = read_batch(plain, start, end)
    bounded = stream_reader(pg_dsn, max_buffered_changes=4000)
    rows = [r for p in bounded.partitions(start, end) for r in bounded.read(p)]
    assert max(len(r[2]) for r in rows) < 2_000_000  # chunks, not the transaction in one row
    back = transactions_from_rows(iter(rows), 4000, presorted=True)
    assert back[0].spilled is not None and back[0].spilled.chunks > 1
    assert sum(len(b) for b in back[0].changes.values()) <= 4000
    assert all(tx.spilled is None for tx in back[1:])
    assert counts(back) == counts(expected)
    assert len(expected) == 4 and expected[0].change_count == 30500 + 10000 + 2 * 99
