"""The columnar CDC decode (``engine.postgres.columnar_assembly``) against the row decoder on the
same real WAL (a real PostgreSQL 15): random DML over tables of many types, decoded both ways,
gives transactions with identical rows (``batch.rows`` equal and ``repr``-equal: Decimal scale,
the shared NaN, -0.0, UTC datetimes), weights, truncations and shapes; columnar batches where
every column has a vector parse, the per-value fallback elsewhere; the same errors."""

from __future__ import annotations

import datetime
import math
import random
import struct
from decimal import Decimal

import pytest

from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.errors import ViewError
from engine.postgres import columnar_assembly
from engine.postgres.cdc import CdcReader
from engine.postgres.pgoutput import PgOutputDecoder

SLOT = "test_columnar"
PUB = "test_columnar_pub"

# every column of `fast` has a vector parse; `mixed` adds types that are parsed value by value
FAST = """
CREATE TABLE fast (
    id bigint, s smallint, i integer, b bigint, n2 numeric(10,2), n38 numeric(38,6),
    n0 numeric(5,0), r real, d double precision, t text, v varchar(20), c char(5), nm name,
    flag boolean, day date, ts timestamp, tstz timestamptz, j jsonb, js json
);
ALTER TABLE fast REPLICA IDENTITY FULL;
"""
MIXED = """
CREATE TABLE mixed (
    id bigint, n numeric, nbig numeric(60,10), tm time, iv interval, u uuid, by bytea,
    arr int[], d double precision, t text
);
ALTER TABLE mixed REPLICA IDENTITY FULL;
"""

TEXTS = [
    "",
    "plain",
    "h\u00e9llo \u2713 \U0001f600",
    'it\'s "quoted" \\ back\\slash',
    "tab\there\nnewline",
    "trailing   ",
    "   leading",
    "NULL",
    "\\x00",
    "ünïcödé" * 20,
]
FLOATS = ["NaN", "Infinity", "-Infinity", "-0", "0", "1e308", "2.2250738585072014e-308", "5e-324"]
NUMERIC_10_2 = ["0.00", "-0.01", "12345678.99", "-12345678.99", "1.50", "0"]
DATES = ["0001-01-01", "9999-12-31", "2024-02-29", "1970-01-01", "1999-12-31"]


def _double(rng: random.Random) -> str:
    while True:
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(x):
            return repr(x)


def _real(rng: random.Random) -> str:
    while True:
        x = struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))[0]
        if math.isfinite(x):
            return repr(x)


def _timestamp(rng: random.Random, zone: bool) -> str:
    t = datetime.datetime(1, 1, 1) + datetime.timedelta(
        microseconds=rng.randrange(0, 315537897599999999)
    )
    if rng.random() < 0.3:
        t = t.replace(microsecond=rng.choice([0, 500000, 120000, 1]))
    text = t.isoformat(sep=" ")
    return text + rng.choice(["+00", "-08", "+05:30"]) if zone else text


def _pick(rng: random.Random, values: list, nulls: float = 0.15):
    return None if rng.random() < nulls else rng.choice(values)


def fast_row(rng: random.Random, id_: int) -> tuple:
    def maybe(v):
        return None if rng.random() < 0.1 else v

    return (
        id_,
        maybe(rng.randint(-32768, 32767)),
        maybe(rng.randint(-(2**31), 2**31 - 1)),
        maybe(rng.randint(-(2**63), 2**63 - 1)),
        maybe(rng.choice([*NUMERIC_10_2, f"{rng.randint(-(10**9), 10**9) / 100:.2f}"])),
        maybe(f"{rng.randint(-(10**37), 10**37) / 10**6:.6f}"),
        maybe(str(rng.randint(-99999, 99999))),
        maybe(rng.choice([*FLOATS[:5], "0.1", "3.4028235e38", "1e-45", "-1.5e-05", _real(rng)])),
        maybe(rng.choice([*FLOATS, _double(rng), _double(rng)])),
        _pick(rng, TEXTS),
        maybe(rng.choice(TEXTS)[:20]),
        maybe(rng.choice(["", "a", "ab c", "abcde", "é"])),
        maybe(rng.choice(["pg_class", "x", "Mixed Case"])),
        maybe(rng.random() < 0.5),
        maybe(
            rng.choice(
                [*DATES, f"{rng.randint(1, 9999):04d}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"]
            )
        ),
        maybe(_timestamp(rng, zone=False)),
        maybe(_timestamp(rng, zone=True)),
        maybe(rng.choice(['{"b": 1, "a": [1, 2.50]}', '"x"', "null", '{"é": "\\"q\\""}'])),
        maybe(rng.choice(['{"b": 1,  "a": 2}', "[]", '"t\\u00e9"'])),
    )


def mixed_row(rng: random.Random, id_: int) -> tuple:
    def maybe(v):
        return None if rng.random() < 0.1 else v

    return (
        id_,
        maybe(rng.choice(["NaN", "Infinity", "1.5", "1.50", "1e50", "-0.000001", "3"])),
        maybe(rng.choice(["1" * 50 + ".0123456789", "-0.5", "0"])),
        maybe(rng.choice(["00:00:00", "23:59:59.999999", "12:00:00.5"])),
        maybe(rng.choice(["1 year 2 mons -3 days 04:05:06.789", "-00:00:01", "0"])),
        maybe(
            rng.choice(
                ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "00000000-0000-0000-0000-000000000000"]
            )
        ),
        maybe(rng.choice([b"", b"\x00\xff", b"abc"])),
        maybe(rng.choice([[1, None, 3], [], [-1]])),
        maybe(rng.choice([*FLOATS, _double(rng)])),
        _pick(rng, TEXTS),
    )


@pytest.fixture
def reader(pg_dsn):
    r = CdcReader(pg_dsn, slot=SLOT, publication=PUB)
    yield r
    r.drop()
    r.close()


def random_dml(conn, rng: random.Random, table: str, make_row, transactions: int) -> None:
    """Random transactions of inserts, updates (of every column), deletes and the odd
    TRUNCATE, as one statement or several per transaction."""
    ids = list(range(1, 40))
    ncols = len(make_row(rng, 0))
    marks = ", ".join(["%s"] * ncols)
    conn.execute(
        f"INSERT INTO {table} VALUES " + ", ".join([f"({marks})"] * len(ids)),
        [v for i in ids for v in make_row(rng, i)],
    )
    next_id = len(ids) + 1
    for _ in range(transactions):
        with conn.transaction():
            for _ in range(rng.randint(1, 4)):
                roll = rng.random()
                if roll < 0.4:
                    rows = [make_row(rng, next_id + k) for k in range(rng.randint(1, 30))]
                    next_id += len(rows)
                    conn.execute(
                        f"INSERT INTO {table} VALUES " + ", ".join([f"({marks})"] * len(rows)),
                        [v for r in rows for v in r],
                    )
                elif roll < 0.75:
                    new = make_row(rng, 0)
                    col = rng.randrange(1, ncols)
                    name = conn.execute(
                        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                        "AND attnum = %s",
                        (table, col + 1),
                    ).fetchone()[0]
                    conn.execute(
                        f'UPDATE {table} SET "{name}" = %s WHERE id %% %s = %s',
                        (new[col], rng.randint(2, 5), rng.randint(0, 1)),
                    )
                elif roll < 0.97:
                    conn.execute(f"DELETE FROM {table} WHERE id %% %s = 0", (rng.randint(3, 9),))
                else:
                    conn.execute(f"TRUNCATE {table}")


def assemble_both_ways(reader: CdcReader, messages: list[bytes], bound: int = 0):
    """The same messages through the row assembler and the columnar one."""
    out = []
    for columnar in (False, True):
        reader.decoder = PgOutputDecoder(resolve=reader._resolve_type)
        reader.columnar = columnar
        reader.last_lsn = 0
        txs, skipped = reader._assemble(messages, bound)
        out.append((txs, skipped))
    return out


def assert_same_transactions(row_txs, col_txs) -> int:
    """Equal transactions, row for row; returns how many table batches came as Arrow. A
    transaction spilled to disk is compared as the sequence of all its diffs per table (the
    two assemblers spill at different points)."""
    assert len(row_txs) == len(col_txs)
    arrow = 0
    for a, b in zip(row_txs, col_txs, strict=True):
        assert (a.xid, a.commit_lsn, a.end_lsn, a.commit_ts) == (
            b.xid,
            b.commit_lsn,
            b.end_lsn,
            b.commit_ts,
        )
        assert a.truncated == b.truncated
        assert a.relations == b.relations
        assert (a.spilled is None) == (b.spilled is None)
        assert a.change_count == b.change_count
        arrow += sum(y.columns is not None for y in b.changes.values())
        if a.spilled is None:
            assert list(a.changes) == list(b.changes)
        for table, (xr, xw) in all_diffs(a).items():
            yr, yw = all_diffs(b)[table]
            assert xw == yw, table
            assert xr == yr, table
            assert [repr(r) for r in xr] == [repr(r) for r in yr], table
            for rx, ry in zip(xr, yr, strict=True):  # the shared NaN objects
                for vx, vy in zip(rx, ry, strict=True):
                    if vx is NAN or vx is NUMERIC_NAN:
                        assert vy is vx
    return arrow


def all_diffs(tx) -> dict[str, tuple[list, list]]:
    out: dict[str, tuple[list, list]] = {}
    for table, batch in tx.iter_changes():
        rows, weights = out.setdefault(table, ([], []))
        rows += batch.rows
        weights += batch.weights
    return out


@pytest.fixture
def arrow_always(monkeypatch):
    """Every table batch as Arrow, also the small ones (``SMALL`` makes those rows)."""
    monkeypatch.setattr(columnar_assembly, "SMALL", 0)


@pytest.mark.parametrize("seed, small", [(1, True), (2, False)], ids=["small-as-rows", "all-arrow"])
def test_random_dml_decodes_the_same_both_ways(pg_conn, reader, monkeypatch, seed, small):
    if not small:
        monkeypatch.setattr(columnar_assembly, "SMALL", 0)
    rng = random.Random(seed)
    pg_conn.execute(FAST)
    pg_conn.execute(MIXED)
    reader.ensure(["fast", "mixed"])
    random_dml(pg_conn, rng, "fast", fast_row, 25)
    random_dml(pg_conn, rng, "mixed", mixed_row, 10)
    with pg_conn.transaction():  # both tables in one transaction, interleaved
        pg_conn.execute("INSERT INTO fast VALUES (%s)", (1000,))
        pg_conn.execute("INSERT INTO mixed (id) VALUES (1000)")
        pg_conn.execute("UPDATE fast SET t = 'x' WHERE id = 1000")
    reader.flush_wal()
    messages = reader.peek(None)
    (rows, skipped_rows), (cols, skipped_cols) = assemble_both_ways(reader, messages)
    assert skipped_rows == skipped_cols == 0
    arrow = assert_same_transactions(rows, cols)
    fast = [tx.changes["public.fast"] for tx in cols if tx.changes.get("public.fast")]
    mixed = [tx.changes["public.mixed"] for tx in cols if tx.changes.get("public.mixed")]
    assert len(fast) > 20 and len(mixed) > 5
    # every column vector-parsed: Arrow (a transaction's few diffs as rows, made column-wise)
    assert all((b.columns is not None) == (len(b) >= columnar_assembly.SMALL) for b in fast)
    assert (
        any(b.columns is not None for b in fast) and any(b.columns is None for b in fast) == small
    )
    assert not any(b.columns is not None for b in mixed)  # interval, uuid...: rows
    assert arrow == sum(b.columns is not None for b in fast)


def test_values_without_a_vector_parse_fall_back_per_column(pg_conn, reader, arrow_always):
    """A numeric NaN in numeric(10,2), a value of numeric(60,10) past decimal128, non-UTF-8-free
    edge values: the column is parsed value by value, the rows equal the row decoder's."""
    pg_conn.execute(
        "CREATE TABLE odd (id int, n numeric(10,2), d date, ts timestamp, t text);"
        "ALTER TABLE odd REPLICA IDENTITY FULL"
    )
    reader.ensure(["odd"])
    pg_conn.execute("INSERT INTO odd VALUES (1, 1.5, '2024-01-01', '2024-01-01 00:00:00', 'a')")
    pg_conn.execute(
        "INSERT INTO odd VALUES (2, 'NaN', '2024-01-02', NULL, 'b'), (3, 2, NULL, NULL, '')"
    )
    pg_conn.execute("UPDATE odd SET n = 'NaN' WHERE id = 1")
    reader.flush_wal()
    messages = reader.peek(None)
    (rows, _), (cols, _) = assemble_both_ways(reader, messages)
    assert_same_transactions(rows, cols)
    assert cols[1].changes["public.odd"].rows[0][1] is NUMERIC_NAN
    # the whole peek is one decode: the NaN's column falls back for every transaction
    assert all(tx.changes["public.odd"].columns is None for tx in cols)
    # decoded alone, the first transaction is all Arrow
    first = messages[: next(i for i, m in enumerate(messages) if m[:1] == b"C") + 1]
    (rows, _), (cols, _) = assemble_both_ways(reader, first)
    assert_same_transactions(rows, cols)
    batch = cols[0].changes["public.odd"]
    assert batch.columns is not None and str(batch.columns[1].type) == "decimal128(10, 2)"
    assert batch.rows == [
        (1, Decimal("1.50"), datetime.date(2024, 1, 1), datetime.datetime(2024, 1, 1), "a")
    ]


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("d", "'0044-03-15 BC'", "outside Python's range"),
        ("d", "'infinity'", "outside Python's range"),
        ("ts", "'10000-01-01 00:00:00'", "outside Python's range"),
        ("ts", "'-infinity'", "outside Python's range"),
    ],
)
def test_values_python_cannot_hold_fail_the_same_way(pg_conn, reader, column, value, message):
    pg_conn.execute(
        "CREATE TABLE far (id int, d date, ts timestamp); ALTER TABLE far REPLICA IDENTITY FULL"
    )
    reader.ensure(["far"])
    pg_conn.execute(f"INSERT INTO far (id, {column}) VALUES (1, {value})")
    reader.flush_wal()
    messages = reader.peek(None)
    errors = []
    for columnar in (False, True):
        reader.decoder = PgOutputDecoder()
        reader.columnar = columnar
        with pytest.raises(ViewError, match=message) as err:
            reader._assemble(messages)
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert f"public.far.{column}" in errors[0]


def test_toast_schema_changes_and_truncate_inside_transactions(pg_conn, reader, arrow_always):
    pg_conn.execute(
        "CREATE TABLE docs (id int, body text, n int, note text);"
        "ALTER TABLE docs REPLICA IDENTITY FULL;"
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL"
    )
    reader.ensure(["docs"])
    body = "".join(f"<{i:04d}é>" for i in range(1500))  # out of line: 'u' when unchanged
    pg_conn.execute("INSERT INTO docs VALUES (1, %s, 0, 'x'), (2, %s, 0, NULL)", (body, body[::-1]))
    pg_conn.execute("UPDATE docs SET n = n + 1")  # body unchanged: filled from the old rows
    with pg_conn.transaction():
        pg_conn.execute("UPDATE docs SET n = 5 WHERE id = 1")
        pg_conn.execute("ALTER TABLE docs DROP COLUMN note")
        pg_conn.execute("UPDATE docs SET n = 6 WHERE id = 2")
        pg_conn.execute("ALTER TABLE docs ADD COLUMN note text")  # the same name, new column
        pg_conn.execute("INSERT INTO docs VALUES (3, 'short', 7, 'new')")
        pg_conn.execute("UPDATE docs SET n = 8 WHERE id = 1")
    with pg_conn.transaction():
        pg_conn.execute("INSERT INTO docs VALUES (4, 'gone', 0, NULL)")
        pg_conn.execute("TRUNCATE docs")
        pg_conn.execute("INSERT INTO docs VALUES (5, 'kept', 0, NULL)")
    reader.flush_wal()
    messages = reader.peek(None)
    (rows, _), (cols, _) = assemble_both_ways(reader, messages)
    assert_same_transactions(rows, cols)
    assert cols[1].changes["public.docs"].columns is not None  # TOAST filled column-wise
    assert [r[:3] for r in cols[1].changes["public.docs"].rows] == [
        (1, body, 0),
        (1, body, 1),
        (2, body[::-1], 0),
        (2, body[::-1], 1),
    ]
    # id 1's first change: note dropped then re-added by name: None, as the row path gives
    assert cols[2].changes["public.docs"].rows[0] == (1, body, 1, None)
    assert cols[3].truncated == {"public.docs"}
    assert cols[3].changes["public.docs"].rows == [(5, "kept", 0, None)]


def test_bounded_streamed_peek_and_skipped_transactions(pg_dsn, pg_conn):
    """The streamed peek (blocks; a transaction's diffs spilled past the bound) and a second
    poll that skips the transactions already returned give what the row decoder gives."""
    pg_conn.execute(FAST)
    with CdcReader(pg_dsn, SLOT, PUB) as setup:
        setup.ensure(["fast"])
        rng = random.Random(7)
        _insert_many(pg_conn, [fast_row(rng, i) for i in range(1500)])  # one transaction
        random_dml(pg_conn, random.Random(8), "fast", fast_row, 10)
        setup.flush_wal()
        try:
            results = []
            for columnar in (False, True):
                with CdcReader(
                    pg_dsn, SLOT, PUB, max_buffered_changes=300, columnar=columnar
                ) as reader:
                    first = reader.poll(max_changes=50)
                    rest = reader.poll(max_changes=100000)
                    spills = (reader.spilled_transactions, reader.spilled_chunks)
                    results.append((first, rest, spills))
        finally:
            setup.drop()
    (rf, rr, (rt, _)), (cf, cr, (ct, cc)) = results
    assert rt == ct >= 1 and cc >= 1500 // 300 - 1
    assert len(rf) >= 1 and len(rr) >= 1
    assert_same_transactions(rf, cf)
    assert_same_transactions(rr, cr)


def _insert_many(conn, rows: list[tuple]) -> None:
    marks = "(" + ", ".join(["%s"] * len(rows[0])) + ")"
    with conn.transaction():
        for i in range(0, len(rows), 100):
            chunk = rows[i : i + 100]
            conn.execute(
                "INSERT INTO fast VALUES " + ", ".join([marks] * len(chunk)),
                [v for r in chunk for v in r],
            )


@pytest.mark.parametrize("small", [True, False], ids=["small-as-rows", "all-arrow"])
def test_partitions_and_children_reported_under_ancestors_the_same(
    pg_conn, reader, monkeypatch, small
):
    """A partitioned table (a partition with another column order) and an inheritance parent
    (a child with an extra column): each leaf's diffs also under every table above it, the
    same both ways, Arrow batches shared or re-shaped by column name as rows."""
    if not small:
        monkeypatch.setattr(columnar_assembly, "SMALL", 0)
    pg_conn.execute(
        "CREATE TABLE s (k int, v numeric(8,2), g text) PARTITION BY RANGE (k);"
        "CREATE TABLE s1 PARTITION OF s FOR VALUES FROM (0) TO (100);"
        "CREATE TABLE s2 (g text, v numeric(8,2), k int);"
        "ALTER TABLE s ATTACH PARTITION s2 FOR VALUES FROM (100) TO (200);"
        "CREATE TABLE p (k int, v numeric(8,2));"
        "CREATE TABLE p_c (extra text) INHERITS (p);"
    )
    for t in ("s1", "s2", "p", "p_c"):
        pg_conn.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    reader.ensure(["public.s", "public.p"])
    rng = random.Random(3)
    for _ in range(12):
        with pg_conn.transaction():
            n = rng.choice([1, 3, 40, 80])
            pg_conn.execute(
                "INSERT INTO s SELECT (g * 7) %% 200, g / 4.0, 'g' || g FROM generate_series(1, %s) g",
                (n,),
            )
            pg_conn.execute("INSERT INTO p SELECT g, g FROM generate_series(1, %s) g", (n,))
            pg_conn.execute("INSERT INTO p_c SELECT g, g, 'x' FROM generate_series(1, %s) g", (n,))
            pg_conn.execute("UPDATE s SET k = (k + 60) % 200 WHERE k % 3 = 0")  # moves rows
            pg_conn.execute("DELETE FROM p_c WHERE k % 2 = 0")
    reader.flush_wal()
    messages = reader.peek(None)
    (rows, _), (cols, _) = assemble_both_ways(reader, messages)
    arrow = assert_same_transactions(rows, cols)
    assert arrow > 0
    assert any(
        set(tx.changes) >= {"public.s", "public.s1", "public.s2", "public.p_c"} for tx in cols
    )
