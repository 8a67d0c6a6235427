"""PgOutputDecoder against a real PostgreSQL 15: every supported type decodes to exactly what
psycopg 3 returns for the same row, and each message kind carries the right fields."""

from __future__ import annotations

import datetime
import math
import struct
from decimal import Decimal

import psycopg
import pytest

from engine.errors import ViewError
from engine.pg_interval import PgInterval, interval_text
from engine.postgres import values
from engine.postgres.cdc import CdcReader
from engine.postgres.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    PgOutputDecoder,
    Relation,
    Truncate,
    Type,
    Update,
    format_lsn,
    parse_lsn,
    quote_ident,
    replica_identity_fix,
)
from engine.postgres.slot_session import SESSION_SETTINGS
from engine.sql import types as sqltypes


@pytest.fixture
def reader(pg_dsn):
    r = CdcReader(pg_dsn, slot="test_decode", publication="test_decode_pub")
    yield r
    r.drop()
    r.close()


def read_events(reader: CdcReader) -> list:
    reader.flush_wal()
    return reader.decoder.decode_all(reader.peek(None))


def changes(events: list) -> list:
    return [e for e in events if isinstance(e, Insert | Update | Delete | Truncate)]


def same(a, b) -> bool:
    """Equal values of the same Python type; NaN equals NaN; tz-aware equal tzinfo offsets."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, Decimal) and a.is_nan():
        return b.is_nan()
    if isinstance(a, Decimal):
        return a == b and a.as_tuple().exponent == b.as_tuple().exponent  # scale kept
    if isinstance(a, datetime.datetime | datetime.time):
        return a == b and a.utcoffset() == b.utcoffset()
    return a == b


ALL_TYPES = """
    CREATE TABLE all_types (
        id int PRIMARY KEY, s smallint, i integer, b bigint, n numeric, n2 numeric(10,2),
        r real, d double precision, t text, v varchar(20), c char(5), flag boolean,
        day date, ts timestamp, tstz timestamptz, tm time, iv interval
    );
    ALTER TABLE all_types REPLICA IDENTITY FULL;
"""

ROWS = [
    "(1, 1, 2, 3, 1.5, 1.50, 1.1, 0.1, 'plain', 'v', 'ab', true, '2024-02-29',"
    " '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.5+02', '23:59:59.999999',"
    " '1 year 2 mons 3 days 04:05:06.789')",
    "(2, -32768, -2147483648, 9223372036854775807, 'NaN', -0.01, 'Infinity', '-Infinity',"
    " E'h\\u00e9llo \\u2713 \\U0001F600 it''s \"q\" \\\\ back\\nline', '', 'x', false,"
    " '0001-01-01', '2000-01-01 00:00:00', '1999-12-31 23:59:59.000001-08', '00:00:00',"
    " '-1 days +02:00:00')",
    "(3, 32767, 2147483647, -9223372036854775808, 'Infinity', 12345678.99, 'NaN', 'NaN',"
    " '', 'éé', 'abcde', true, '9999-12-31', '9999-12-31 23:59:59.999999',"
    " '0001-01-01 00:00:00+00', '12:00:00.5', '-00:00:00.5')",
    "(4, 0, 0, 0, '-Infinity', 0, -0.0, 1e308, 'x', 'y', 'z', false, '1970-01-01',"
    " '1970-01-01 00:00:00.1', '2038-01-19 03:14:08+00', '01:02:03', '-1 years -2 mons')",
    "(5, NULL, NULL, NULL, 123456789012345678901234567890.123456789, NULL, 3.4028235e38,"
    " 2.2250738585072014e-308, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '1000 hours')",
    "(6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL)",
]


def select_rows(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for k, v in SESSION_SETTINGS.items():
            conn.execute(f"SET {k} TO '{v}'")
        return conn.execute(query).fetchall()


def test_every_supported_type_decodes_as_psycopg_reads_it(pg_dsn, pg_conn, reader):
    pg_conn.execute(ALL_TYPES)
    reader.ensure(["all_types"])
    pg_conn.execute(f"INSERT INTO all_types VALUES {', '.join(ROWS)}")
    events = read_events(reader)
    rel = next(e for e in events if isinstance(e, Relation))
    assert rel.qualified_name == "public.all_types"
    assert rel.replica_identity == "f"
    assert [c.name for c in rel.columns][:3] == ["id", "s", "i"]
    assert rel.columns[0].is_key and rel.columns[1].is_key  # FULL: every column is key
    assert rel.columns[5].sql_type == sqltypes.numeric(10, 2)
    assert rel.columns[8].sql_type == sqltypes.TEXT
    assert rel.columns[9].sql_type == sqltypes.varchar(20)
    assert rel.columns[14].sql_type == sqltypes.TIMESTAMPTZ
    decoded = sorted((e.new for e in changes(events)), key=lambda r: r[0])
    expected = select_rows(pg_dsn, "SELECT * FROM all_types ORDER BY id")
    assert len(decoded) == len(expected) == len(ROWS)
    for got, want in zip(decoded, expected, strict=True):
        assert len(got) == len(want)
        for col, g, w in zip(rel.columns, got, want, strict=True):
            if col.type_oid == 1042 and w is not None:  # character(n): unpadded (parse_bpchar)
                w = w.rstrip(" ")
            if col.type_oid == 1186:  # interval: months, days and time apart (psycopg folds)
                assert g is None or isinstance(g, PgInterval), (col.name, g)
                continue
            assert same(g, w), (col.name, g, w)
    # spot checks on the psycopg semantics themselves
    r2 = decoded[1]
    assert r2[7] == float("-inf") and r2[6] == float("inf")
    assert r2[8] == 'h\u00e9llo \u2713 \U0001f600 it\'s "q" \\ back\nline'
    assert decoded[0][14] == datetime.datetime(2024, 1, 2, 1, 4, 5, 500000, tzinfo=datetime.UTC)
    assert decoded[0][16] == PgInterval(14, 3, 14706789000)  # '1 year 2 mons 3 days 04:...'
    assert decoded[2][16] == PgInterval(0, 0, -500000)
    texts = [t for (t,) in pg_conn.execute("SELECT iv::text FROM all_types ORDER BY id")]
    assert [None if r[16] is None else interval_text(r[16]) for r in decoded] == texts
    assert decoded[0][12] == datetime.date(2024, 2, 29)
    assert decoded[2][4] == Decimal("Infinity")
    assert all(v is None for v in decoded[5][1:])


def test_update_delete_old_rows_and_framing(pg_conn, reader):
    pg_conn.execute("CREATE TABLE t (a int, b text); ALTER TABLE t REPLICA IDENTITY FULL")
    reader.ensure(["public.t"])
    pg_conn.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    xid = pg_conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
    with pg_conn.transaction():
        pg_conn.execute("UPDATE t SET b = 'uno' WHERE a = 1")
        pg_conn.execute("DELETE FROM t WHERE a = 2")
    events = read_events(reader)
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "Begin",
        "Relation",
        "Insert",
        "Insert",
        "Commit",
        "Begin",
        "Update",
        "Delete",
        "Commit",
    ]
    b1, c1, b2, c2 = events[0], events[4], events[5], events[8]
    assert isinstance(b1, Begin) and isinstance(c1, Commit)
    assert b1.final_lsn == c1.commit_lsn < c1.end_lsn <= b2.final_lsn == c2.commit_lsn
    assert b2.xid == xid + 1  # the next transaction after our xid probe
    assert b1.commit_ts == c1.commit_ts
    assert abs(b1.commit_ts - datetime.datetime.now(datetime.UTC)) < datetime.timedelta(minutes=5)
    up, de = events[6], events[7]
    assert up == Update(up.oid, (1, "one"), (1, "uno"), False)
    assert de == Delete(de.oid, (2, "two"), False)
    assert up.oid == events[1].oid
    # the next decoding call re-sends the unchanged Relation: the cache keeps the same object
    again = read_events(reader)
    assert next(e for e in again if isinstance(e, Relation)) is events[1]


def test_default_identity_sends_key_or_nothing(pg_conn, reader):
    pg_conn.execute("CREATE TABLE k (id int PRIMARY KEY, v text)")
    pg_conn.execute("CREATE PUBLICATION test_decode_pub FOR TABLE k")
    pg_conn.execute("SELECT pg_create_logical_replication_slot('test_decode', 'pgoutput')")
    pg_conn.execute("INSERT INTO k VALUES (1, 'a'), (2, 'b')")
    pg_conn.execute("UPDATE k SET v = 'c' WHERE id = 1")  # key unchanged: no old tuple
    pg_conn.execute("UPDATE k SET id = 3 WHERE id = 2")  # key changed: old key tuple
    pg_conn.execute("DELETE FROM k WHERE id = 3")
    ev = changes(read_events(reader))
    assert ev[2] == Update(ev[2].oid, None, (1, "c"), False)
    assert ev[3] == Update(ev[3].oid, (2, None), (3, "b"), True)
    assert ev[4] == Delete(ev[4].oid, (3, None), True)


def test_unchanged_toast_filled_from_old_row(pg_conn, reader):
    pg_conn.execute(
        "CREATE TABLE docs (id int, big text, n int); ALTER TABLE docs REPLICA IDENTITY FULL;"
        "ALTER TABLE docs ALTER COLUMN big SET STORAGE EXTERNAL"
    )
    reader.ensure(["docs"])
    big = "".join(f"{i:05d}-é" for i in range(2000))  # 14 kB, stored out of line
    pg_conn.execute("INSERT INTO docs VALUES (1, %s, 0)", (big,))
    pg_conn.execute("UPDATE docs SET n = 1")
    reader.flush_wal()
    messages = reader.peek(None)
    raw_update = next(m for m in messages if m[:1] == b"U")
    assert b"N\x00\x03t" in raw_update and b"u" in raw_update[-20:]  # the new tuple has 'u'
    up = changes(reader.decoder.decode_all(messages))[1]
    assert up.old == (1, big, 0)
    assert up.new == (1, big, 1)


def test_unchanged_toast_without_old_row_names_the_fix(pg_conn, reader):
    pg_conn.execute("CREATE TABLE docs (id int PRIMARY KEY, big text, n int)")
    pg_conn.execute("ALTER TABLE docs ALTER COLUMN big SET STORAGE EXTERNAL")
    pg_conn.execute("CREATE PUBLICATION test_decode_pub FOR TABLE docs")
    pg_conn.execute("SELECT pg_create_logical_replication_slot('test_decode', 'pgoutput')")
    pg_conn.execute("INSERT INTO docs VALUES (1, repeat('x', 5000), 0)")
    pg_conn.execute("UPDATE docs SET n = 1")
    with pytest.raises(ViewError) as err:
        read_events(reader)
    msg = str(err.value)
    assert "public.docs" in msg and "big" in msg
    assert "ALTER TABLE public.docs REPLICA IDENTITY FULL;" in msg


def test_truncate_and_type_messages(pg_conn, reader):
    pg_conn.execute(
        "CREATE TYPE mood AS ENUM ('sad', 'happy');"
        "CREATE TABLE a (x int, m mood); ALTER TABLE a REPLICA IDENTITY FULL;"
        "CREATE TABLE b (y int); ALTER TABLE b REPLICA IDENTITY FULL;"
    )
    reader.ensure(["a", "b"])
    pg_conn.execute("INSERT INTO a VALUES (1, 'happy'); INSERT INTO b VALUES (2)")
    pg_conn.execute("TRUNCATE a, b RESTART IDENTITY")
    events = read_events(reader)
    types = [e for e in events if isinstance(e, Type)]
    assert {(t.schema, t.name) for t in types} == {("public", "mood")}
    ins = [e for e in events if isinstance(e, Insert)]
    assert ins[0].new == (1, "happy")  # unknown types read as their text
    tr = next(e for e in events if isinstance(e, Truncate))
    names = {reader.decoder.relations[o].table for o in tr.oids}
    assert names == {"a", "b"}
    assert tr.restart_identity and not tr.cascade


def test_value_out_of_python_range_names_the_column(pg_conn, reader):
    pg_conn.execute("CREATE TABLE d (id int, day date); ALTER TABLE d REPLICA IDENTITY FULL")
    reader.ensure(["d"])
    pg_conn.execute("INSERT INTO d VALUES (1, 'infinity')")
    with pytest.raises(ViewError, match=r"public\.d\.day.*infinity"):
        read_events(reader)


def test_schema_change_resends_relation(pg_conn, reader):
    pg_conn.execute("CREATE TABLE s (a int); ALTER TABLE s REPLICA IDENTITY FULL")
    reader.ensure(["s"])
    pg_conn.execute("INSERT INTO s VALUES (1)")
    pg_conn.execute("ALTER TABLE s ADD COLUMN b text")
    pg_conn.execute("INSERT INTO s VALUES (2, 'two')")
    events = read_events(reader)
    rels = [e for e in events if isinstance(e, Relation)]
    assert [r.column_names for r in rels] == [("a",), ("a", "b")]
    assert [e.new for e in changes(events)] == [(1,), (2, "two")]
    # a second decoding call re-sends both shapes, in order
    again = read_events(reader)
    assert [e.new for e in changes(again)] == [(1,), (2, "two")]
    assert [e.column_names for e in again if isinstance(e, Relation)] == [("a",), ("a", "b")]
    assert reader.decoder.relations[rels[1].oid] == rels[1]


# -- unit checks without a server ----------------------------------------------------------------


def test_lsn_round_trip():
    assert parse_lsn("0/1924210") == 0x1924210
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"


def test_interval_parser():
    p = values.parse_interval
    td = datetime.timedelta
    assert p(b"00:00:00") == td(0)
    assert p(b"3 days") == td(days=3)
    assert p(b"-1 days +02:03:04.5") == td(days=-1, hours=2, minutes=3, seconds=4.5)
    iv = p(b"1 year -2 mons +3 days -04:05:06.000001")
    assert (iv.months, iv.idays, iv.micros) == (10, 3, -14_706_000_001)  # the fields apart
    assert iv == td(
        days=300 + 3, microseconds=-14_706_000_001
    )  # compared as Postgres: 30-day months
    assert interval_text(iv) == "10 mons 3 days -04:05:06.000001"
    assert p(b"1000:00:00") == td(hours=1000)
    with pytest.raises(ValueError):
        p(b"P1Y")


def test_sql_type_for_typmods():
    assert values.sql_type_for(values.NUMERIC, ((12 << 16) | 3) + 4) == sqltypes.numeric(12, 3)
    assert values.sql_type_for(values.NUMERIC, -1) == sqltypes.NUMERIC
    assert values.sql_type_for(values.BPCHAR, 9).length == 5
    assert values.sql_type_for(values.UUID) == sqltypes.UUID
    assert values.sql_type_for(values.JSON) == sqltypes.JSON  # carried as its text


def test_unknown_relation_and_message_kind():
    dec = PgOutputDecoder()
    with pytest.raises(ViewError, match="oid 42 before its Relation"):
        dec.decode(b"I" + struct.pack(">I", 42) + b"N\x00\x00")
    with pytest.raises(ViewError, match="unknown pgoutput message type 'S'"):
        dec.decode(b"S\x00")


def test_unrolled_reader_matches_reference_loop():
    from engine.postgres.pgoutput import UNCHANGED_TOAST, _read_tuple, tuple_reader

    parsers = (values.parse_int, values.parse_text, values.parse_numeric)

    def tuple_data(cols: list[bytes | None | str]) -> bytes:
        out = struct.pack(">h", len(cols))
        for c in cols:
            if c is None:
                out += b"n"
            elif c == "u":
                out += b"u"
            else:
                out += b"t" + struct.pack(">i", len(c)) + c
        return out

    read = tuple_reader(parsers)
    assert tuple_reader(parsers) is read  # compiled once per parser combination
    for cols in (
        [b"1", "caf\u00e9".encode(), b"1.50"],
        [None, "u", b"-Infinity"],
        [b"-7", b"", None],
    ):
        data = b"xx" + tuple_data(cols) + b"tail"
        assert read(data, 2) == _read_tuple(data, 2, parsers)
    values_, end, unchanged = read(b"xx" + tuple_data([None, "u", b"2"]), 2)
    assert values_[1] is UNCHANGED_TOAST and unchanged and end == 2 + 2 + 1 + 1 + 5 + 1
    dec = PgOutputDecoder()
    rel = (
        b"R" + struct.pack(">I", 7) + b"public\x00t\x00f" + struct.pack(">h", 3)
        + b"".join(b"\x00" + n + b"\x00" + struct.pack(">Ii", o, -1)
                   for n, o in ((b"a", 23), (b"b", 25), (b"c", 1700)))
    )  # fmt: skip
    dec.decode(rel)
    ins = b"I" + struct.pack(">I", 7) + b"N"
    assert dec.decode(ins + tuple_data([b"1", b"x", b"2.5"])).new == (1, "x", Decimal("2.5"))
    with pytest.raises(
        ViewError, match=r"'abc' of column public\.t\.c \(type oid 1700\): not a numeric"
    ):
        dec.decode(ins + tuple_data([b"1", b"x", b"abc"]))
    with pytest.raises(ViewError, match="has 2 columns but its Relation message announced 3"):
        dec.decode(ins + tuple_data([b"1", b"x"]))


def test_quote_ident_quotes_as_postgres_does(pg_conn):
    """Identifiers in the SQL incview writes and prints (a replica identity fix to paste, the
    publication option): bare exactly where the server's own quote_ident leaves them bare, so a
    table named ``order`` or ``user`` gets quotes and ``orders`` none."""
    words = [w for (w,) in pg_conn.execute("SELECT word FROM pg_get_keywords()").fetchall()]
    names = [*words, "orders", "Orders", "a b", 'we"ird', "_x1", "x$", "1x", "é"]
    want = pg_conn.execute(
        "SELECT array_agg(quote_ident(n) ORDER BY i) FROM unnest(%s::text[]) "
        "WITH ORDINALITY AS t(n, i)",
        (names,),
    ).fetchone()[0]
    assert [quote_ident(n) for n in names] == want
    assert replica_identity_fix("public", "order") == (
        'ALTER TABLE public."order" REPLICA IDENTITY FULL;'
    )
