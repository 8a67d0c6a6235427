"""The Arrow -> binary COPY encoder against a real PostgreSQL.

Every case COPYs the same column twice: once with ``BinaryCopyEncoder`` (vector encoders, or the
per-value fallback), once with psycopg's ``Copy.write_row`` of the engine's Python values (the
sink's row path), and compares what Postgres stored: each value's text form (numeric scale, float
digits, padding), its binary send form, and NULLs, row by row."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal

import numpy as np
import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from engine.dataflow.columnar.arrow_types import NUMERIC_TEXT, to_python
from engine.pg_interval import PgInterval
from engine.postgres import interval_dumpers
from engine.postgres.copy_binary import (
    SIGNATURE,
    TRAILER,
    BinaryCopyEncoder,
    CopyValueError,
    vector_encoder,
)
from engine.postgres.sink import COPY_TYPES
from engine.sql.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INTEGER,
    INTERVAL,
    JSON,
    JSONB,
    NUMERIC,
    REAL,
    SMALLINT,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
    SqlType,
    TypeKind,
    numeric,
    varchar,
)


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        interval_dumpers.register(c)
        c.execute("SET TIME ZONE 'UTC'")
        yield c


def copy_encoded(
    conn, table: str, types: list[SqlType], columns: list, weights=None, small_rows: int = 0
) -> set:
    """COPY ``columns`` with the encoder into ``table``; the columns that went per value.
    ``small_rows=0``: the vector encoders, however few the rows."""
    names = [COPY_TYPES[t.kind] for t in types]
    enc = BinaryCopyEncoder(conn, types, names, small_rows=small_rows)
    data = enc.encode(columns, weights)
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(sql.Identifier(table))) as cp,
    ):
        cp.write(SIGNATURE)
        cp.write(data)
        cp.write(TRAILER)
    return enc.fallback_columns


def copy_rows(conn, table: str, types: list[SqlType], rows: list[tuple]) -> None:
    """The sink's row path: write_row, binary (text for jsonb, as the sink does)."""
    fmt = "TEXT" if any(t.kind is TypeKind.JSONB for t in types) else "BINARY"
    with (
        conn.cursor() as cur,
        cur.copy(
            sql.SQL("COPY {} FROM STDIN (FORMAT {})").format(sql.Identifier(table), sql.SQL(fmt))
        ) as cp,
    ):
        cp.set_types([COPY_TYPES[t.kind] for t in types])
        for r in rows:
            cp.write_row(r)


def send_forms(conn, table: str) -> list[tuple]:
    """(id, the value's binary send form) of every row, ordered by id."""
    (fn,) = conn.execute(
        "SELECT typsend::text FROM pg_type WHERE oid = (SELECT atttypid FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attname = 'v')",
        (table,),
    ).fetchone()
    return conn.execute(f"SELECT id, {fn}(v) FROM {table} ORDER BY id").fetchall()


def both_ways(conn, t: SqlType, column, python_values=None, type_sql: str | None = None) -> set:
    """COPY ``column`` by the encoder into ``enc`` (vector encoders), into ``small`` (the encoder's
    row-by-row path for small chunks), and its Python values by write_row into ``old``; assert the
    stored values are the same (text and send forms); returns the columns that went per value."""
    type_sql = type_sql or t.sql()
    tables = ("enc", "small", "old")
    for table in tables:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint, v {type_sql})")
    n = len(column)
    if python_values is None:
        python_values = to_python(column) if isinstance(column, pa.Array) else list(column)
    ids = pa.array(np.arange(n, dtype=np.int64))
    fallback = copy_encoded(conn, "enc", [BIGINT, t], [ids, column])
    assert not copy_encoded(conn, "small", [BIGINT, t], [ids, column], small_rows=n)
    copy_rows(conn, "old", [BIGINT, t], list(zip(range(n), python_values, strict=True)))
    texts = {
        table: conn.execute(f"SELECT id, v::text FROM {table} ORDER BY id").fetchall()
        for table in tables
    }
    assert texts["enc"] == texts["old"] == texts["small"]
    assert len(texts["enc"]) == n
    sends = {table: send_forms(conn, table) for table in tables}
    assert sends["enc"] == sends["old"] == sends["small"]
    return fallback


# -- integers ------------------------------------------------------------------------------------

INTS = [0, 1, -1, None, 32767, -32768, 7, None]


@pytest.mark.parametrize("t", [SMALLINT, INTEGER, BIGINT, NUMERIC, numeric(20, 3)])
def test_ints(conn, t):
    assert not both_ways(conn, t, pa.array(INTS, pa.int64()))
    assert not both_ways(conn, t, pa.array(INTS, pa.int32()).slice(1))


@pytest.mark.parametrize("small_rows", [0, 64], ids=["vector", "row by row"])
def test_int_extremes_and_ranges(conn, small_rows):
    big = [2**63 - 1, -(2**63), None, 2**31 - 1, -(2**31)]
    assert not both_ways(conn, BIGINT, pa.array(big, pa.int64()))
    assert not both_ways(conn, NUMERIC, pa.array(big, pa.int64()))
    assert not both_ways(conn, INTEGER, pa.array(big[2:], pa.int64()))
    names = [COPY_TYPES[TypeKind.BIGINT], COPY_TYPES[TypeKind.INTEGER]]
    enc = BinaryCopyEncoder(conn, [BIGINT, INTEGER], names, small_rows=small_rows)
    with pytest.raises(CopyValueError, match="integer out of range") as err:
        enc.encode([pa.array([1, 2]), pa.array([1, 2**31])])
    assert err.value.column == 1
    small = BinaryCopyEncoder(conn, [SMALLINT], ["int2"], small_rows=small_rows)
    with pytest.raises(CopyValueError, match="smallint out of range"):
        small.encode([pa.array([None, -32769])])
    # a NULL's hidden value never counts
    nulls = pa.Array.from_buffers(
        pa.int64(),
        2,
        [pa.py_buffer(np.packbits([1, 0], bitorder="little")), pa.py_buffer(np.array([1, 2**40]))],
    )
    assert not both_ways(conn, SMALLINT, nulls)


# -- floats --------------------------------------------------------------------------------------

FLOATS = [0.0, -0.0, 1.5, -2.25, float("nan"), float("inf"), float("-inf"), None, 1e-300, 0.1]


def test_double(conn):
    assert not both_ways(conn, DOUBLE, pa.array(FLOATS, pa.float64()))
    assert not both_ways(conn, DOUBLE, pa.array(FLOATS, pa.float32()))
    # -0.0 keeps its sign bit
    assert conn.execute("SELECT v::text FROM enc WHERE id = 1").fetchone() == ("-0",)


@pytest.mark.parametrize("small_rows", [0, 64], ids=["vector", "row by row"])
def test_real(conn, small_rows):
    assert not both_ways(conn, REAL, pa.array([*FLOATS[:-2], 3.4e38, 0.5], pa.float64()))
    enc = BinaryCopyEncoder(conn, [REAL], ["float4"], small_rows=small_rows)
    with pytest.raises(CopyValueError, match="overflow"):
        enc.encode([pa.array([1.0, 1e39])])


# -- booleans, dates, times ----------------------------------------------------------------------


def test_bool(conn):
    assert not both_ways(conn, BOOLEAN, pa.array([True, False, None, True]))


DATES = [date(2000, 1, 1), date(1999, 12, 31), date(1, 1, 1), date(9999, 12, 31), None]
DATES += [date(1970, 1, 1), date(2024, 2, 29)]


def test_date(conn):
    assert not both_ways(conn, DATE, pa.array(DATES, pa.date32()))


STAMPS = [
    datetime(2000, 1, 1),
    datetime(1999, 12, 31, 23, 59, 59, 999999),
    datetime(1, 1, 1, 0, 0, 0, 1),
    datetime(9999, 12, 31, 23, 59, 59, 999999),
    None,
    datetime(2024, 5, 6, 7, 8, 9, 123456),
    datetime(1970, 1, 1),
]


def test_timestamp(conn):
    assert not both_ways(conn, TIMESTAMP, pa.array(STAMPS, pa.timestamp("us")))
    whole = [s.replace(microsecond=0) if s else None for s in STAMPS]
    assert not both_ways(conn, TIMESTAMP, pa.array(whole, pa.timestamp("s")))
    milli = [s.replace(microsecond=s.microsecond // 1000 * 1000) if s else None for s in STAMPS]
    assert not both_ways(conn, TIMESTAMP, pa.array(milli, pa.timestamp("ms")))


def test_timestamptz(conn):
    aware = [s.replace(tzinfo=UTC) if s else None for s in STAMPS]
    assert not both_ways(conn, TIMESTAMPTZ, pa.array(aware, pa.timestamp("us", tz="UTC")))
    # another zone: the same instants (Arrow keeps UTC values)
    zone = timezone(timedelta(hours=5, minutes=30))
    local = [s.astimezone(zone) if s else None for s in aware[1:] if not s or s.year < 9999]
    column = pa.array(local, pa.timestamp("us", tz="+05:30"))
    assert not both_ways(conn, TIMESTAMPTZ, column, python_values=local)
    got = conn.execute("SELECT v FROM enc WHERE id = 0").fetchone()[0]
    assert got == aware[1]


def test_time(conn):
    times = [time(0, 0), time(23, 59, 59, 999999), None, time(12, 0, 0, 1)]
    assert not both_ways(conn, TIME, pa.array(times, pa.time64("us")))


# -- strings -------------------------------------------------------------------------------------

STRINGS = ["", "a", None, "héllo ✓", "日本語", "😀 emoji", "x" * 10_000, "tab\tnew\nline", "'"]


@pytest.mark.parametrize("t", [TEXT, varchar(20000), SqlType(TypeKind.NAME)])
def test_text(conn, t):
    values = STRINGS if t.kind is not TypeKind.NAME else [s and s[:20] for s in STRINGS]
    assert not both_ways(conn, t, pa.array(values))
    assert not both_ways(conn, t, pa.array(values, pa.large_string()).slice(2))


def test_char_pads(conn):
    t = SqlType(TypeKind.CHAR, length=5)
    assert not both_ways(conn, t, pa.array(["", "ab", None, "é", "abcde"]))
    assert conn.execute("SELECT v FROM enc WHERE id = 1").fetchone() == ("ab   ",)


def test_json_jsonb_enum_bytea(conn):
    docs = ['{"a": [1, 2.50, null]}', "[]", None, '"ü"', "3"]
    assert not both_ways(conn, JSON, pa.array(docs))
    assert not both_ways(conn, JSONB, pa.array(docs))
    conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy ✓')")
    mood = SqlType(TypeKind.ENUM, name="public.mood", labels=("sad", "ok", "happy ✓"))
    assert not both_ways(conn, mood, pa.array(["ok", None, "happy ✓"]), type_sql="mood")
    blobs = [b"", b"\x00\xff", None, bytes(range(256))]
    assert not both_ways(conn, BYTEA, pa.array(blobs, pa.binary()))


def test_text_values_too_long_are_refused_by_the_column(conn):
    conn.execute("CREATE TABLE short (v varchar(3))")
    enc = BinaryCopyEncoder(conn, [varchar(3)], ["text"])
    data = enc.encode([pa.array(["abcd"])])
    with (
        pytest.raises(psycopg.errors.StringDataRightTruncation),
        conn.cursor() as cur,
        cur.copy("COPY short FROM STDIN (FORMAT BINARY)") as cp,
    ):
        cp.write(SIGNATURE + bytes(data) + TRAILER)


# -- numeric -------------------------------------------------------------------------------------

DECIMALS = [
    "0",
    "-0.5",
    "12345678901234.56",
    "1.50",
    "100",
    "-100.00",
    None,
    "0.0001",
    "9999.9999",
    "-10000",
    "0.01",
    "-12345678901234.56",
]


@pytest.mark.parametrize("scale", [0, 1, 2, 3, 4, 5, 8, 10])
def test_decimal128(conn, scale):
    values = []
    for s in DECIMALS:
        d = None if s is None else Decimal(s).quantize(Decimal(1).scaleb(-scale))
        values.append(d)
    column = pa.array(values, pa.decimal128(30, scale))
    assert not both_ways(conn, NUMERIC, column)
    assert not both_ways(conn, numeric(30, scale), column.slice(3))


def test_decimal128_wide(conn):
    values = [
        Decimal("99999999999999999999999999999999999999"),
        Decimal("-99999999999999999999999999999999999999"),
        Decimal("170141183460469231731687303715884105"),
        Decimal("-9223372036854775809"),
        Decimal("18446744073709551616"),
        None,
    ]
    assert not both_ways(conn, NUMERIC, pa.array(values, pa.decimal128(38, 0)))
    scaled = [None if v is None else Decimal(f"{v}E-7") for v in values]
    assert not both_ways(conn, NUMERIC, pa.array(scaled, pa.decimal128(38, 7)))
    # |value| * 10**pad past 64 bits
    assert not both_ways(
        conn, NUMERIC, pa.array([Decimal("9223372036854775.807")], pa.decimal128(19, 3))
    )


def test_random_decimals(conn):
    rnd = np.random.default_rng(5)
    for scale in (0, 2, 6, 13):
        ints = rnd.integers(-(10**15), 10**15, 300).tolist() + [0, 10**17, -(10**17)]
        values = [Decimal(f"{i}E-{scale}") for i in ints]
        assert not both_ways(conn, NUMERIC, pa.array(values, pa.decimal128(38, scale)))


NUMERIC_TEXTS = [
    "12.3333333333333333",
    "125E-3",
    "-0.50",
    "0",
    "-0",
    "NaN",
    "Infinity",
    "-Infinity",
    "1E+2",
    "0.0000",
    "100000000000000000000000000000000000000000.5",
    None,
    "12345E-16",
    "-7",
    "0.00000000000000000001",
    "9999",
    "10000",
    "1.5E+1",
    "4E-0",
]


def test_numeric_text(conn):
    column = pa.ExtensionArray.from_storage(NUMERIC_TEXT, pa.array(NUMERIC_TEXTS))
    assert not both_ways(conn, NUMERIC, column)
    got = [v for (v,) in conn.execute("SELECT v::text FROM enc ORDER BY id").fetchall()]
    # Postgres prints without exponents; the scale is the text's own
    assert got[1] == "0.125" and got[8] == "100" and got[12] == "0.0000000000012345"
    assert got[4] == "0" and got[5] == "NaN" and got[2] == "-0.50" and got[11] is None
    assert not both_ways(conn, NUMERIC, column.slice(4))


def test_numeric_text_that_does_not_parse_goes_per_value(conn):
    column = pa.ExtensionArray.from_storage(NUMERIC_TEXT, pa.array([" 12", "1"]))
    assert both_ways(conn, NUMERIC, column) == {1}


# -- fallback ------------------------------------------------------------------------------------


def test_python_values_fall_back_per_value(conn):
    intervals = [timedelta(days=-3, seconds=5, microseconds=7), None, PgInterval(14, 2, 99)]
    assert both_ways(conn, INTERVAL, intervals) == {1}
    uuids = [uuid.UUID(int=0), None, uuid.UUID("12345678-1234-5678-1234-567812345678")]
    assert both_ways(conn, UUID, uuids) == {1}
    decimals = [Decimal("NaN"), Decimal("1.000"), None, Decimal("-1E-30")]
    assert both_ways(conn, NUMERIC, decimals) == {1}


def test_arrow_types_without_an_encoder_fall_back(conn):
    # an int column into double precision: psycopg's float dumper per value
    assert both_ways(conn, DOUBLE, pa.array([1, None, -3])) == {1}
    assert vector_encoder(pa.int64(), DOUBLE) is None
    assert vector_encoder(pa.string(), TEXT, utf8=False) is None
    assert vector_encoder(pa.timestamp("us"), TIMESTAMPTZ) is None
    assert vector_encoder(pa.timestamp("ns"), TIMESTAMP) is None


# -- rows ----------------------------------------------------------------------------------------


def test_rows_with_nulls_and_weights(conn):
    types = [INTEGER, TEXT, numeric(12, 2), DOUBLE, DATE, BOOLEAN]
    conn.execute(
        "CREATE TABLE r (a int, b text, c numeric(12,2), d float8, e date, f bool, w bigint)"
    )
    columns = [
        pa.array([1, None, 3, 4]),
        pa.array(["x", "", None, "ü"]),
        pa.array([Decimal("1.50"), None, Decimal("-0.01"), Decimal("0")], pa.decimal128(12, 2)),
        pa.array([None, 0.5, float("nan"), -0.0]),
        pa.array([date(2000, 1, 1), None, date(1900, 3, 1), None], pa.date32()),
        pa.array([None, True, False, None]),
    ]
    copy_encoded(conn, "r", types, columns, np.array([1, -2, 3, -(2**62)]))
    got = conn.execute("SELECT a, b, c::text, d::text, e, f, w FROM r ORDER BY w").fetchall()
    assert got == [
        (4, "ü", "0.00", "-0", None, None, -(2**62)),
        (None, "", None, "0.5", None, True, -2),
        (1, "x", "1.50", None, date(2000, 1, 1), None, 1),
        (3, None, "-0.01", "NaN", date(1900, 3, 1), False, 3),
    ]


def test_empty_chunk(conn):
    conn.execute("CREATE TABLE e (a int, b text)")
    copy_encoded(conn, "e", [INTEGER, TEXT], [pa.array([], pa.int64()), pa.array([], pa.string())])
    assert conn.execute("SELECT count(*) FROM e").fetchone() == (0,)
