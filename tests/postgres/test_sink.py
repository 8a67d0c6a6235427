"""The result sink against a real PostgreSQL: multiset-exact apply, exactly-once LSNs, atomic
population, minimal re-population, value round trips and large batches."""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import psycopg
import pytest
from psycopg import sql

from engine.dataflow.batch import DiffBatch
from engine.errors import ViewError
from engine.postgres.sink import (
    ResultSink,
    close_sink_connection,
    drop_unused_diff_tables,
    staging_name,
)
from engine.postgres.view_catalog import ViewCatalog
from engine.sql.types import (
    BIGINT,
    BOOLEAN,
    DATE,
    DOUBLE,
    INTEGER,
    INTERVAL,
    NUMERIC,
    REAL,
    SMALLINT,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    SqlType,
    TypeKind,
    numeric,
    varchar,
)

COLS = [("a", INTEGER), ("b", TEXT)]
# the Arrow COPY path (default) and the row path (arrow_copy=False)
ARROW_OR_ROWS = pytest.mark.parametrize("arrow", [True, False], ids=["arrow", "rows"])


@pytest.fixture
def catalog(pg_conn):
    cat = ViewCatalog.open(pg_conn)
    cat.insert("v", "SELECT a, b FROM src", "public", "res")
    return cat


@pytest.fixture
def sink_conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def make_sink(conn, columns=COLS, view="v", schema="public", table="res", **kw) -> ResultSink:
    return ResultSink(conn, view, schema, table, columns, **kw)


def table_rows(conn, table="res", schema="public") -> Counter:
    conn.execute("SET TIME ZONE 'UTC'")
    query = sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))
    return Counter(conn.execute(query).fetchall())


def by_repr(rows) -> Counter:
    """Rows compared by repr (Decimal('NaN') != Decimal('NaN') in Python)."""
    return Counter(tuple(map(repr, r)) for r in rows)


def last_lsn(cat: ViewCatalog, view: str = "v") -> int | None:
    return cat.get(view).last_lsn


def apply_model(model: Counter, diffs: DiffBatch) -> None:
    for r, w in diffs:
        model[r] += w
        assert model[r] >= 0
        if not model[r]:
            del model[r]


# -- apply ----------------------------------------------------------------------------------------


@ARROW_OR_ROWS
def test_apply_is_multiset_exact_with_duplicates_and_nulls(pg_conn, catalog, sink_conn, arrow):
    sink = make_sink(sink_conn, arrow_copy=arrow)
    initial = [(1, "x"), (1, "x"), (1, "x"), (None, None), (None, None), (2, None), (None, "y")]
    assert sink.populate([DiffBatch.inserts(initial)], lsn=10) == 7
    model = Counter(initial)
    assert table_rows(pg_conn) == model

    steps = [
        # delete 2 of 3 duplicates, one of two all-NULL rows, insert with weights
        DiffBatch([(1, "x"), (None, None), (3, "z"), (None, "y")], [-2, -1, 3, 2]),
        # an update: -old +new, on rows with NULLs
        DiffBatch([(2, None), (2, "now")], [-1, 1]),
        # delete every remaining copy of rows; insert an all-NULL row again
        DiffBatch([(1, "x"), (None, "y"), (None, None)], [-1, -3, 1]),
    ]
    for i, diffs in enumerate(steps):
        assert sink.apply(diffs, lsn=20 + i)
        apply_model(model, diffs)
        assert table_rows(pg_conn) == model
        assert last_lsn(catalog) == 20 + i
    assert model == Counter({(3, "z"): 3, (2, "now"): 1, (None, None): 2})


@ARROW_OR_ROWS
def test_random_batches_match_a_model(pg_conn, catalog, sink_conn, arrow):
    rnd = random.Random(7)
    sink = make_sink(sink_conn, arrow_copy=arrow)
    values_a = [None, 0, 1, 2, -2147483648]  # includes the NULL stand-in of the hash keys
    values_b = [None, "", "p", "q", "\x01incview-null\x01"]
    model: Counter = Counter()
    sink.populate([], lsn=1)
    for lsn in range(2, 40):
        diffs: dict = {}
        for _ in range(rnd.randrange(1, 30)):
            r = (rnd.choice(values_a), rnd.choice(values_b))
            if model[r] - max(0, -diffs.get(r, 0)) > 0 and rnd.random() < 0.5:
                have = model[r] + diffs.get(r, 0)
                if have > 0:
                    diffs[r] = diffs.get(r, 0) - rnd.randrange(1, have + 1)
            else:
                diffs[r] = diffs.get(r, 0) + rnd.randrange(1, 4)
        batch = DiffBatch.from_counts(diffs)
        assert sink.apply(batch, lsn)
        apply_model(model, batch)
        assert table_rows(pg_conn) == model, lsn


def test_replay_of_an_applied_lsn_is_a_no_op(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    sink.populate([DiffBatch.inserts([(1, "a")])], lsn=100)
    diffs = DiffBatch([(1, "a"), (2, "b")], [-1, 1])
    assert sink.apply(diffs, lsn=200)
    after = table_rows(pg_conn)
    assert not sink.apply(diffs, lsn=200)  # the same LSN again (crash replay)
    assert not sink.apply(DiffBatch.inserts([(9, "z")]), lsn=150)  # older
    assert not sink.apply(DiffBatch.inserts([(9, "z")]), lsn=100)  # the population's LSN
    assert table_rows(pg_conn) == after == Counter({(2, "b"): 1})
    assert last_lsn(catalog) == 200


def test_empty_batch_records_the_lsn(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    sink.populate([], lsn=5)
    when = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert sink.apply(DiffBatch(), lsn=6, commit_time=when)
    rec = catalog.get("v")
    assert rec.last_lsn == 6 and rec.last_commit_time == when and rec.last_batch_rows == 0
    assert table_rows(pg_conn) == Counter()


@ARROW_OR_ROWS
def test_failed_apply_changes_neither_rows_nor_lsn(pg_conn, catalog, sink_conn, arrow):
    sink = make_sink(sink_conn, arrow_copy=arrow)
    sink.populate([DiffBatch.inserts([(1, "a"), (2, "b")])], lsn=10)
    before = table_rows(pg_conn)
    # a type error in the middle of the COPY, after a delete and inserts were streamed
    bad = DiffBatch([(1, "a"), (3, "c"), ("not an int", "d"), (4, "e")], [-1, 1, 1, 1])
    with pytest.raises(ViewError, match="rolled back"):
        sink.apply(bad, lsn=11)
    assert table_rows(pg_conn) == before and last_lsn(catalog) == 10
    # a value the server rejects (integer overflow on the int column)
    with pytest.raises(ViewError, match="res"):
        sink.apply(DiffBatch([(1, "a"), (2**40, "x")], [-1, 1]), lsn=11)
    assert table_rows(pg_conn) == before and last_lsn(catalog) == 10
    # the connection is usable afterwards
    assert sink.apply(DiffBatch([(1, "a")], [-1]), lsn=11)
    assert table_rows(pg_conn) == Counter({(2, "b"): 1}) and last_lsn(catalog) == 11


def diff_tables(conn) -> dict[str, int]:
    """The sink session's kept diff tables (temp tables of any session): name -> oid."""
    rows = conn.execute(
        "SELECT relname, oid::int FROM pg_class WHERE relname LIKE 'incview_sink_d_%' "
        "AND relpersistence = 't'"
    ).fetchall()
    return dict(rows)


def test_views_sharing_a_connection_keep_one_diff_table_per_layout(pg_conn, sink_conn):
    cat = ViewCatalog.open(pg_conn)
    cat.insert("v", "SELECT a, b FROM src", "public", "res")
    cat.insert("w", "SELECT x FROM src", "public", "res_w")
    sink_v = make_sink(sink_conn)
    sink_w = make_sink(sink_conn, columns=[("x", BIGINT)], view="w", table="res_w")
    sink_v.populate([DiffBatch.inserts([(i, f"s{i}") for i in range(50)])], lsn=1)
    sink_w.populate([DiffBatch.inserts([(i,) for i in range(50)])], lsn=1)
    model_v = Counter({(i, f"s{i}"): 1 for i in range(50)})
    model_w = Counter({(i,): 1 for i in range(50)})
    rng = random.Random(5)
    seen: list[dict[str, int]] = []
    for lsn in range(2, 12):
        gone = rng.sample(sorted(model_v), 5)
        dv = DiffBatch([*gone, (100 + lsn, "n")], [-1] * 5 + [1])
        gone_w = rng.sample(sorted(model_w), 5)
        dw = DiffBatch([*gone_w, (100 + lsn,)], [-1] * 5 + [1])
        assert sink_v.apply(dv, lsn=lsn) and sink_w.apply(dw, lsn=lsn)
        apply_model(model_v, dv)
        apply_model(model_w, dw)
        assert table_rows(pg_conn) == model_v and table_rows(pg_conn, "res_w") == model_w
        seen.append(diff_tables(sink_conn))
    # one table per layout, the same ones every time (not created and dropped in each time),
    # holding the last time's diffs only (its 5 retractions, its insertion riding along)
    assert len(seen[0]) == 2 and all(s == seen[0] for s in seen)
    for name in seen[0]:
        query = sql.SQL("SELECT array_agg(w ORDER BY w) FROM pg_temp.{}").format(
            sql.Identifier(name)
        )
        assert sink_conn.execute(query).fetchone() == ([-1] * 5 + [1],)


def test_the_kept_diff_table_is_truncated_once_dead_rows_pile_up(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    rows = [(i, f"s{i}") for i in range(4000)]
    sink.populate([DiffBatch.inserts(rows)], lsn=1)
    model = Counter(rows)
    pages, nodes = [], set()
    for k in range(15):  # 250 retractions a time: deleted at each use, truncated past 1,000
        diffs = DiffBatch(rows[k * 250 : (k + 1) * 250], [-1] * 250)
        assert sink.apply(diffs, lsn=k + 2)
        apply_model(model, diffs)
        assert table_rows(pg_conn) == model
        (name,) = diff_tables(sink_conn)
        node, size = sink_conn.execute(
            "SELECT pg_relation_filenode(%s::regclass), pg_relation_size(%s::regclass) / 8192",
            (f"pg_temp.{name}", f"pg_temp.{name}"),
        ).fetchone()
        nodes.add(node)
        pages.append(size)
    # the file was replaced (truncated) every few times and never held more than ~6 times' rows
    assert len(nodes) >= 3
    assert max(pages) <= 6 * pages[0] < 15 * pages[0]


def test_unused_diff_tables_are_dropped_and_used_ones_kept(pg_conn, sink_conn):
    cat = ViewCatalog.open(pg_conn)
    cat.insert("v", "SELECT a, b FROM src", "public", "res")
    cat.insert("w", "SELECT x FROM src", "public", "res_w")
    sinks = [make_sink(sink_conn), make_sink(sink_conn, [("x", BIGINT)], view="w", table="res_w")]
    for sink, row in zip(sinks, [(1, "a"), (1,)], strict=True):
        sink.populate([DiffBatch.inserts([row])], lsn=1)
        assert sink.apply(DiffBatch([row], [-1]), lsn=2)
    assert set(diff_tables(pg_conn)) == {s.diff_table_name for s in sinks}
    drop_unused_diff_tables(sink_conn, [sinks[1].diff_table_name])
    assert set(diff_tables(pg_conn)) == {sinks[1].diff_table_name}
    assert sinks[0].apply(DiffBatch([(2, "b")], [1]), lsn=3)  # made again when needed
    assert sinks[0].apply(DiffBatch([(2, "b")], [-1]), lsn=4)
    assert table_rows(pg_conn) == Counter()
    drop_unused_diff_tables(sink_conn, [])
    assert diff_tables(pg_conn) == {}


def test_closing_the_sink_connection_drops_its_diff_tables(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    sink.populate([DiffBatch.inserts([(1, "a"), (2, "b")])], lsn=1)
    assert sink.apply(DiffBatch([(1, "a")], [-1]), lsn=2)
    assert len(diff_tables(pg_conn)) == 1
    close_sink_connection(sink_conn)
    assert sink_conn.closed and diff_tables(pg_conn) == {}


def test_deleting_a_missing_row_is_refused_in_strict_mode(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    sink.populate([DiffBatch.inserts([(1, "a")])], lsn=1)
    with pytest.raises(ViewError, match="re-populate"):
        sink.apply(DiffBatch([(1, "a"), (5, "new")], [-2, 1]), lsn=2)
    assert table_rows(pg_conn) == Counter({(1, "a"): 1}) and last_lsn(catalog) == 1
    lenient = make_sink(sink_conn, strict=False)
    assert lenient.apply(DiffBatch([(1, "a"), (5, "new")], [-2, 1]), lsn=2)
    assert table_rows(pg_conn) == Counter({(5, "new"): 1})


def test_unconsolidated_input_with_consolidate_flag(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    sink.populate([DiffBatch.inserts([(1, "a"), (1, "a")])], lsn=1)
    diffs = DiffBatch([(1, "a"), (1, "a"), (2, "b"), (2, "b"), (3, "c")], [-1, -1, 1, -1, 0])
    assert sink.apply(diffs, lsn=2, consolidate=True)
    assert table_rows(pg_conn) == Counter()


def test_apply_errors_name_the_fix(pg_conn, catalog, sink_conn):
    with pytest.raises(ViewError, match="populate the view"):
        make_sink(sink_conn).apply(DiffBatch.inserts([(1, "a")]), lsn=1)
    with pytest.raises(ViewError, match="not registered"):
        make_sink(sink_conn, view="nope").apply(DiffBatch(), lsn=1)
    pg_conn.execute("CREATE TABLE public.res (a int, c text)")
    with pytest.raises(ViewError, match="re-create the view"):
        make_sink(sink_conn).apply(DiffBatch(), lsn=1)
    with pytest.raises(ViewError, match="autocommit"):
        ResultSink(psycopg.connect(pg_conn.info.dsn), "v", "public", "res", COLS)


# -- population -----------------------------------------------------------------------------------


def test_populate_new_table_is_atomic(pg_conn, catalog, sink_conn):
    seen_during: list = []

    def batches():
        for i in range(3):
            yield DiffBatch.inserts([(i, f"r{i}"), (i, f"r{i}")])
            # meanwhile, other sessions see no result table at all
            seen_during.append(
                pg_conn.execute("SELECT to_regclass('myschema.res')::text").fetchone()[0]
            )

    sink = make_sink(sink_conn, schema="myschema")
    assert sink.populate(batches(), lsn=42) == 6
    assert seen_during == [None, None, None]
    assert table_rows(pg_conn, schema="myschema") == Counter(
        {(0, "r0"): 2, (1, "r1"): 2, (2, "r2"): 2}
    )
    assert last_lsn(catalog) == 42
    staging = staging_name("res")
    assert pg_conn.execute(f"SELECT to_regclass('myschema.{staging}')").fetchone()[0] is None
    cols = pg_conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'myschema' AND table_name = 'res' ORDER BY ordinal_position"
    ).fetchall()
    assert cols == [("a", "integer"), ("b", "text")]


def test_failed_population_leaves_no_table_and_no_lsn(pg_conn, catalog, sink_conn):
    def batches():
        yield DiffBatch.inserts([(1, "a")])
        raise RuntimeError("dataflow crashed")

    sink = make_sink(sink_conn)
    with pytest.raises(RuntimeError, match="crashed"):
        sink.populate(batches(), lsn=7)
    assert not sink.exists() and last_lsn(catalog) is None
    # a retry works (and would also clear a staging table a killed process left behind)
    sink_conn.execute(f'CREATE TABLE public."{staging_name("res")}" (junk int)')
    assert sink.populate([DiffBatch.inserts([(1, "a")])], lsn=7) == 1
    assert table_rows(pg_conn) == Counter({(1, "a"): 1})


def test_population_batches_may_retract_rows(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    batches = [
        DiffBatch([(1, "a"), (2, "b"), (None, None)], [3, 1, 2]),
        DiffBatch([(1, "a"), (None, None)], [-2, -1]),
    ]
    assert sink.populate(batches, lsn=3) == 3
    assert table_rows(pg_conn) == Counter({(1, "a"): 1, (2, "b"): 1, (None, None): 1})
    sink.drop()
    with pytest.raises(ViewError):
        sink.populate([DiffBatch([(1, "a")], [-1])], lsn=4)
    assert not sink.exists()


def test_repopulation_writes_only_the_difference(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    old = [(1, "a"), (1, "a"), (1, "a"), (2, "b"), (None, None), (3, None), (4, "d")] + [
        (i, "same") for i in range(10, 60)
    ]
    sink.populate([DiffBatch.inserts(old)], lsn=10)
    before = pg_conn.execute("SELECT ctid::text, xmin::text, a, b FROM public.res").fetchall()
    new = [(1, "a"), (1, "a"), (2, "b"), (2, "b"), (None, None), (None, None), (5, "e")] + [
        (i, "same") for i in range(10, 60)
    ]
    # fed in several batches, one with a retraction
    batches = [
        DiffBatch.inserts(new[:20]),
        DiffBatch.inserts(new[20:]),
        DiffBatch([(7, "gone")], [1]),
        DiffBatch([(7, "gone")], [-1]),
    ]
    written = sink.populate(batches, lsn=20)
    after = pg_conn.execute("SELECT ctid::text, xmin::text, a, b FROM public.res").fetchall()
    assert Counter((a, b) for _, _, a, b in after) == Counter(new)
    old_c, new_c = Counter(old), Counter(new)
    changes = sum(abs(new_c[r] - old_c[r]) for r in set(old_c) | set(new_c))
    assert written == changes == 6  # -1 (1,a), +1 (2,b), +1 NULL row, -(3,NULL), -(4,d), +(5,e)
    # every row kept is the very same tuple version: same ctid and xmin
    kept = set(before) & set(after)
    assert len(kept) == sum(min(old_c[r], new_c[r]) for r in old_c) == len(after) - 3
    assert last_lsn(catalog) == 20
    # re-population with identical content writes nothing
    same = pg_conn.execute("SELECT ctid::text, xmin::text FROM public.res").fetchall()
    assert sink.populate([DiffBatch.inserts(new)], lsn=30) == 0
    assert pg_conn.execute("SELECT ctid::text, xmin::text FROM public.res").fetchall() == same
    assert last_lsn(catalog) == 30


def test_drop_removes_table_and_staging(pg_conn, catalog, sink_conn):
    sink = make_sink(sink_conn)
    sink.populate([DiffBatch.inserts([(1, "a")])], lsn=1)
    sink_conn.execute(f'CREATE TABLE public."{staging_name("res")}" (x int)')
    sink.drop()
    assert not sink.exists()
    assert (
        pg_conn.execute(f"SELECT to_regclass('public.{staging_name('res')}')").fetchone()[0] is None
    )
    sink.drop()  # idempotent


def test_quoted_identifiers_and_long_names(pg_conn, catalog, sink_conn):
    long_table = "t" * 63
    assert len(staging_name(long_table)) <= 63 and staging_name(long_table) != long_table
    cols = [('we"ird col', INTEGER), ("Upper Case", TEXT)]
    catalog.insert("odd", "SELECT", 'my "schema"', long_table)
    sink = ResultSink(sink_conn, "odd", 'my "schema"', long_table, cols)
    sink.populate([DiffBatch.inserts([(1, "x"), (2, None)])], lsn=1)
    assert sink.apply(DiffBatch([(1, "x"), (3, "y")], [-1, 1]), lsn=2)
    assert table_rows(pg_conn, table=long_table, schema='my "schema"') == Counter(
        {(2, None): 1, (3, "y"): 1}
    )
    sink.drop()


# -- values ---------------------------------------------------------------------------------------

TYPED = [
    ("i2", SMALLINT),
    ("i8", BIGINT),
    ("n", NUMERIC),
    ("n2", numeric(10, 2)),
    ("r", REAL),
    ("d", DOUBLE),
    ("t", TEXT),
    ("vc", varchar(10)),
    ("ch", SqlType(TypeKind.CHAR, length=3)),
    ("dt", DATE),
    ("ts", TIMESTAMP),
    ("tz", TIMESTAMPTZ),
    ("iv", INTERVAL),
    ("tm", TIME),
    ("b", BOOLEAN),
]

TYPED_ROWS = [
    (
        1,
        2**62,
        Decimal("12345678901234567890.000123"),
        Decimal("1.50"),
        0.5,
        0.1,
        "héllo ✓",
        "short",
        "ab ",
        date(2024, 2, 29),
        datetime(2024, 1, 2, 3, 4, 5, 678901),
        datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        timedelta(days=-3, seconds=5, microseconds=7),
        time(23, 59, 59, 999999),
        True,
    ),
    (
        -32768,
        -(2**63),
        Decimal("NaN"),
        Decimal("-0.01"),
        float("inf"),
        float("-inf"),
        "",
        "",
        "xyz",
        date(1, 1, 1),
        datetime(9999, 12, 31, 23, 59, 59),
        datetime(1970, 1, 1, tzinfo=UTC),
        timedelta(0),
        time(0, 0),
        False,
    ),
    tuple([None] * len(TYPED)),
    tuple([None] * len(TYPED)),
]


@ARROW_OR_ROWS
def test_value_round_trip_and_delete_by_value(pg_conn, catalog, sink_conn, arrow):
    sink = make_sink(sink_conn, columns=TYPED, arrow_copy=arrow)
    sink.populate([DiffBatch.inserts(TYPED_ROWS[:1])], lsn=1)
    assert sink.apply(DiffBatch.inserts(TYPED_ROWS[1:]), lsn=2)
    got = table_rows(pg_conn)
    assert by_repr(got.elements()) == by_repr(TYPED_ROWS)
    nan_row = next(r for r in got if r[0] == -32768)
    assert nan_row[2].is_nan() and math.isinf(nan_row[4])
    cols = pg_conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'public.res'::regclass AND attnum > 0 ORDER BY attnum"
    ).fetchall()
    assert [c for (c,) in cols] == [t.sql() for _, t in TYPED]
    # deleting by value matches NaN, infinities, padded chars and NULLs exactly
    assert sink.apply(DiffBatch([TYPED_ROWS[0], TYPED_ROWS[1], TYPED_ROWS[2]], [-1, -1, -1]), 3)
    assert table_rows(pg_conn) == Counter({TYPED_ROWS[2]: 1})
    assert catalog.get("v").last_lsn == 3


@ARROW_OR_ROWS
def test_large_apply_streams(pg_conn, catalog, sink_conn, arrow):
    sink = make_sink(sink_conn, arrow_copy=arrow)
    n = 200_000
    sink.populate([], lsn=1)
    assert sink.apply(DiffBatch.inserts((i, f"row {i}") for i in range(n)), lsn=2)
    assert pg_conn.execute("SELECT count(*), count(DISTINCT a) FROM public.res").fetchone() == (
        n,
        n,
    )
    # 200k mixed diffs: delete the even rows, insert 100k new ones with weight 2
    rows = [(i, f"row {i}") for i in range(0, n, 2)] + [(i, "new") for i in range(n, n + 100_000)]
    weights = [-1] * (n // 2) + [2] * 100_000
    assert sink.apply(DiffBatch(rows, weights), lsn=3)
    got = pg_conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE b = 'new'), "
        "count(*) FILTER (WHERE a < 200000 AND a % 2 = 0) FROM public.res"
    ).fetchone()
    assert got == (n // 2 + 200_000, 200_000, 0)
    assert catalog.get("v").last_batch_rows == n // 2 + 200_000


@ARROW_OR_ROWS
def test_out_of_range_ints_are_refused_not_wrapped(pg_conn, catalog, sink_conn, arrow):
    # psycopg's binary int4 dumper would silently send 2**32 + 5 as 5
    sink = make_sink(sink_conn, arrow_copy=arrow)
    with pytest.raises(ViewError, match="integer out of range.*column a"):
        sink.populate([DiffBatch.inserts([(1, "a"), (2**32 + 5, "b")])], lsn=1)
    assert not sink.exists()
    sink.populate([DiffBatch.inserts([(1, "a")])], lsn=1)
    with pytest.raises(ViewError, match="out of range"):
        sink.apply(DiffBatch.inserts([(2**32 + 5, "b")]), lsn=2)
    small = ResultSink(sink_conn, "v", "public", "small", [("s", SMALLINT)], arrow_copy=arrow)
    with pytest.raises(ViewError, match="smallint out of range"):
        small.populate([DiffBatch.inserts([(70_000,)])], lsn=3)
    assert table_rows(pg_conn) == Counter({(1, "a"): 1}) and last_lsn(catalog) == 1


def row_hash_indexes(conn, table="res") -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s::regclass",
            (table,),
        ).fetchall()
        if "hash_record(ROW(" in r[0]
    ]


def test_deletes_find_rows_through_the_row_hash_index(pg_conn, catalog, sink_conn):
    """A few diffs against a large result table are looked up by the row-hash index, not by
    scanning the table (the plan of the multiset delete, with the diff table the sink stages)."""
    sink = make_sink(sink_conn)
    sink.populate([DiffBatch.inserts([(i % 5000, f"r{i}") for i in range(100_000)])], 1)
    assert len(row_hash_indexes(pg_conn)) == 1
    pg_conn.execute("ANALYZE res")
    with sink_conn.transaction(), sink_conn.cursor() as cur:
        sink._local_settings(cur)
        sink._create_tmp(cur, "incview_sink_diffs")
        sink._copy_weighted(cur, "incview_sink_diffs", [((7, "r7"), -1), ((8, "r8"), -1)])
        plan = "\n".join(
            r[0]
            for r in cur.execute(
                sql.SQL("EXPLAIN ") + sink._delete_sql(sink._target, "incview_sink_diffs")
            ).fetchall()
        )
    assert "Index Scan" in plan and "Seq Scan on res" not in plan, plan
    sink.apply(DiffBatch([(7, "r7"), (8, "r8"), (8, "new")], [-1, -1, 1]), 2)
    want = Counter((i % 5000, f"r{i}") for i in range(100_000) if i not in (7, 8))
    want[(8, "new")] += 1
    assert table_rows(pg_conn) == want


@ARROW_OR_ROWS
def test_rows_equal_in_another_spelling_are_deleted(pg_conn, catalog, sink_conn, arrow):
    """The index hashes values the way ``=`` compares them: numeric scale, char(n) padding."""
    cols = [("n", numeric(10, 3)), ("c", SqlType(TypeKind.CHAR, length=4)), ("i", SMALLINT)]
    sink = make_sink(sink_conn, cols, arrow_copy=arrow)
    sink.populate([DiffBatch.inserts([(Decimal("1.5"), "ab", 1), (None, None, None)] * 2)], 1)
    sink.apply(DiffBatch([(Decimal("1.50"), "ab  ", 1), (None, None, None)], [-1, -1]), 2)
    assert by_repr(table_rows(pg_conn)) == by_repr(
        [(Decimal("1.500"), "ab  ", 1), (None, None, None)]
    )


def test_a_result_table_without_the_index_gets_it(pg_conn, catalog, sink_conn):
    """Tables written by an older incview (or whose index was dropped) are indexed on first use."""
    sink = make_sink(sink_conn)
    sink.populate([DiffBatch.inserts([(1, "a"), (2, "b")])], 1)
    (index,) = row_hash_indexes(pg_conn)
    pg_conn.execute(f"DROP INDEX {index.split()[2]}")
    assert row_hash_indexes(pg_conn) == []
    make_sink(sink_conn).apply(DiffBatch([(1, "a")], [-1]), 2)
    assert len(row_hash_indexes(pg_conn)) == 1
    assert table_rows(pg_conn) == Counter([(2, "b")])
