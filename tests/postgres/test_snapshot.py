"""Population reads against a real PostgreSQL: projection + WHERE, batching, progress, exported
snapshots, pg_current_snapshot in the reading transaction, and values equal to the CDC decoder's."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from decimal import Decimal

import psycopg
import pytest

from engine.dataflow.batch import DiffBatch
from engine.errors import ViewError
from engine.pg_interval import PgInterval
from engine.postgres.cdc import CdcReader, visible_in_snapshot
from engine.postgres.snapshot import read_table, snapshot_reader
from engine.sql.catalog import DictCatalog, SourceTable

ITEMS = DictCatalog({"items": {"id": "int not null", "name": "text", "price": "numeric(10,2)"}})


def items(conn, n: int = 10) -> SourceTable:
    conn.execute("CREATE TABLE public.items (id int NOT NULL, name text, price numeric(10,2))")
    conn.execute(
        "INSERT INTO public.items SELECT i, 'item ' || i, i * 1.5 FROM generate_series(1, %s) i",
        (n,),
    )
    return ITEMS.lookup(None, "items")


def all_rows(batches) -> list:
    out = []
    for b in batches:
        assert isinstance(b, DiffBatch) and set(b.weights) <= {1}
        out.extend(b.rows)
    return out


def test_projection_where_and_batch_sizes(pg_dsn, pg_conn):
    table = items(pg_conn)
    batches = list(
        read_table(pg_dsn, table, ["price", "id"], "id > 3 AND name <> 'item 9'", None, 3)
    )
    assert [len(b) for b in batches] == [3, 3]
    assert sorted(all_rows(batches), key=lambda r: r[1]) == [
        (Decimal(i) * Decimal("1.5"), i) for i in (4, 5, 6, 7, 8, 10)
    ]
    assert all(
        isinstance(r[0], Decimal) and r[0].as_tuple().exponent == -2
        for b in batches
        for r in b.rows
    )
    assert [len(b) for b in read_table(pg_dsn, table, ["id"], None, None, batch_rows=4)] == [
        4,
        4,
        2,
    ]
    assert list(read_table(pg_dsn, table, ["id"], "false", None)) == []


def test_progress_reports_rows_and_the_reltuples_estimate(pg_dsn, pg_conn):
    table = items(pg_conn, 25)
    calls: list = []
    list(
        read_table(
            pg_dsn, table, ["id"], None, None, 10, progress=lambda n, est: calls.append((n, est))
        )
    )
    assert calls == [(10, None), (20, None), (25, None)]  # never analyzed: no estimate
    pg_conn.execute("ANALYZE public.items")
    calls.clear()
    list(
        read_table(
            pg_dsn,
            table,
            ["id"],
            "id <= 12",
            None,
            10,
            progress=lambda n, est: calls.append((n, est)),
        )
    )
    assert calls == [(10, 25), (12, 25)]
    calls.clear()
    list(
        read_table(
            pg_dsn, table, ["id"], "false", None, progress=lambda n, est: calls.append((n, est))
        )
    )
    assert calls == [(0, 25)]


def test_read_under_an_exported_snapshot(pg_dsn, pg_conn):
    table = items(pg_conn, 3)
    with psycopg.connect(pg_dsn) as exporter:
        exporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        name = exporter.execute("SELECT pg_export_snapshot()").fetchone()[0]
        pg_conn.execute("INSERT INTO public.items VALUES (100, 'late', 1)")
        pg_conn.execute("DELETE FROM public.items WHERE id = 1")
        rows = all_rows(read_table(pg_dsn, table, ["id"], None, name))
        assert sorted(rows) == [(1,), (2,), (3,)]
        # the same through snapshot_reader, on an idle connection passed in, and via export
        with snapshot_reader(pg_dsn, snapshot_name=name) as snap:
            assert sorted(all_rows(snap.read_table(table, ["id"]))) == [(1,), (2,), (3,)]
        with psycopg.connect(pg_dsn) as idle:
            assert sorted(all_rows(read_table(idle, table, ["id"], None, name))) == [
                (1,),
                (2,),
                (3,),
            ]
            assert idle.isolation_level is None and idle.read_only is None
            assert idle.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert sorted(all_rows(read_table(pg_dsn, table, ["id"], None, None))) == [(2,), (3,), (100,)]
    with pytest.raises(ViewError, match="cannot import snapshot"):
        list(read_table(pg_dsn, table, ["id"], None, name))  # the exporter is gone


def test_read_under_the_slots_exported_snapshot(pg_dsn, pg_conn):
    table = items(pg_conn, 2)
    pg_conn.execute("ALTER TABLE public.items REPLICA IDENTITY FULL")
    reader = CdcReader(pg_dsn, slot="snap_test", publication="snap_test_pub")
    try:
        reader.ensure(["public.items"], create_slot=False)
        with reader.exported_snapshot() as snap:
            pg_conn.execute("INSERT INTO public.items VALUES (3, 'after', 2)")
            rows = all_rows(read_table(pg_dsn, table, ["id", "name"], None, snap.name))
        assert sorted(rows) == [(1, "item 1"), (2, "item 2")]
        reader.flush_wal()
        txs = reader.poll()
        assert [tx.changes["public.items"].rows for tx in txs] == [[(3, "after", Decimal("2.00"))]]
    finally:
        reader.drop()
        reader.close()


def test_snapshot_reader_gives_pg_current_snapshot_of_the_same_transaction(pg_dsn, pg_conn):
    table = items(pg_conn, 2)
    other = ITEMS.lookup(None, "items")
    pg_conn.execute("CREATE TABLE public.more (k int)")
    more = DictCatalog({"more": {"k": "int"}}).lookup(None, "more")

    def insert(conn, sql):
        conn.execute("BEGIN")
        xid = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
        conn.execute(sql)
        return xid

    with (
        psycopg.connect(pg_dsn, autocommit=True) as w1,
        psycopg.connect(pg_dsn, autocommit=True) as w2,
    ):
        before = insert(w1, "INSERT INTO public.more VALUES (1)")
        w1.execute("COMMIT")
        in_progress = insert(w2, "INSERT INTO public.more VALUES (2)")  # open during the snapshot
        mid = insert(w1, "INSERT INTO public.more VALUES (3)")  # later xid, committed before
        w1.execute("COMMIT")
        with snapshot_reader(pg_dsn) as snap:
            w2.execute("COMMIT")
            after = insert(w1, "INSERT INTO public.items VALUES (50, 'x', 1)")
            w1.execute("COMMIT")
            assert sorted(all_rows(snap.read_table(table, ["id"]))) == [(1,), (2,)]
            assert sorted(all_rows(snap.read_table(more, ["k"]))) == [(1,), (3,)]
            assert sorted(all_rows(snap.read_table(other, ["name"], "id = 2"))) == [("item 2",)]
            s = snap.snapshot
            row = snap.conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0]
            assert row == f"{s.xmin}:{s.xmax}:{','.join(map(str, sorted(s.xip)))}"
            exported = snap.export_snapshot()
            assert sorted(all_rows(read_table(pg_dsn, more, ["k"], None, exported))) == [(1,), (3,)]
    assert visible_in_snapshot(before, s) and visible_in_snapshot(before & 0xFFFFFFFF, s)
    assert visible_in_snapshot(mid, s) and mid > in_progress
    assert not visible_in_snapshot(in_progress, s) and in_progress in s.xip
    assert not visible_in_snapshot(after, s) and not visible_in_snapshot(after & 0xFFFFFFFF, s)


def test_reading_inside_a_callers_transaction(pg_dsn, pg_conn):
    table = items(pg_conn, 3)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT 1")
        pg_conn.execute("INSERT INTO public.items VALUES (9, 'late', 1)")
        assert len(all_rows(read_table(conn, table, ["id"], None, None))) == 3
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        with pytest.raises(ViewError, match="SET TRANSACTION SNAPSHOT"):
            list(read_table(conn, table, ["id"], None, "00000003-0000001B-1"))
        conn.rollback()
        conn.execute("SELECT 1")  # READ COMMITTED transaction
        with pytest.raises(ViewError, match="REPEATABLE READ"):
            list(read_table(conn, table, ["id"], None, None))
        conn.rollback()


def test_errors_name_the_table_and_the_fix(pg_dsn, pg_conn):
    table = items(pg_conn, 1)
    with pytest.raises(ViewError, match=r"public.items has no column\(s\) \['nope'\]"):
        list(read_table(pg_dsn, table, ["id", "nope"], None, None))
    gone = DictCatalog({"gone": {"id": "int"}}).lookup(None, "gone")
    with pytest.raises(ViewError, match="public.gone does not exist"):
        list(read_table(pg_dsn, gone, ["id"], None, None))
    pg_conn.execute("CREATE TABLE public.dates (d date)")
    pg_conn.execute("INSERT INTO public.dates VALUES ('infinity')")
    dates = DictCatalog({"dates": {"d": "date"}}).lookup(None, "dates")
    with pytest.raises(ViewError, match="public.dates holds a value"):
        list(read_table(pg_dsn, dates, ["d"], None, None))


TYPES = {
    "i2": "smallint",
    "i4": "integer",
    "i8": "bigint",
    "n": "numeric",
    "n2": "numeric(10,2)",
    "r": "real",
    "d": "double precision",
    "t": "text",
    "vc": "varchar(10)",
    "ch": "char(3)",
    "dt": "date",
    "ts": "timestamp",
    "tz": "timestamptz",
    "iv": "interval",
    "tm": "time",
    "b": "boolean",
}


def test_values_equal_what_the_cdc_decoder_gives(pg_dsn, pg_conn):
    cols = ", ".join(f"{k} {v}" for k, v in TYPES.items())
    pg_conn.execute(
        f"CREATE TABLE public.typed ({cols}); ALTER TABLE public.typed REPLICA IDENTITY FULL"
    )
    table = DictCatalog({"typed": TYPES}).lookup(None, "typed")
    reader = CdcReader(pg_dsn, slot="typed_test", publication="typed_test_pub")
    values = (
        "(1, 2, 3, 'NaN', 1.5, 0.1, 0.1, 'héllo', 'v', 'ab', '2024-02-29', '2024-01-02 03:04:05.678901',"
        " '2024-01-02 03:04:05+02', '1 year 2 mons -3 days 04:05:06.5', '23:59:59.999999', true),"
        "(-32768, -2147483648, -9223372036854775808, -0.000001, -0.01, 'Infinity', '-Infinity', '', '',"
        " '', '0001-01-01', '9999-12-31 23:59:59', '1970-01-01 00:00:00+00', '-1 mons', '00:00', false),"
        "(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    try:
        reader.ensure(["public.typed"])
        pg_conn.execute("SET TIME ZONE 'America/New_York'")  # must not leak into the values
        pg_conn.execute(f"INSERT INTO public.typed VALUES {values}")
        reader.flush_wal()
        (tx,) = reader.poll()
        from_cdc = tx.changes["public.typed"].rows
    finally:
        reader.drop()
        reader.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'Asia/Tokyo'")
        from_copy = all_rows(read_table(conn, table, list(TYPES), None, None))
    assert [tuple(map(repr, r)) for r in from_copy] == [tuple(map(repr, r)) for r in from_cdc]
    first = from_copy[0]
    assert first[5] == 0.1 and first[6] == 0.1  # real reads as its shortest text form
    assert first[12] == datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC) and first[12].tzinfo is UTC
    assert first[13] == PgInterval(14, -3, 14_706_500_000)  # 1 year 2 mons -3 days 04:05:06.5
    assert (first[13].months, first[13].idays) == (14, -3)  # the fields apart, not 422 days
    assert first[10] == date(2024, 2, 29) and first[14] == time(23, 59, 59, 999999)
    assert first[9] == "ab" and from_copy[1][9] == ""  # character(n) without its padding


def test_abandoning_a_read_leaves_the_connection_usable(pg_dsn, pg_conn):
    table = items(pg_conn, 1000)
    with psycopg.connect(pg_dsn) as conn:
        it = read_table(conn, table, ["id"], None, None, batch_rows=10)
        assert len(next(it)) == 10
        it.close()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SELECT count(*) FROM public.items").fetchone()[0] == 1000
    with snapshot_reader(pg_dsn) as snap:
        it = snap.read_table(table, ["id"], batch_rows=10)
        assert len(next(it)) == 10
        it.close()
        assert len(all_rows(snap.read_table(table, ["id"], "id <= 20"))) == 20


def test_a_read_gives_up_waiting_for_a_lock_and_the_reader_locks_its_tables(pg_dsn, pg_conn):
    """``lock_timeout_ms`` ends a read queued behind a conflicting lock (a Spark task's safety
    net); ``SnapshotReader.lock_tables`` takes the ACCESS SHARE locks its COPYs would."""
    import time as clock

    table = items(pg_conn, 3)
    with psycopg.connect(pg_dsn) as locker:
        locker.execute("LOCK TABLE public.items IN ACCESS EXCLUSIVE MODE")
        start = clock.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable):
            list(read_table(pg_dsn, table, ["id"], None, None, lock_timeout_ms=300))
        assert clock.monotonic() - start < 10
        locker.rollback()
    with snapshot_reader(pg_dsn) as snap:
        snap.lock_tables([table])
        held = pg_conn.execute(
            "SELECT mode FROM pg_locks WHERE pid = %s AND relation = 'public.items'::regclass",
            (snap.conn.info.backend_pid,),
        ).fetchall()
        assert held == [("AccessShareLock",)]
        assert sorted(all_rows(snap.read_table(table, ["id"]))) == [(1,), (2,), (3,)]
