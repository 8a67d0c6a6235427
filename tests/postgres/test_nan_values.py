"""NaN at the Postgres edges, against a real PostgreSQL: CDC decoding and population COPY give the
engine's one shared NaN object (``engine.dataflow.nan``) for double precision, real and numeric,
and the sink writes and deletes NaN rows."""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal

import psycopg

from engine.dataflow.batch import DiffBatch
from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.postgres.cdc import CdcReader
from engine.postgres.sink import ResultSink
from engine.postgres.snapshot import read_table
from engine.postgres.view_catalog import ViewCatalog
from engine.sql.catalog import DictCatalog
from engine.sql.types import DOUBLE, INTEGER

TABLE_SQL = (
    "CREATE TABLE public.f (id int, d double precision, r real, n numeric);"
    "ALTER TABLE public.f REPLICA IDENTITY FULL"
)
ROWS_SQL = (
    "INSERT INTO public.f VALUES (1, 'NaN', 'NaN', 'NaN'), (2, 'Infinity', '-Infinity', 2.5),"
    " (3, 0.1, 0.1, NULL), (4, NULL, NULL, 'NaN')"
)
F = DictCatalog({"f": {"id": "int", "d": "double precision", "r": "real", "n": "numeric"}})


def check_rows(rows: list[tuple]) -> None:
    by_id = {r[0]: r for r in rows}
    assert by_id[1][1] is NAN and by_id[1][2] is NAN and by_id[1][3] is NUMERIC_NAN
    assert by_id[4][3] is NUMERIC_NAN
    assert by_id[2][1:] == (math.inf, -math.inf, Decimal("2.5"))
    assert by_id[3][1:] == (0.1, 0.1, None)


def test_population_copy_gives_the_shared_nan(pg_dsn, pg_conn):
    pg_conn.execute(TABLE_SQL)
    pg_conn.execute(ROWS_SQL)
    batches = list(read_table(pg_dsn, F.lookup(None, "f"), ["id", "d", "r", "n"]))
    check_rows([r for b in batches for r in b.rows])


def test_cdc_gives_the_shared_nan_and_an_update_cancels(pg_dsn, pg_conn):
    pg_conn.execute(TABLE_SQL)
    reader = CdcReader(pg_dsn, slot="test_nan", publication="test_nan_pub")
    try:
        reader.ensure(["f"])
        pg_conn.execute(ROWS_SQL)
        pg_conn.execute("UPDATE public.f SET id = id WHERE id = 1")  # -old +new, equal rows
        reader.flush_wal()
        txs = reader.poll(10000)
        assert len(txs) == 2
        check_rows(txs[0].changes["public.f"].rows)
        assert not txs[1].changes["public.f"].consolidate()
    finally:
        reader.drop()
        reader.close()


def test_sink_writes_and_deletes_nan_rows(pg_dsn, pg_conn):
    ViewCatalog.open(pg_conn).insert("v", "SELECT a, x FROM src", "public", "res")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        sink = ResultSink(conn, "v", "public", "res", [("a", INTEGER), ("x", DOUBLE)])
        sink.populate([DiffBatch.inserts([(1, NAN), (1, NAN), (2, math.inf)])], lsn=1)
        assert sink.apply(DiffBatch.inserts([(3, NAN), (4, -math.inf)]), lsn=2)
        assert sink.apply(DiffBatch([(1, NAN), (3, NAN), (2, math.inf)], [-2, -1, -1]), lsn=3)
    left = pg_conn.execute("SELECT a, x::text FROM public.res").fetchall()
    assert Counter(left) == Counter({(4, "-Infinity"): 1})
    assert pg_conn.execute("SELECT 'NaN'::float8 = 'NaN'::float8").fetchone()[0] is True
