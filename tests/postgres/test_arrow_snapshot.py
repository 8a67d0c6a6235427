"""Population reads as Arrow (ADBC): the same rows and values as the row reader, in the snapshot."""

from __future__ import annotations

import random
from collections import Counter

import psycopg
import pyarrow as pa
import pytest

from engine.errors import ViewError
from engine.postgres import snapshot
from engine.postgres.arrow_snapshot import QUERY_ERRORS, arrow_readable
from engine.postgres.snapshot import read_table, snapshot_reader
from engine.sql.catalog import DictCatalog

TYPES = {
    "i2": "smallint",
    "i4": "integer",
    "i8": "bigint",
    "n2": "numeric(10,2)",
    "n0": "numeric(38,0)",
    "r": "real",
    "d": "double precision",
    "t": "text",
    "vc": "varchar(10)",
    "ch": "char(3)",
    "dt": "date",
    "ts": "timestamp",
    "tz": "timestamptz",
    "b": "boolean",
}


def _values(rng: random.Random) -> str:
    def pick(*choices):
        return rng.choice(choices)

    row = [
        pick("NULL", "-32768", "32767", str(rng.randint(-99, 99))),
        pick("NULL", "-2147483648", str(rng.randint(-(10**6), 10**6))),
        pick("NULL", "-9223372036854775808", "9223372036854775807", str(rng.getrandbits(40))),
        pick("NULL", "'NaN'", "-0.00", f"{rng.randint(-10**7, 10**7) / 100:.2f}"),
        pick("NULL", "99999999999999999999999999999999999999", str(rng.getrandbits(100))),
        pick("NULL", "0.1", "'NaN'", "'-Infinity'", "-0.0", str(rng.random())),
        pick("NULL", "'NaN'", "'Infinity'", "-0.0", "1e-310", repr(rng.uniform(-1e300, 1e300))),
        pick("NULL", "''", "'héllo'", "'tab\tand\nnewline \\ back'", f"'w{rng.random()}'"),
        pick("NULL", "''", "'abc'"),
        pick("NULL", "''", "'a'", "'ab '"),
        pick("NULL", "'0001-01-01'", "'9999-12-31'", "'2024-02-29'", "'1970-01-01'"),
        pick("NULL", "'0001-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'", "'2020-05-06 07:08:09.5'"),
        pick("NULL", "'1970-01-01 00:00:00+00'", "'2024-01-02 03:04:05.678901+02'"),
        pick("NULL", "true", "false"),
    ]  # fmt: skip
    return "(" + ", ".join(row) + ")"


def _multiset(batches) -> Counter:
    return Counter(tuple(map(repr, r)) for b in batches for r in b.rows)


@pytest.fixture(autouse=True)
def arrow_for_every_size(monkeypatch):
    """These tables are small: the reader would read them by rows (``SMALL_TABLE_BYTES``)."""
    monkeypatch.setattr(snapshot, "SMALL_TABLE_BYTES", 0)


@pytest.fixture
def typed(pg_conn):
    cols = ", ".join(f"{k} {v}" for k, v in TYPES.items())
    pg_conn.execute(f"CREATE TABLE public.typed ({cols})")
    return DictCatalog({"typed": TYPES}).lookup(None, "typed")


def test_arrow_reads_equal_the_row_readers_values(pg_dsn, pg_conn, typed):
    rng = random.Random(7)
    rows = ", ".join(_values(rng) for _ in range(400))
    pg_conn.execute(f"INSERT INTO public.typed VALUES {rows}")
    assert arrow_readable(typed, list(TYPES))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'Asia/Tokyo'")  # must not leak into the values
        by_rows = _multiset(read_table(conn, typed, list(TYPES), None, None))
    with snapshot_reader(pg_dsn) as reader:
        batches = list(reader.read_table(typed, list(TYPES), "i8 IS DISTINCT FROM 0"))
    assert _multiset(batches) == by_rows and sum(by_rows.values()) == 400
    # a numeric NaN makes a batch rows (Decimals, the shared NaN); none of these is NaN
    pg_conn.execute("DELETE FROM public.typed WHERE n2 = 'NaN'")
    with snapshot_reader(pg_dsn) as reader:
        batches = list(reader.read_table(typed, list(TYPES)))
    assert all(b.columns is not None for b in batches)
    types = [c.type for c in batches[0].columns]
    assert types[:5] == [pa.int64()] * 3 + [pa.decimal128(10, 2), pa.decimal128(38, 0)]
    assert types[10:13] == [pa.date32(), pa.timestamp("us"), pa.timestamp("us", tz="UTC")]
    first = batches[0].rows
    assert {r[9] for r in first} <= {None, "", "a", "ab"}  # character(n) without its padding


def test_the_arrow_read_sees_the_snapshot_only(pg_dsn, pg_conn, typed):
    pg_conn.execute("INSERT INTO public.typed (i4) SELECT g FROM generate_series(1, 1000) g")
    with snapshot_reader(pg_dsn) as reader:
        pg_conn.execute("INSERT INTO public.typed (i4) VALUES (5000)")
        pg_conn.execute("DELETE FROM public.typed WHERE i4 <= 10")
        got = sorted(r[0] for b in reader.read_table(typed, ["i4"]) for r in b.rows)
        again = sorted(r[0] for b in reader.read_table(typed, ["i4"], "i4 > 500") for r in b.rows)
    assert got == list(range(1, 1001)) and again == list(range(501, 1001))


def test_a_query_runs_in_the_snapshot_and_a_failing_one_leaves_it_usable(pg_dsn, pg_conn, typed):
    pg_conn.execute("INSERT INTO public.typed (i4) SELECT g FROM generate_series(1, 100) g")
    with snapshot_reader(pg_dsn) as reader:
        pg_conn.execute("DELETE FROM public.typed WHERE i4 <= 50")
        with pytest.raises(QUERY_ERRORS, match="division by zero"):
            reader.query_arrow("SELECT sum(i4 / 0) FROM public.typed")
        got = reader.query_arrow("SELECT count(*), sum(i4)::text FROM public.typed")
        rows = sorted(r[0] for b in reader.read_table(typed, ["i4"]) for r in b.rows)
    assert got.to_pylist() == [{"count": 100, "sum": "5050"}] and rows == list(range(1, 101))


def test_progress_and_errors_as_the_row_reader(pg_dsn, pg_conn, typed):
    pg_conn.execute(
        "INSERT INTO public.typed (i4, dt) SELECT g, '2020-01-01' FROM generate_series(1, 10) g"
    )
    seen = []
    with snapshot_reader(pg_dsn) as reader:
        list(reader.read_table(typed, ["i4"], progress=lambda n, est: seen.append(n)))
        list(reader.read_table(typed, ["i4"], "false", progress=lambda n, est: seen.append(n)))
    assert seen == [10, 0]
    pg_conn.execute("ALTER TABLE public.typed DROP COLUMN b")
    with snapshot_reader(pg_dsn) as reader, pytest.raises(ViewError, match="columns changed"):
        list(reader.read_table(typed, ["i4", "b"]))
    pg_conn.execute("INSERT INTO public.typed (dt) VALUES ('infinity')")
    with (
        snapshot_reader(pg_dsn) as reader,
        pytest.raises(ViewError, match="public.typed holds a value"),
    ):
        list(reader.read_table(typed, ["dt"]))
    pg_conn.execute("UPDATE public.typed SET dt = '0044-03-15 BC' WHERE dt = 'infinity'")
    with (
        snapshot_reader(pg_dsn) as reader,
        pytest.raises(ViewError, match="public.typed holds a value"),
    ):
        list(reader.read_table(typed, ["dt"]))


def test_tables_with_other_types_take_the_row_reader(pg_dsn, pg_conn):
    pg_conn.execute("CREATE TABLE public.other (id int, iv interval, n numeric)")
    pg_conn.execute("INSERT INTO public.other VALUES (1, '1 day', 1.5)")
    table = DictCatalog({"other": {"id": "int", "iv": "interval", "n": "numeric"}}).lookup(
        None, "other"
    )
    assert arrow_readable(table, ["id"]) and not arrow_readable(table, ["id", "iv"])
    assert not arrow_readable(table, ["n"])  # unconstrained: each value its own scale
    with snapshot_reader(pg_dsn) as reader:
        (batch,) = reader.read_table(table, ["id", "iv", "n"])
        assert batch.columns is None and len(batch.rows) == 1
        (batch,) = reader.read_table(table, ["id"])
        assert batch.columns is not None and batch.rows == [(1,)]


def test_small_tables_take_the_row_reader(pg_dsn, pg_conn, monkeypatch):
    """Below ``SMALL_TABLE_BYTES`` (a plain table without children) the row reader is faster
    than opening the Arrow reader's connection."""
    monkeypatch.setattr(snapshot, "SMALL_TABLE_BYTES", 1 << 20)
    pg_conn.execute("CREATE TABLE public.small (id int)")
    pg_conn.execute("INSERT INTO public.small SELECT generate_series(1, 100)")
    pg_conn.execute("CREATE TABLE public.big (id int)")
    pg_conn.execute("INSERT INTO public.big SELECT generate_series(1, 40000)")  # > 1 MB
    cat = DictCatalog({"small": {"id": "int"}, "big": {"id": "int"}})
    with snapshot_reader(pg_dsn) as reader:
        small = list(reader.read_table(cat.lookup(None, "small"), ["id"]))
        big = list(reader.read_table(cat.lookup(None, "big"), ["id"]))
    assert all(b.columns is None for b in small) and sum(map(len, small)) == 100
    assert all(b.columns is not None for b in big) and sum(map(len, big)) == 40000
