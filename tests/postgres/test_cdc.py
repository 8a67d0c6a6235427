"""CdcReader against a real PostgreSQL 15: setup checks, whole transactions as diffs, polling
without repeats, advancing the slot, and population snapshots consistent with the slot."""

from __future__ import annotations

import itertools
import threading

import psycopg
import pytest

from engine.dataflow.batch import DiffBatch
from engine.errors import ViewError
from engine.postgres.cdc import (
    CdcReader,
    PgSnapshot,
    check_wal_level,
    current_snapshot,
    parse_snapshot,
    visible_in_snapshot,
    widen_xid,
)
from engine.postgres.pgoutput import format_lsn

SLOT = "test_cdc"
PUB = "test_cdc_pub"


@pytest.fixture
def reader(pg_dsn):
    r = CdcReader(pg_dsn, slot=SLOT, publication=PUB)
    yield r
    r.drop()
    r.close()


def make_table(conn, name: str, columns: str = "id int, v text") -> None:
    conn.execute(f"CREATE TABLE {name} ({columns}); ALTER TABLE {name} REPLICA IDENTITY FULL")


def poll_all(reader: CdcReader, max_changes: int = 10000) -> list:
    reader.flush_wal()
    return reader.poll(max_changes)


def counts(batch: DiffBatch) -> dict:
    return batch.counts()


def slot_row(conn) -> tuple | None:
    return conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
    ).fetchone()


# -- setup and its errors ------------------------------------------------------------------------


def test_ensure_creates_publication_and_slot(pg_conn, reader):
    make_table(pg_conn, "orders")
    reader.ensure(["orders"])
    assert reader.published_tables() == {"public.orders"}
    assert slot_row(pg_conn) is not None
    plugin = pg_conn.execute(
        "SELECT plugin FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
    ).fetchone()[0]
    assert plugin == "pgoutput"
    reader.ensure(["public.orders"])  # idempotent
    assert reader.published_tables() == {"public.orders"}


def test_ensure_refuses_table_without_full_identity(pg_conn, reader):
    pg_conn.execute("CREATE SCHEMA shop; CREATE TABLE shop.items (id int PRIMARY KEY)")
    with pytest.raises(ViewError) as err:
        reader.ensure(["shop.items"])
    msg = str(err.value)
    assert "shop.items" in msg and "REPLICA IDENTITY DEFAULT" in msg
    assert "ALTER TABLE shop.items REPLICA IDENTITY FULL;" in msg
    assert slot_row(pg_conn) is None  # nothing created
    pg_conn.execute('CREATE TABLE "Mixed Case" (id int)')
    with pytest.raises(ViewError, match=r'ALTER TABLE public\."Mixed Case" REPLICA IDENTITY FULL;'):
        reader.ensure(["public.Mixed Case"])


def test_ensure_refuses_missing_table_and_views(pg_conn, reader):
    with pytest.raises(ViewError, match="table public.nope does not exist"):
        reader.ensure(["nope"])
    pg_conn.execute("CREATE VIEW vw AS SELECT 1 AS x")
    with pytest.raises(ViewError, match="public.vw is a view"):
        reader.ensure(["vw"])


def test_wal_level_check_message():
    check_wal_level("logical")
    with pytest.raises(ViewError) as err:
        check_wal_level("replica")
    msg = str(err.value)
    assert "wal_level = replica" in msg
    assert "ALTER SYSTEM SET wal_level = logical;" in msg and "restart" in msg


def test_publication_add_and_set_tables(pg_conn, reader):
    make_table(pg_conn, "a")
    make_table(pg_conn, "b")
    reader.ensure(["a"])
    pg_conn.execute("INSERT INTO a VALUES (1, 'a1'); INSERT INTO b VALUES (1, 'b-unpublished')")
    reader.ensure(["b"])  # ALTER PUBLICATION ... ADD TABLE
    assert reader.published_tables() == {"public.a", "public.b"}
    pg_conn.execute("INSERT INTO b VALUES (2, 'b2')")
    txs = poll_all(reader)
    got = {name: counts(b) for tx in txs for name, b in tx.changes.items()}
    assert got == {"public.a": {(1, "a1"): 1}, "public.b": {(2, "b2"): 1}}
    reader.set_tables(["b"])  # ALTER PUBLICATION ... SET TABLE
    assert reader.published_tables() == {"public.b"}


# -- reading -------------------------------------------------------------------------------------


def test_insert_update_delete_as_diffs(pg_conn, reader):
    make_table(pg_conn, "t")
    reader.ensure(["t"])
    pg_conn.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    pg_conn.execute("UPDATE t SET v = 'uno' WHERE id = 1")
    pg_conn.execute("DELETE FROM t WHERE id = 2")
    txs = poll_all(reader)
    assert len(txs) == 3
    assert [list(tx.changes["public.t"]) for tx in txs] == [
        [((1, "one"), 1), ((2, "two"), 1)],
        [((1, "one"), -1), ((1, "uno"), 1)],
        [((2, "two"), -1)],
    ]
    assert all(a.end_lsn <= b.commit_lsn for a, b in itertools.pairwise(txs))
    assert all(tx.commit_lsn < tx.end_lsn for tx in txs)
    assert txs[0].relations["public.t"].column_names == ("id", "v")
    assert not any(tx.truncated for tx in txs)


def test_multi_statement_transaction_and_rollback(pg_conn, reader):
    make_table(pg_conn, "t")
    make_table(pg_conn, "u", "k int")
    reader.ensure(["t", "u"])
    with pg_conn.transaction():
        pg_conn.execute("INSERT INTO t VALUES (1, 'x')")
        pg_conn.execute("INSERT INTO u VALUES (10)")
        pg_conn.execute("UPDATE t SET v = 'y'")
        xid = pg_conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
    with pytest.raises(psycopg.errors.DivisionByZero), pg_conn.transaction():
        pg_conn.execute("INSERT INTO t VALUES (2, 'rolled back')")
        pg_conn.execute("SELECT 1 / 0")
    pg_conn.execute("BEGIN; INSERT INTO t VALUES (3, 'aborted'); ROLLBACK")
    pg_conn.execute("INSERT INTO u VALUES (11)")
    txs = poll_all(reader)
    assert len(txs) == 2
    first = txs[0]
    assert first.xid == xid
    assert counts(first.changes["public.t"]) == {(1, "y"): 1}  # +x -x +y consolidates
    assert list(first.changes["public.t"]) == [((1, "x"), 1), ((1, "x"), -1), ((1, "y"), 1)]
    assert counts(first.changes["public.u"]) == {(10,): 1}
    assert first.change_count == 4
    assert list(txs[1].changes) == ["public.u"]


def test_large_transaction_comes_whole(pg_conn, reader):
    make_table(pg_conn, "big", "id int, v text")
    reader.ensure(["big"])
    pg_conn.execute("INSERT INTO big VALUES (0, 'before')")
    pg_conn.execute("INSERT INTO big SELECT g, 'row ' || g FROM generate_series(1, 50000) g")
    pg_conn.execute("INSERT INTO big VALUES (-1, 'after')")
    reader.flush_wal()
    # Observed PG 15 behaviour: a peek never stops inside a transaction, whatever the limit.
    raw = reader.peek(2)
    assert raw[0][:1] == b"B" and raw[-1][:1] == b"C" and len(raw) == 4  # B R I C
    raw = reader.peek(5)
    assert len(raw) == 4 + 50002 and raw[-1][:1] == b"C"
    txs = reader.poll(max_changes=10)
    assert [len(tx.changes["public.big"]) for tx in txs] == [1, 50000]
    batch = txs[1].changes["public.big"]
    assert set(batch.weights) == {1}
    assert sorted(r[0] for r in batch.rows) == list(range(1, 50001))
    assert [len(tx.changes["public.big"]) for tx in reader.poll(max_changes=10)] == [1]
    assert reader.poll() == []


def test_incomplete_tail_is_never_returned(pg_conn, reader):
    make_table(pg_conn, "t", "id int")
    reader.ensure(["t"])
    pg_conn.execute("INSERT INTO t VALUES (1)")
    pg_conn.execute("INSERT INTO t VALUES (2), (3)")
    reader.flush_wal()
    messages = reader.peek(None)
    assert messages[-1][:1] == b"C"
    txs, skipped = reader._assemble(messages[:-1])  # as if a peek had stopped before a Commit
    assert skipped == 0
    assert [tx.changes["public.t"].rows for tx in txs] == [[(1,)]]
    reader.last_lsn = txs[0].end_lsn
    assert [tx.changes["public.t"].rows for tx in reader.poll()] == [[(2,), (3,)]]


def test_polls_never_repeat_and_resume_after_spent_limit(pg_conn, reader):
    make_table(pg_conn, "t", "id int")
    reader.ensure(["t"])
    for i in range(30):
        pg_conn.execute("INSERT INTO t VALUES (%s)", (i,))
    reader.flush_wal()
    seen: list[int] = []
    for _ in range(40):
        txs = reader.poll(max_changes=4)  # ~1 transaction per poll; the slot is never advanced
        if not txs:
            break
        seen += [r[0] for tx in txs for r in tx.changes["public.t"].rows]
    assert seen == list(range(30))
    pg_conn.execute("INSERT INTO t VALUES (30)")
    txs = poll_all(reader)
    assert [tx.changes["public.t"].rows for tx in txs] == [[(30,)]]
    assert reader.poll() == []


def test_advance_moves_confirmed_flush_lsn(pg_dsn, pg_conn, reader):
    make_table(pg_conn, "t", "id int")
    reader.ensure(["t"])
    start = reader.confirmed_lsn()
    pg_conn.execute("INSERT INTO t VALUES (1)")
    pg_conn.execute("INSERT INTO t VALUES (2)")
    txs = poll_all(reader)
    assert len(txs) == 2
    moved = reader.advance(txs[0].end_lsn)
    assert moved == txs[0].end_lsn > start
    assert reader.confirmed_lsn() == txs[0].end_lsn
    assert slot_row(pg_conn)[0] == format_lsn(txs[0].end_lsn)
    assert reader.advance(start) == txs[0].end_lsn  # never backwards
    # a fresh reader (a restarted process) sees only what was not advanced past
    with CdcReader(pg_dsn, SLOT, PUB) as fresh:
        again = fresh.poll()
        assert [tx.changes["public.t"].rows for tx in again] == [[(2,)]]
        assert again[0].end_lsn == txs[1].end_lsn
    with CdcReader(pg_dsn, SLOT, PUB, after_lsn=txs[1].end_lsn) as resumed:
        assert resumed.poll() == []


def test_truncate_marks_table_and_drops_earlier_diffs(pg_conn, reader):
    make_table(pg_conn, "t", "id int")
    make_table(pg_conn, "u", "id int")
    reader.ensure(["t", "u"])
    pg_conn.execute("INSERT INTO t VALUES (1); INSERT INTO u VALUES (1)")
    with pg_conn.transaction():
        pg_conn.execute("INSERT INTO t VALUES (2)")
        pg_conn.execute("TRUNCATE t")
        pg_conn.execute("INSERT INTO t VALUES (3)")
        pg_conn.execute("INSERT INTO u VALUES (2)")
    pg_conn.execute("TRUNCATE u")
    txs = poll_all(reader)
    assert len(txs) == 3
    tx = txs[1]
    assert tx.truncated == {"public.t"}
    assert list(tx.changes["public.t"]) == [((3,), 1)]  # (2) was wiped by the TRUNCATE
    assert list(tx.changes["public.u"]) == [((2,), 1)]
    assert txs[2].truncated == {"public.u"}
    assert len(txs[2].changes["public.u"]) == 0


def test_unchanged_toast_column_filled(pg_conn, reader):
    make_table(pg_conn, "docs", "id int, body text, n int")
    pg_conn.execute("ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL")
    reader.ensure(["docs"])
    body = "".join(f"<{i:04d}>" for i in range(1000))  # 6 kB, out of line
    pg_conn.execute("INSERT INTO docs VALUES (1, %s, 0)", (body,))
    pg_conn.execute("UPDATE docs SET n = 1")
    txs = poll_all(reader)
    assert list(txs[1].changes["public.docs"]) == [((1, body, 0), -1), ((1, body, 1), 1)]


def test_update_without_old_row_is_refused(pg_conn, reader):
    pg_conn.execute("CREATE TABLE k (id int PRIMARY KEY, v text)")
    pg_conn.execute(f"CREATE PUBLICATION {PUB} FOR TABLE k")
    pg_conn.execute(f"SELECT pg_create_logical_replication_slot('{SLOT}', 'pgoutput')")
    pg_conn.execute("INSERT INTO k VALUES (1, 'a')")
    pg_conn.execute("UPDATE k SET v = 'b'")
    with pytest.raises(ViewError, match=r"ALTER TABLE public\.k REPLICA IDENTITY FULL;"):
        poll_all(reader)


def test_schema_change_mid_stream(pg_conn, reader):
    make_table(pg_conn, "s", "a int")
    reader.ensure(["s"])
    pg_conn.execute("INSERT INTO s VALUES (1)")
    pg_conn.execute("ALTER TABLE s ADD COLUMN b text")
    pg_conn.execute("INSERT INTO s VALUES (2, 'two')")
    with pg_conn.transaction():  # a schema change inside one transaction
        pg_conn.execute("INSERT INTO s VALUES (3, 'three')")
        pg_conn.execute("ALTER TABLE s DROP COLUMN b, ADD COLUMN c int")
        pg_conn.execute("INSERT INTO s VALUES (4, 4)")
        pg_conn.execute("UPDATE s SET c = 5 WHERE a = 4")
    txs = poll_all(reader)
    assert [tx.relations["public.s"].column_names for tx in txs] == [
        ("a",),
        ("a", "b"),
        ("a", "c"),
    ]
    assert txs[0].changes["public.s"].rows == [(1,)]
    assert txs[1].changes["public.s"].rows == [(2, "two")]
    assert list(txs[2].changes["public.s"]) == [
        ((3, None), 1),  # written before the change: re-shaped by column name
        ((4, 4), 1),
        ((4, 4), -1),
        ((4, 5), 1),
    ]


def test_flush_wal_makes_async_commits_visible(pg_dsn, reader):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        make_table(conn, "t", "id int")
        reader.ensure(["t"])
        conn.execute("INSERT INTO t VALUES (1)")
        flushed = reader.flush_wal()
        txs = reader.poll()
    assert [tx.changes["public.t"].rows for tx in txs] == [[(1,)]]
    assert txs[0].end_lsn <= flushed


def test_peeks_of_one_slot_from_several_sessions_wait_for_each_other(pg_dsn, pg_conn, reader):
    """A slot serves one backend at a time: each peek takes the slot's advisory lock in its own
    statement (``PEEK_SQL``), so readers of the same slot in other sessions (streamed or whole)
    queue up instead of failing with 'replication slot ... is active'."""
    make_table(pg_conn, "t", "id int, v text")
    reader.ensure(["t"])
    for _ in range(30):
        pg_conn.execute("INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 300) g")
    reader.flush_wal()
    errors: list[BaseException] = []
    got: list[int] = []

    def peek_many(bounded: bool) -> None:
        r = CdcReader(
            pg_dsn, slot=SLOT, publication=PUB, max_buffered_changes=100 if bounded else 0
        )
        try:
            for _ in range(8):
                got.append(sum(tx.change_count for tx in r.poll(10**6)))
                r.last_lsn = 0
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)
        finally:
            r.close()

    threads = [threading.Thread(target=peek_many, args=(i % 2 == 0,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(got) == 32 and set(got) == {9000}, got


def test_commit_ends_name_each_transactions_end_without_its_rows(pg_conn, reader):
    """``commit_ends``: where the slot's transactions end and how many messages lead up to each
    commit, asked under the slot's lock with the rows filtered out in the server."""
    make_table(pg_conn, "t", "id int")
    reader.ensure(["t"])
    for n in (1, 3, 2):
        pg_conn.execute(f"INSERT INTO t SELECT generate_series(1, {n})")
    reader.flush_wal()
    ends, read = reader.commit_ends(None)
    messages = reader.peek(None)
    assert read == len(messages)
    commits = [i + 1 for i, m in enumerate(messages) if m[:1] == b"C"]
    assert [n for _, n in ends] == commits and commits[-1] == read
    assert [end for end, _ in ends] == [tx.end_lsn for tx in reader.poll()]


def test_a_streamed_poll_given_up_midway_leaves_the_session_usable(pg_dsn, pg_conn, monkeypatch):
    """The bounded poll streams the peek's rows; an error while they come (here: the first
    block's decoding) cancels the rest, and the same session polls again."""
    from engine.postgres import cdc

    make_table(pg_conn, "t", "id int")
    r = CdcReader(pg_dsn, slot=SLOT, publication=PUB, max_buffered_changes=50)
    try:
        r.ensure(["t"])
        pg_conn.execute("INSERT INTO t SELECT generate_series(1, 2000)")
        r.flush_wal()
        real_feed = cdc.ColumnarAssembler.feed

        def failing_feed(self, block):
            raise RuntimeError("decoding failed")

        monkeypatch.setattr(cdc.ColumnarAssembler, "feed", failing_feed)
        with pytest.raises(RuntimeError, match="decoding failed"):
            r.poll()
        monkeypatch.setattr(cdc.ColumnarAssembler, "feed", real_feed)
        (tx,) = r.poll()
        assert tx.spilled is not None  # past the bound: most of it came back from disk
        ids = [v for table, batch in tx.iter_changes() for (v,) in batch.rows]
        assert sorted(ids) == list(range(1, 2001))
    finally:
        r.drop()
        r.close()


def test_drop_removes_slot_and_publication(pg_conn, reader):
    make_table(pg_conn, "t")
    reader.ensure(["t"])
    reader.drop()
    assert slot_row(pg_conn) is None
    assert pg_conn.execute("SELECT count(*) FROM pg_publication").fetchone()[0] == 0
    with pytest.raises(ViewError, match="replication slot test_cdc does not exist"):
        reader.poll()
    reader.drop()  # idempotent


def test_invalid_slot_name():
    with pytest.raises(ViewError, match="slot name 'Bad-Name' is invalid"):
        CdcReader("", "Bad-Name", "p")


# -- snapshots -----------------------------------------------------------------------------------


def insert_returning_xid(conn, value: int) -> int:
    with conn.transaction():
        conn.execute("INSERT INTO t VALUES (%s)", (value,))
        return conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]


def test_exported_snapshot_matches_the_slot(pg_dsn, pg_conn, reader):
    make_table(pg_conn, "t", "id int")
    reader.ensure(["t"], create_slot=False)
    assert slot_row(pg_conn) is None
    pg_conn.execute("INSERT INTO t VALUES (1)")
    before_xid = insert_returning_xid(pg_conn, 2)
    with reader.exported_snapshot() as snap, psycopg.connect(pg_dsn) as pop:
        assert snap.slot == SLOT and snap.name
        pg_conn.execute("INSERT INTO t VALUES (3)")
        after_xid = insert_returning_xid(pg_conn, 4)
        pop.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pop.execute(f"SET TRANSACTION SNAPSHOT '{snap.name}'")
        seen = [r[0] for r in pop.execute("SELECT id FROM t ORDER BY id")]
        snapshot = current_snapshot(pop)
        pop.rollback()
    assert seen == [1, 2]
    assert visible_in_snapshot(before_xid, snapshot)
    assert not visible_in_snapshot(after_xid, snapshot)
    assert visible_in_snapshot(before_xid & 0xFFFFFFFF, snapshot)  # 32-bit, as pgoutput sends
    assert not visible_in_snapshot(after_xid & 0xFFFFFFFF, snapshot)
    # the slot starts exactly after the snapshot: CDC has what the population did not read
    txs = poll_all(reader)
    assert [tx.changes["public.t"].rows for tx in txs] == [[(3,)], [(4,)]]
    assert txs[1].xid == after_xid & 0xFFFFFFFF
    assert not any(visible_in_snapshot(tx.xid, snapshot) for tx in txs)
    assert reader.confirmed_lsn() <= snap.consistent_lsn <= txs[0].commit_lsn
    with pytest.raises(ViewError, match="already exists"), reader.exported_snapshot():
        pass


def test_current_snapshot_filters_cdc_of_an_existing_slot(pg_dsn, pg_conn, reader):
    make_table(pg_conn, "t", "id int")
    reader.ensure(["t"])
    pg_conn.execute("INSERT INTO t VALUES (1)")
    with psycopg.connect(pg_dsn) as pop, psycopg.connect(pg_dsn) as other:
        other.execute("INSERT INTO t VALUES (2)")  # in progress during the snapshot
        pop.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        snapshot = current_snapshot(pop)
        seen = [r[0] for r in pop.execute("SELECT id FROM t ORDER BY id")]
        other.commit()
        pg_conn.execute("INSERT INTO t VALUES (3)")
        pop.rollback()
    assert seen == [1]
    txs = poll_all(reader)
    assert len(txs) == 3
    to_apply = [tx for tx in txs if not visible_in_snapshot(tx.xid, snapshot)]
    assert [tx.changes["public.t"].rows for tx in to_apply] == [[(2,)], [(3,)]]


def test_snapshot_parsing_and_xid_widening():
    s = parse_snapshot("726:730:726,728")
    assert s == PgSnapshot(726, 730, frozenset({726, 728}))
    assert visible_in_snapshot(725, s) and visible_in_snapshot(727, s)
    assert not visible_in_snapshot(726, s) and not visible_in_snapshot(728, s)
    assert not visible_in_snapshot(730, s) and not visible_in_snapshot(731, s)
    epoch = 5 << 32
    near_wrap = PgSnapshot(epoch + 3, epoch + 10, frozenset())
    assert widen_xid(0xFFFFFFFE, near_wrap.xmax) == epoch - 2  # previous epoch
    assert visible_in_snapshot(0xFFFFFFFE, near_wrap)
    assert not visible_in_snapshot(11, near_wrap)
    assert visible_in_snapshot(2, near_wrap)
    assert widen_xid(epoch + 7, 0) == epoch + 7  # already 64-bit
