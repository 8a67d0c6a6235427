"""Population payloads of the Spark snapshot source: Arrow columns or pickled rows, round trip."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pyarrow as pa

from engine.dataflow.batch import DiffBatch
from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.spark.snapshot_source import decode_batch, encode_batch


def test_columns_travel_as_arrow_and_rows_as_pickles():
    columns = [
        pa.array([1, None, 3], pa.int64()),
        pa.array([Decimal("1.50"), None, Decimal("-2.00")], pa.decimal128(12, 2)),
        pa.array(["a", "", None], pa.string()),
        pa.array([0.5, math.nan, -0.0], pa.float64()),
    ]
    batch = DiffBatch.from_columns(columns, np.ones(3, np.int64))
    payload = encode_batch(batch)
    assert payload[:1] == b"A"
    back = decode_batch(bytearray(payload))  # toLocalIterator gives bytearrays
    assert back.columns is not None and [c.type for c in back.columns] == [c.type for c in columns]
    assert [tuple(map(repr, r)) for r in back.rows] == [tuple(map(repr, r)) for r in batch.rows]
    assert back.rows[1][3] is NAN  # the shared NaN object
    rows = DiffBatch.inserts([(1, NUMERIC_NAN), (2, Decimal("3.1"))])
    payload = encode_batch(rows)
    assert payload[:1] == b"P"
    back = decode_batch(bytearray(payload))
    assert back.rows == rows.rows and back.rows[0][1] is NUMERIC_NAN and back.weights == [1, 1]


def test_a_slice_is_read_as_arrow_unless_its_view_computes_on_tuples(pg_dsn, pg_conn):
    """The source's task reads a slice by ADBC (an Arrow payload) or, for a slice planned with
    ``arrow=False`` (the view's first stateful collection is a row one), by the row reader."""
    from engine.postgres.snapshot import snapshot_reader
    from engine.spark.snapshot_source import SnapshotReader, TableSlice, encode_plan
    from engine.sql.catalog import DictCatalog

    pg_conn.execute("CREATE TABLE public.nums (id bigint, x numeric(10,2))")
    pg_conn.execute("INSERT INTO public.nums SELECT g, g / 4.0 FROM generate_series(1, 500) g")
    table = DictCatalog({"nums": {"id": "bigint", "x": "numeric(10,2)"}}).lookup(None, "nums")
    with snapshot_reader(pg_dsn) as snap:
        slices = [TableSlice(table, ("id", "x"), 0, None, None, arrow) for arrow in (True, False)]
        options = {"dsn": pg_dsn, "snapshot": snap.export_snapshot(), "plan": encode_plan(slices)}
        reader = SnapshotReader(options)
        payloads = [[p for _, p in reader.read(s)] for s in reader.partitions()]
    assert {p[:1] for p in payloads[0]} == {b"A"} and {p[:1] for p in payloads[1]} == {b"P"}
    as_arrow, as_rows = ([r for p in ps for r in decode_batch(p).rows] for ps in payloads)
    assert sorted(as_arrow) == sorted(as_rows) and len(as_rows) == 500
