"""Population reads as Arrow columns: a source table's rows under the population snapshot, read by
ADBC's PostgreSQL driver (libpq's binary COPY decoded into Arrow in C++, no Python per value).

``ArrowSnapshot(conninfo, snapshot_name)`` opens one ADBC connection whose REPEATABLE READ READ
ONLY transaction imports the population reader's exported snapshot (``SET TRANSACTION
SNAPSHOT``), so every table it reads shows exactly the rows the row reader
(``engine.postgres.snapshot``) would. ``read(table, columns, where_sql)`` yields insert-only
``DiffBatch``es of Arrow columns typed as the CDC's columnar decoder types them
(``text_columns.vector_type``: int64, float64, decimal128(p, s), string, bool, date32,
timestamp[us] and timestamp[us, UTC]), so population and CDC batches meet the same columnar
collections. ``arrow_readable`` says which column types it takes; a table with any other column
type (interval, arrays, enums, jsonb, unconstrained numeric, ...) is read by the row reader.

Values are the row reader's: real goes through its shortest text form (0.1::real reads 0.1), a
numeric NaN or Infinity makes that column's values Decimals (the engine's shared NaN) and the
batch rows, a date or timestamp outside Python's years 1-9999 (BC, infinity) is refused with the
row reader's error. This module must not write to the database or filter CDC transactions.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from engine.dataflow.batch import DiffBatch
from engine.dataflow.columnar.arrow_types import arrow_type, to_python
from engine.dataflow.nan import NUMERIC_NAN
from engine.errors import ViewError
from engine.sql.catalog import SourceTable
from engine.sql.types import SqlType, TypeKind

try:
    import adbc_driver_postgresql.dbapi as adbc
except ImportError:  # pragma: no cover - a dependency; the row reader serves without it
    adbc = None

#: what a failing ``ArrowSnapshot.query`` raises
QUERY_ERRORS: tuple[type[Exception], ...] = (adbc.Error,) if adbc is not None else ()

_STRINGS = (TypeKind.TEXT, TypeKind.VARCHAR, TypeKind.CHAR, TypeKind.NAME)
_INTS = (TypeKind.SMALLINT, TypeKind.INTEGER, TypeKind.BIGINT)
_SIMPLE = {
    TypeKind.DOUBLE: ("{}::float8", pa.float64()),
    # the shortest text form, as pgoutput sends it and the row reader reads it
    TypeKind.REAL: ("{}::text::float8", pa.float64()),
    TypeKind.BOOLEAN: ("{}::boolean", pa.bool_()),
    TypeKind.DATE: ("{}::date", pa.date32()),
    TypeKind.TIMESTAMP: ("{}::timestamp", pa.timestamp("us")),
    TypeKind.TIMESTAMPTZ: ("{}::timestamptz", pa.timestamp("us", tz="UTC")),
}
# the days and microseconds since 1970-01-01 of Python's first and last representable values
_FIRST_DAY = (datetime.date(1, 1, 1) - datetime.date(1970, 1, 1)).days
_LAST_DAY = (datetime.date(9999, 12, 31) - datetime.date(1970, 1, 1)).days
_US_PER_DAY = 86_400_000_000


def read_as(t: SqlType) -> tuple[str, pa.DataType] | None:
    """The SELECT item template (``{}`` the column) and the Arrow type of a column of ``t``, or
    None when the row reader must read it."""
    if t.kind in _INTS:
        return "{}::int8", pa.int64()
    if t.kind in _STRINGS:
        return "{}::text", pa.string()  # character(n) without its padding, as ::text drops it
    if t.kind is TypeKind.NUMERIC:
        typ = arrow_type(t)
        if t.precision is None or typ is None or (t.scale or 0) < 0:
            return None  # unconstrained: each value its own scale (Decimals)
        # as text: ADBC decodes binary numerics into strings itself, ~2.5x slower than
        # Postgres' numeric_out (TPC-H Q1's four numeric columns of 6M lines: 7.3 s -> 2.7 s
        # read and cast); exact either way, the cast to decimal128(p, s) is Arrow's
        return "{}::text", typ
    return _SIMPLE.get(t.kind)


def arrow_readable(table: SourceTable, columns: list[str]) -> bool:
    """Whether ``columns`` of ``table`` can all be read as Arrow (and ADBC is installed)."""
    if adbc is None or not columns:
        return False
    types = {c.name: c.type for c in table.columns}
    return all(name in types and read_as(types[name]) is not None for name in columns)


def select_query(
    table: SourceTable, columns: list[str], where_sql: str | None
) -> tuple[str, list[pa.DataType]]:
    """The SELECT that reads ``columns`` (``arrow_readable``) and the Arrow type of each."""
    types = {c.name: c.type for c in table.columns}
    items, arrow_types = [], []
    for name in columns:
        template, typ = read_as(types[name])  # type: ignore[misc]
        items.append(sql.SQL(template).format(sql.Identifier(name)))
        arrow_types.append(typ)
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(items), sql.Identifier(table.schema, table.name)
    )
    if where_sql:
        query = sql.SQL("{} WHERE {}").format(query, sql.SQL(where_sql))
    return query.as_string(), arrow_types


class ArrowSnapshot:
    """One ADBC connection reading in the snapshot ``snapshot_name`` (see the module docstring);
    with ``lock_timeout_ms``, a read waits at most that long for a table's lock. Close it (or use
    it as a context manager) before the exporting transaction ends."""

    def __init__(
        self, conninfo: str, snapshot_name: str, lock_timeout_ms: int | None = None
    ) -> None:
        if adbc is None:
            raise RuntimeError("adbc-driver-postgresql is not installed")
        self._conn = adbc.connect(conninfo)
        self._conn.adbc_connection.set_autocommit(True)
        self._cur = self._conn.cursor()
        try:
            for statement in (
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                sql.SQL("SET TRANSACTION SNAPSHOT {}")
                .format(sql.Literal(snapshot_name))
                .as_string(),
                "SET LOCAL extra_float_digits = 1",
            ):
                self._cur.execute(statement)
            if lock_timeout_ms is not None:  # give up rather than queue behind an ALTER TABLE
                self._cur.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout_ms)}ms'")
        except Exception:
            self.close()
            raise

    def __enter__(self) -> ArrowSnapshot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._cur.close()
        finally:
            self._conn.close()

    def query(self, query: str) -> pa.Table:
        """The result of ``query`` in the snapshot, as an Arrow table. A failing query raises
        and is rolled back to a savepoint: the snapshot's transaction goes on."""
        self._cur.execute("SAVEPOINT incview_query")
        try:
            self._cur.execute(query)
            result = self._cur.fetch_arrow_table()
        except Exception:
            self._cur.execute("ROLLBACK TO SAVEPOINT incview_query")
            raise
        self._cur.execute("RELEASE SAVEPOINT incview_query")
        return result

    def read(
        self, table: SourceTable, columns: list[str], where_sql: str | None = None
    ) -> Iterator[DiffBatch]:
        """``table``'s rows (``columns``, filtered by ``where_sql``) as insert-only batches of
        Arrow columns (``arrow_readable`` must hold)."""
        query, types = select_query(table, columns, where_sql)
        try:
            self._cur.execute(query)
            reader = self._cur.fetch_record_batch()
            for batch in reader:
                if batch.num_rows:
                    yield _diffs(table, columns, batch, types)
        except ViewError:
            raise
        except Exception as e:
            raise ViewError(
                f"reading table {table.qualified_name} for population failed: "
                f"{type(e).__name__}: {e}"
            ) from e


def _diffs(
    table: SourceTable, names: list[str], batch: pa.RecordBatch, types: list[pa.DataType]
) -> DiffBatch:
    """A record batch as a DiffBatch of inserts: Arrow columns of ``types``, or rows when a
    numeric column holds NaN or Infinity."""
    columns: list = []
    for name, array, typ in zip(names, batch.columns, types, strict=True):
        columns.append(typed_column(table, name, array, typ))
    n = batch.num_rows
    if all(isinstance(c, pa.Array) for c in columns):
        return DiffBatch.from_columns(columns, np.ones(n, np.int64))
    values = [c if isinstance(c, list) else to_python(c) for c in columns]
    return DiffBatch(list(zip(*values, strict=True)), [1] * n)


def typed_column(
    table: SourceTable, name: str, array: pa.Array, typ: pa.DataType
) -> pa.Array | list:
    if pa.types.is_decimal(typ):
        text = array.storage if isinstance(array.type, pa.ExtensionType) else array
        try:
            return pc.cast(text, typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            # NaN or Infinity: Decimals (the engine's one NaN object), as the row reader gives
            return [_decimal(v) for v in text.to_pylist()]
    if array.type != typ:
        array = array.cast(typ)
    if pa.types.is_date32(typ) or pa.types.is_timestamp(typ):
        _check_range(table, name, array)
    return array


def _decimal(text: str | None) -> Decimal | None:
    if text is None:
        return None
    value = Decimal(text)
    return NUMERIC_NAN if value.is_nan() else value


def _check_range(table: SourceTable, name: str, array: pa.Array) -> None:
    """Refuse a date or timestamp Python cannot hold (BC, infinity), as the row reader does."""
    if array.null_count == len(array):
        return
    bounds = pc.min_max(array.view(pa.int32() if pa.types.is_date32(array.type) else pa.int64()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    first, last = _FIRST_DAY, _LAST_DAY
    if pa.types.is_timestamp(array.type):
        first, last = _FIRST_DAY * _US_PER_DAY, (_LAST_DAY + 1) * _US_PER_DAY - 1
    if low < first or high > last:
        raise ViewError(
            f"table {table.qualified_name} holds a value incview cannot represent in Python "
            f"(column {name}: a date or timestamp before year 1 or after 9999, or infinity); "
            "change or filter out that value (e.g. infinite dates) and populate again"
        )
