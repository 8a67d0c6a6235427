"""The result sink's Arrow COPY path against a real PostgreSQL: random times of columnar, tuple and
spilled diffs (inserts, deletes of duplicates, updates) leave the result table equal to the
expected multiset after every time, by the Arrow path and by the row path alike; errors name the
column; weights past a COPY chunk; tables the Arrow path leaves to the row path."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import numpy as np
import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.consolidate import ConsolidateCollection
from engine.dataflow.columnar.arrow_types import NUMERIC_TEXT
from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.dataflow.spilled_columns import SpilledColumns
from engine.dataflow.spilled_output import SpilledOutput
from engine.errors import ViewError
from engine.pg_interval import PgInterval
from engine.postgres.sink import ResultSink
from engine.postgres.view_catalog import ViewCatalog
from engine.sql.types import (
    BOOLEAN,
    DATE,
    DOUBLE,
    INTEGER,
    NUMERIC,
    SMALLINT,
    TEXT,
    TIMESTAMPTZ,
    SqlType,
    TypeKind,
    numeric,
)

COLS = [
    ("k", INTEGER),
    ("s", TEXT),
    ("n", numeric(10, 2)),
    ("f", DOUBLE),
    ("t", TIMESTAMPTZ),
    ("d", DATE),
    ("b", BOOLEAN),
    ("q", NUMERIC),  # avg-like: NUMERIC_TEXT in Arrow batches, each value its own scale
]
ARROW = [
    pa.int64(),
    pa.string(),
    pa.decimal128(10, 2),
    pa.float64(),
    pa.timestamp("us", tz="UTC"),
    pa.date32(),
    pa.bool_(),
    NUMERIC_TEXT,
]
DOMAINS = [
    [None, -(2**31), -1, 0, 1, 2**31 - 1],
    [None, "", "a", "é✓", "x" * 300, "tab\there"],
    [None, Decimal("0.00"), Decimal("-0.50"), Decimal("12345678.90"), Decimal("1.00")],
    [None, NAN, 1.5, -2.25, float("inf"), 1e-300],
    [
        None,
        datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2200, 1, 1, tzinfo=UTC),
    ],
    [None, date(1999, 12, 31), date(2000, 1, 1), date(2262, 4, 12), date(1, 1, 1)],
    [None, True, False],
    [None, Decimal("0.125"), Decimal("-7"), NUMERIC_NAN, Decimal("1.50"), Decimal("1E-7")],
]


@pytest.fixture
def catalog(pg_conn):
    cat = ViewCatalog.open(pg_conn)
    cat.insert("v", "SELECT", "public", "res")
    cat.insert("w", "SELECT", "public", "res_rows")
    return cat


@pytest.fixture
def sink_conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def by_repr(rows) -> Counter:
    """Rows compared by repr: NaN equals NaN, and a numeric keeps its scale."""
    return Counter(tuple(map(repr, r)) for r in rows)


def table_rows(conn, table: str) -> Counter:
    conn.execute("SET TIME ZONE 'UTC'")
    return by_repr(conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table))))


def to_arrow(value, typ):
    if typ == NUMERIC_TEXT:
        return None if value is None else str(value)
    return value


def columnar(diffs: DiffBatch, rnd: random.Random) -> DiffBatch:
    """The same diffs as Arrow columns (NUMERIC_TEXT for ``q``), some of them slices of a longer
    array (a non-zero offset)."""
    columns = [[r[i] for r in diffs.rows] for i in range(len(ARROW))]
    arrays = []
    for values, typ in zip(columns, ARROW, strict=True):
        cut = rnd.randrange(3)
        values = [None] * cut + values
        if typ == NUMERIC_TEXT:
            text = pa.array([to_arrow(v, typ) for v in values], pa.string())
            array = pa.ExtensionArray.from_storage(NUMERIC_TEXT, text)
        else:
            array = pa.array(values, typ)
        arrays.append(array.slice(cut))
    return DiffBatch.from_columns(arrays, np.asarray(diffs.weights, dtype=np.int64))


def spilled(diffs: DiffBatch) -> DiffBatch:
    """The same diffs through the sink's consolidator with a tiny bound: a ``SpilledOutput``."""
    consolidate = ConsolidateCollection(spill_rows=3)
    consolidate.open(None)
    half = len(diffs) // 2
    consolidate.on_diffs(0, DiffBatch(diffs.rows[:half], diffs.weights[:half]))
    consolidate.on_diffs(0, DiffBatch(diffs.rows[half:], diffs.weights[half:]))
    out = consolidate.on_time_end(1)
    assert isinstance(out, SpilledOutput) or len(diffs) < 3
    return out


def spilled_columns(diffs: DiffBatch, rnd: random.Random) -> DiffBatch:
    """The diffs as Arrow columns through the consolidator with a tiny bound, in two batches:
    a ``SpilledColumns`` (Arrow IPC files by hash partition)."""
    batch = columnar(diffs, rnd)
    consolidate = ConsolidateCollection(spill_rows=3)
    consolidate.open(None)
    half = len(batch) // 2
    for a, b in ((0, half), (half, len(batch))):
        part = [c.slice(a, b - a) for c in batch.columns]
        consolidate.on_diffs(0, DiffBatch.from_columns(part, batch.column_weights[a:b]))
    out = consolidate.on_time_end(1)
    assert isinstance(out, SpilledColumns) or len(diffs) < 7
    return out


def random_time(rnd: random.Random, pool: list[tuple], model: Counter) -> dict[tuple, int]:
    """One time's consolidated diffs: inserts (weights 1-3), deletes of 1..all copies of rows
    the table holds, updates (-old +new)."""
    diffs: dict[tuple, int] = {}

    def have(r):  # copies the table will hold of r after the diffs so far
        return model[r] + diffs.get(r, 0)

    for _ in range(rnd.randrange(0, 40)):
        op = rnd.random()
        present = [r for r in model if have(r) > 0]
        if op < 0.4 or not present:
            r = rnd.choice(pool)
            diffs[r] = diffs.get(r, 0) + rnd.randrange(1, 4)
        elif op < 0.75:
            r = rnd.choice(present)
            diffs[r] = diffs.get(r, 0) - rnd.randrange(1, have(r) + 1)
        else:
            old, new = rnd.choice(present), rnd.choice(pool)
            diffs[old] = diffs.get(old, 0) - 1
            diffs[new] = diffs.get(new, 0) + 1
    return {r: w for r, w in diffs.items() if w}


@pytest.mark.parametrize(
    ("seed", "small_rows"), [(1, 0), (2, 0), (3, None)], ids=["vector", "vector2", "default"]
)
def test_random_times_leave_the_expected_multiset(pg_conn, catalog, sink_conn, seed, small_rows):
    """The strongest check: after every time, both result tables (Arrow path, row path) equal
    the expected multiset of rows, value for value (NaN, numeric scale, NULLs). ``small_rows=0``:
    the vector encoders even for the few rows of a time; None: the default (small chunks row by
    row)."""
    rnd = random.Random(seed)
    pool = [tuple(rnd.choice(d) for d in DOMAINS) for _ in range(30)]
    arrow = ResultSink(sink_conn, "v", "public", "res", COLS)
    if small_rows is not None:
        arrow._diff_copy.result_encoder.small_rows = small_rows
        arrow._diff_copy.diff_encoder.small_rows = small_rows
    rows = ResultSink(sink_conn, "w", "public", "res_rows", COLS, arrow_copy=False)
    assert arrow.arrow_copy and not rows.arrow_copy
    initial = DiffBatch.inserts(rnd.choice(pool) for _ in range(20))
    arrow.populate([initial], lsn=1)
    rows.populate([initial], lsn=1)
    model = Counter(initial.rows)
    forms = Counter()
    for lsn in range(2, 60):
        diffs = DiffBatch.from_counts(random_time(rnd, pool, model))
        form = rnd.choice(["columns", "columns", "rows", "spilled", "spilled columns"])
        forms[form] += 1
        batch = {
            "columns": lambda d: columnar(d, rnd),
            "rows": lambda d: d,
            "spilled": spilled,
            "spilled columns": lambda d: spilled_columns(d, rnd),
        }[form](diffs)
        assert arrow.apply(batch, lsn)
        assert rows.apply(diffs, lsn)
        for r, w in diffs:
            model[r] += w
            assert model[r] >= 0
        model = +model
        want = by_repr(model.elements())
        assert table_rows(pg_conn, "res") == want, (lsn, form)
        assert table_rows(pg_conn, "res_rows") == want, lsn
    assert min(forms.values()) > 5
    assert catalog.get("v").last_lsn == 59


def test_columnar_values_out_of_the_columns_range_name_the_column(pg_conn, catalog, sink_conn):
    sink = ResultSink(sink_conn, "v", "public", "res", [("a", SMALLINT), ("b", TEXT)])
    sink.populate([DiffBatch.inserts([(1, "x")])], lsn=1)
    batch = DiffBatch.from_columns(
        [pa.array([2, 40_000]), pa.array(["x", "y"])], np.array([1, 1], dtype=np.int64)
    )
    with pytest.raises(ViewError, match=r"smallint out of range.*column a \(smallint\)"):
        sink.apply(batch, lsn=2)
    # with a delete, the few inserts go through the diff table: Postgres refuses the value
    batch = DiffBatch.from_columns(
        [pa.array([1, 40_000]), pa.array(["x", "y"])], np.array([-1, 1], dtype=np.int64)
    )
    with pytest.raises(ViewError, match=r"rolled back.*smallint out of range"):
        sink.apply(batch, lsn=2)
    assert table_rows(pg_conn, "res") == by_repr([(1, "x")])
    assert catalog.get("v").last_lsn == 1


def test_weights_larger_than_a_copy_chunk(pg_conn, catalog, sink_conn):
    sink = ResultSink(sink_conn, "v", "public", "res", [("a", INTEGER), ("b", TEXT)])
    sink._diff_copy.chunk_rows = 1_000  # chunks of 1,000 rows, encoded by the vector kernels
    sink.populate([], lsn=1)
    batch = DiffBatch.from_columns(
        [pa.array([1, 2, 3]), pa.array(["x", None, "z"])], np.array([2_500, 1, 999], dtype=np.int64)
    )
    assert sink.apply(batch, lsn=2)
    assert table_rows(pg_conn, "res") == Counter(
        {("1", "'x'"): 2_500, ("2", "None"): 1, ("3", "'z'"): 999}
    )
    gone = DiffBatch.from_columns(
        [pa.array([1, 3]), pa.array(["x", "z"])], np.array([-2_499, -999], dtype=np.int64)
    )
    assert sink.apply(gone, lsn=3)
    assert table_rows(pg_conn, "res") == Counter({("1", "'x'"): 1, ("2", "None"): 1})
    assert catalog.get("v").last_batch_rows == 2_499 + 999


def test_tables_with_inet_or_array_columns_keep_the_row_path(pg_conn, catalog, sink_conn):
    cols = [("a", INTEGER), ("ip", SqlType(TypeKind.INET))]
    sink = ResultSink(sink_conn, "v", "public", "res", cols)
    assert not sink.arrow_copy
    sink.populate([DiffBatch.inserts([(1, "10.0.0.1"), (2, "::1")])], lsn=1)
    assert sink.apply(DiffBatch([(1, "10.0.0.1"), (3, "10.1.0.0/16")], [-1, 1]), lsn=2)
    got = pg_conn.execute("SELECT a, ip::text FROM res ORDER BY a").fetchall()
    assert got == [(2, "::1/128"), (3, "10.1.0.0/16")]


def test_tuple_batches_of_every_carried_type_match_the_row_path(pg_conn, catalog, sink_conn):
    """Types with a vector encoder, with the per-value fallback, and jsonb (text on the row
    path): both paths store the same values and delete them by value."""
    pg_conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
    cols = [
        ("j", SqlType(TypeKind.JSONB)),
        ("js", SqlType(TypeKind.JSON)),
        ("u", SqlType(TypeKind.UUID)),
        ("by", SqlType(TypeKind.BYTEA)),
        ("tm", SqlType(TypeKind.TIME)),
        ("iv", SqlType(TypeKind.INTERVAL)),
        ("m", SqlType(TypeKind.ENUM, name="public.mood", labels=("sad", "ok"))),
        ("nm", SqlType(TypeKind.NAME)),
        ("ch", SqlType(TypeKind.CHAR, length=3)),
        ("n", NUMERIC),
        ("r", SqlType(TypeKind.REAL)),
    ]
    rows = [
        (
            '{"a": [1, 2.50]}',
            '{"b":  1}',
            uuid.UUID(int=7),
            b"\x00\xff",
            time(1, 2, 3, 4),
            PgInterval(1, 2, 3),
            "ok",
            "name",
            "ab ",
            NUMERIC_NAN,
            0.5,
        ),
        (
            "[]",
            "[]",
            None,
            b"",
            time(0),
            timedelta(days=-1),
            "sad",
            "",
            "x  ",
            Decimal("1E-30"),
            NAN,
        ),
        tuple([None] * len(cols)),
    ]
    arrow = ResultSink(sink_conn, "v", "public", "res", cols)
    old = ResultSink(sink_conn, "w", "public", "res_rows", cols, arrow_copy=False)
    for sink in (arrow, old):
        sink.populate([DiffBatch.inserts(rows[:1])], lsn=1)
        assert sink.apply(DiffBatch.inserts(rows[1:] * 2), lsn=2)
        assert sink.apply(DiffBatch([rows[0], rows[1], rows[2]], [-1, -1, -1]), lsn=3)
    text = "SELECT {} FROM {} ORDER BY 1".format(", ".join(f"{n}::text" for n, _ in cols), "{}")
    got = [pg_conn.execute(text.format(t)).fetchall() for t in ("res", "res_rows")]
    assert got[0] == got[1] and len(got[0]) == 2
    assert got[0][0][0] == "[]" and got[0][0][9] == "0.000000000000000000000000000001"


def test_chunked_dictionary_and_sliced_columns(pg_conn, catalog, sink_conn):
    sink = ResultSink(sink_conn, "v", "public", "res", [("a", INTEGER), ("b", TEXT)])
    sink.populate([], lsn=1)
    a = pa.chunked_array([pa.array([1, 2]), pa.array([3, None])])
    b = pa.array(["zero", "x", "y", "x", "z"]).dictionary_encode().slice(1)
    batch = DiffBatch.from_columns([a, b], np.array([1, 2, 1, 1], dtype=np.int64))
    assert sink.apply(batch, lsn=2)
    assert table_rows(pg_conn, "res") == Counter(
        {("1", "'x'"): 1, ("2", "'y'"): 2, ("3", "'x'"): 1, ("None", "'z'"): 1}
    )
