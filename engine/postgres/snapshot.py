"""Population reads: a source table's rows under one consistent snapshot, as insert-only DiffBatches.

``read_table(conn_or_conninfo, table, columns, where_sql, snapshot_name)`` runs
``COPY (SELECT <columns> FROM schema.table [WHERE ...]) TO STDOUT (FORMAT BINARY)`` inside a
REPEATABLE READ READ ONLY transaction (importing ``snapshot_name`` with ``SET TRANSACTION
SNAPSHOT`` when given, e.g. the one ``CdcReader.exported_snapshot()`` exported with the slot) and
yields ``DiffBatch.inserts`` of up to ``batch_rows`` rows. Being a query, it reads a partitioned
table's partitions and an inheritance parent's children, as the view's query does (``COPY
parent TO`` would read the parent's own rows only, and refuses a partitioned table). Values arrive exactly as the CDC
decoder (``engine.postgres.values``) produces them: ``int``, ``Decimal``, ``float``, ``str``,
``bool``, ``date``, naive/UTC-aware ``datetime``, ``time``, ``timedelta`` (``real`` is read
through its shortest text form, as pgoutput sends it, so 0.1::real reads as 0.1; a float or
numeric NaN is the engine's one shared NaN object, ``engine.dataflow.nan``). Given a
conninfo string, it opens and closes its own connection; given an idle connection, it runs its own
transaction on it (restoring the connection's isolation settings afterwards); given a connection
already inside a REPEATABLE READ transaction, it reads in that transaction and leaves it open.
This module must not write to the database, create slots, or filter CDC transactions itself.

When the slot already exists, several tables must be read in ONE transaction together with that
transaction's ``pg_current_snapshot()`` (the caller then skips CDC transactions visible in it,
``cdc.visible_in_snapshot``)::

    with snapshot_reader(dsn) as snap:        # BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY
        snap.snapshot                         # PgSnapshot of this very transaction
        for batch in snap.read_table(orders, ["id", "amount"], "amount > 0"):
            ...
        for batch in snap.read_table(customers, ["id", "name"]):
            ...
        snap.export_snapshot()                # name for parallel readers (SET TRANSACTION SNAPSHOT)
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.adapt import Loader
from psycopg.pq import Format, TransactionStatus

from engine.dataflow.batch import DiffBatch
from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.errors import ViewError
from engine.pg_interval import PgInterval
from engine.postgres import arrow_snapshot, values
from engine.postgres.arrow_snapshot import ArrowSnapshot, arrow_readable, select_query
from engine.postgres.cdc import PgSnapshot, current_snapshot
from engine.postgres.sink import COPY_TYPES
from engine.sql.catalog import SourceTable
from engine.sql.types import TypeKind

Progress = Callable[[int, int | None], None]

# Settings of the reading transaction (SET LOCAL): the values must come out as the CDC decoder
# gives them, i.e. timestamptz in UTC and real through its shortest round-trip text form.
_LOCAL_SETTINGS = "SET LOCAL TIME ZONE 'UTC'; SET LOCAL extra_float_digits = 1"
_SNAPSHOT_ISOLATION = ("repeatable read", "serializable")
# tables smaller than this are read by the row reader: ADBC's connection costs ~40 ms to open
SMALL_TABLE_BYTES = 1 << 20


_unpack_float8 = struct.Struct("!d").unpack
_NUMERIC_NAN_SIGN = b"\xc0\x00"  # binary numeric: ndigits, weight, sign (0xC000: NaN), dscale


class _Float8Loader(Loader):
    """Binary float8 whose NaN is the shared ``NAN`` (psycopg's loader makes a new one each time)."""

    format = Format.BINARY

    def load(self, data: Any) -> float:
        (v,) = _unpack_float8(data)
        return NAN if v != v else v


_unpack_interval = struct.Struct("!qii").unpack  # microseconds, days, months


class _IntervalLoader(Loader):
    """Binary interval as ``PgInterval`` (months, days and time apart, as CDC decodes it;
    psycopg's loader folds a month into 30 days)."""

    format = Format.BINARY

    def load(self, data: Any) -> PgInterval:
        micros, days, months = _unpack_interval(data)
        return PgInterval(months, days, micros)


class _NumericLoader(Loader):
    """psycopg's binary numeric loader, but NaN is the shared ``NUMERIC_NAN``."""

    format = Format.BINARY

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        base = psycopg.adapters.get_loader(oid, Format.BINARY)
        assert base is not None
        self._load = base(oid, context).load

    def load(self, data: Any) -> Any:
        if data[4:6] == _NUMERIC_NAN_SIGN:
            return NUMERIC_NAN
        return self._load(data)


def _display(table: SourceTable) -> str:
    return table.qualified_name


def _copy_query(
    table: SourceTable, columns: list[str], where_sql: str | None
) -> tuple[sql.Composed, list[str], list[tuple[int, Callable]]]:
    """The ``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)`` statement, the COPY type names and
    the columns read as text that a parser turns into their values (arrays)."""
    by_name = {c.name: c for c in table.columns}
    missing = [c for c in columns if c not in by_name]
    if missing:
        raise ViewError(
            f"table {_display(table)} has no column(s) {missing} (it has "
            f"{[c.name for c in table.columns]}): re-create the view against the table's "
            "current columns"
        )
    items: list[sql.Composable] = []
    types: list[str] = []
    parsed: list[tuple[int, Callable]] = []
    for i, name in enumerate(columns):
        t = by_name[name].type
        ident = sql.Identifier(name)
        if t.kind is TypeKind.REAL:
            # binary float4 widened to float8 would read 0.1 as 0.10000000149011612; pgoutput
            # sends the shortest text form, which Python parses as 0.1
            items.append(sql.SQL("{}::text::float8").format(ident))
            types.append("float8")
        elif t.kind is TypeKind.CHAR:
            # character(n) without its padding, as the CDC decoder gives it (values.parse_bpchar)
            items.append(sql.SQL("{}::text").format(ident))
            types.append("text")
        elif t.text_carried or t.kind is TypeKind.ARRAY:
            # jsonb, inet, enums: their output function's text (types.TEXT_CARRIED), as pgoutput
            # sends it (format's %s; inet's ::text would show a /32); arrays: parsed from it
            # into tuples, as the CDC decoder does
            if t.kind is TypeKind.ARRAY:
                items.append(sql.SQL("{}::text").format(ident))
            else:  # format('%s', NULL) is ''
                items.append(sql.SQL("nullif(format('%s', {}), '')").format(ident))
            types.append("text")
            if t.kind is TypeKind.ARRAY:
                parsed.append((i, values.parser_for_type(t)))
        else:
            items.append(ident)
            types.append(COPY_TYPES[t.kind])
    select = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(items) if items else sql.SQL(""),
        sql.Identifier(table.schema, table.name),
    )
    if where_sql:
        select = sql.SQL("{} WHERE {}").format(select, sql.SQL(where_sql))
    return sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(select), types, parsed


def _parse_columns(rows: list[tuple], parsed: list[tuple[int, Callable]]) -> list[tuple]:
    """``rows`` with the text of each column in ``parsed`` turned into its value."""
    out = []
    for row in rows:
        row = list(row)
        for i, parse in parsed:
            if row[i] is not None:
                row[i] = parse(row[i].encode())
        out.append(tuple(row))
    return out


def _row_estimate(cur: psycopg.Cursor, table: SourceTable) -> int | None:
    row = cur.execute(
        "SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (table.schema, table.name),
    ).fetchone()
    if row is None or row[0] is None or row[0] < 0:  # -1: never vacuumed/analyzed
        return None
    return int(row[0])


def _copy_rows(
    conn: psycopg.Connection,
    table: SourceTable,
    columns: list[str],
    where_sql: str | None,
    batch_rows: int,
    progress: Progress | None,
) -> Iterator[DiffBatch]:
    """COPY the rows out inside ``conn``'s current transaction."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    query, types, parsed = _copy_query(table, columns, where_sql)
    with _read_errors(table), conn.cursor() as cur:
        # NaN as the engine's one NaN object, as the CDC decoder gives it (values.parse_float)
        cur.adapters.register_loader("float8", _Float8Loader)
        cur.adapters.register_loader("numeric", _NumericLoader)
        cur.adapters.register_loader("interval", _IntervalLoader)
        cur.execute(_LOCAL_SETTINGS)
        estimate = _row_estimate(cur, table) if progress is not None else None
        done = 0
        with cur.copy(query) as cp:
            cp.set_types(types)
            rows_iter = cp.rows()
            while True:
                chunk = list(islice(rows_iter, batch_rows))
                if not chunk:
                    break
                done += len(chunk)
                if parsed:
                    chunk = _parse_columns(chunk, parsed)
                if progress is not None:
                    progress(done, estimate)
                yield DiffBatch(chunk, [1] * len(chunk))
        if progress is not None and done == 0:
            progress(0, estimate)


@contextlib.contextmanager
def _read_errors(table: SourceTable) -> Iterator[None]:
    """A population read's failures as ViewErrors that say what to do."""
    try:
        yield
    except psycopg.errors.UndefinedTable as e:
        raise ViewError(
            f"source table {_display(table)} does not exist (any more): re-create the view "
            f"against an existing table ({e.diag.message_primary})"
        ) from e
    except psycopg.errors.UndefinedColumn as e:
        raise ViewError(
            f"reading table {_display(table)} failed: {e.diag.message_primary}; the table's "
            "columns changed since the view was planned: re-create the view"
        ) from e
    except psycopg.DataError as e:
        raise ViewError(
            f"table {_display(table)} holds a value incview cannot represent in Python "
            f"({e}); change or filter out that value (e.g. infinite dates) and populate again"
        ) from e


def _require_snapshot_tx(conn: psycopg.Connection, snapshot_name: str | None) -> None:
    if snapshot_name is not None:
        raise ViewError(
            f"cannot import snapshot {snapshot_name}: the connection is already inside a "
            "transaction, and SET TRANSACTION SNAPSHOT must be its first statement; pass an "
            "idle connection or a conninfo string"
        )
    row = conn.execute("SELECT current_setting('transaction_isolation')").fetchone()
    level = row[0] if row else None
    if level not in _SNAPSHOT_ISOLATION:
        raise ViewError(
            f"population reads need a REPEATABLE READ transaction, but the connection's "
            f"transaction runs at {level}: use snapshot_reader() or pass an idle connection"
        )


@contextlib.contextmanager
def _repeatable_read(
    conn: psycopg.Connection, snapshot_name: str | None, lock_timeout_ms: int | None = None
) -> Iterator[psycopg.Connection]:
    """A REPEATABLE READ READ ONLY transaction on the idle ``conn`` (attributes restored after);
    with ``lock_timeout_ms``, its statements wait at most that long for a lock."""
    saved = (conn.isolation_level, conn.read_only)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    try:
        with conn.transaction():
            if snapshot_name is not None:
                try:
                    conn.execute(
                        sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name))
                    )
                except psycopg.Error as e:
                    raise ViewError(
                        f"cannot import snapshot {snapshot_name!r}: {e.diag.message_primary or e}; "
                        "an exported snapshot lives only while the transaction or replication "
                        "connection that exported it stays open"
                    ) from e
            if lock_timeout_ms is not None:
                conn.execute(
                    sql.SQL("SET LOCAL lock_timeout = {}").format(
                        sql.Literal(f"{int(lock_timeout_ms)}ms")
                    )
                )
            yield conn
    finally:
        if conn.info.transaction_status == TransactionStatus.IDLE:
            conn.isolation_level, conn.read_only = saved


def read_table(
    conn_or_conninfo: psycopg.Connection | str,
    table: SourceTable,
    columns: list[str],
    where_sql: str | None = None,
    snapshot_name: str | None = None,
    batch_rows: int = 50_000,
    progress: Progress | None = None,
    lock_timeout_ms: int | None = None,
) -> Iterator[DiffBatch]:
    """Yield ``table``'s rows (``columns``, filtered by ``where_sql``) as insert-only batches.

    ``progress(rows_copied, estimate)`` is called after every batch (and once with 0 for an
    empty result); ``estimate`` is ``pg_class.reltuples`` of the whole table, None when unknown.
    See the module docstring for which transaction the rows are read in. ``lock_timeout_ms``
    (a conninfo's own transaction only): give up (``LockNotAvailable``) rather than wait longer
    for the table's lock, e.g. behind a queued ALTER TABLE.
    """
    if isinstance(conn_or_conninfo, str):
        conn = psycopg.connect(conn_or_conninfo, autocommit=True)
        try:
            with _repeatable_read(conn, snapshot_name, lock_timeout_ms):
                yield from _copy_rows(conn, table, columns, where_sql, batch_rows, progress)
        finally:
            conn.close()
        return
    conn = conn_or_conninfo
    if conn.info.transaction_status == TransactionStatus.IDLE:
        with _repeatable_read(conn, snapshot_name):
            yield from _copy_rows(conn, table, columns, where_sql, batch_rows, progress)
    else:
        _require_snapshot_tx(conn, snapshot_name)
        yield from _copy_rows(conn, table, columns, where_sql, batch_rows, progress)


class SnapshotReader:
    """Reads several tables in ONE REPEATABLE READ READ ONLY transaction (see ``snapshot_reader``).

    ``snapshot`` is that transaction's ``pg_current_snapshot()``: a CDC transaction is already in
    the population data exactly when ``visible_in_snapshot(xid, snapshot)``.
    """

    def __init__(
        self, conn: psycopg.Connection, snapshot: PgSnapshot, conninfo: str | None = None
    ) -> None:
        self.conn = conn
        self.snapshot = snapshot
        # with a conninfo, tables of Arrow-readable columns are read by ADBC in this snapshot
        self._conninfo = conninfo
        self._arrow: ArrowSnapshot | None = None

    def read_table(
        self,
        table: SourceTable,
        columns: list[str],
        where_sql: str | None = None,
        batch_rows: int = 50_000,
        progress: Progress | None = None,
        arrow: bool = True,
    ) -> Iterator[DiffBatch]:
        """As ``read_table``, in this reader's transaction. Consume each iterator fully (or
        close it) before starting the next one: the connection runs one COPY at a time.
        ``arrow=False``: by the row reader (the consumer computes on tuples anyway)."""
        if self.reads_arrow(table, columns, arrow):
            return self._read_arrow(table, columns, where_sql, batch_rows, progress)
        return _copy_rows(self.conn, table, columns, where_sql, batch_rows, progress)

    def reads_arrow(self, table: SourceTable, columns: list[str], arrow: bool = True) -> bool:
        """Whether ``read_table(table, columns, arrow=arrow)`` reads by ADBC (Arrow columns)."""
        readable = self._conninfo is not None and arrow_readable(table, columns)
        return arrow and readable and not self._small(table)

    def _small(self, table: SourceTable) -> bool:
        """Whether ``table`` is a plain table of less than ``SMALL_TABLE_BYTES`` without
        inheritance children: the row reader reads it faster than a second connection opens."""
        row = self.conn.execute(
            "SELECT c.relkind = 'r' AND pg_relation_size(c.oid) < %s"
            " AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid)"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s",
            (SMALL_TABLE_BYTES, table.schema, table.name),
        ).fetchone()
        return bool(row and row[0])

    def _read_arrow(
        self,
        table: SourceTable,
        columns: list[str],
        where_sql: str | None,
        batch_rows: int,
        progress: Progress | None,
    ) -> Iterator[DiffBatch]:
        """``read_table`` as Arrow columns by ADBC (``engine.postgres.arrow_snapshot``), in a
        connection that imported this reader's snapshot."""
        estimate = self.check_read(table, columns, where_sql, progress is not None)
        done = 0
        for batch in self.read_arrow_on(self.arrow_reader(), table, columns, where_sql, batch_rows):
            done += len(batch)
            if progress is not None:
                progress(done, estimate)
            yield batch
        if progress is not None and done == 0:
            progress(0, estimate)

    def check_read(
        self, table: SourceTable, columns: list[str], where_sql: str | None, estimate: bool = False
    ) -> int | None:
        """Plan the read on this connection (``LIMIT 0``), so that a missing table or column
        fails with the row reader's errors before ADBC reads; with ``estimate``, return the
        table's estimated rows."""
        query, _ = select_query(table, columns, where_sql)
        with _read_errors(table), self.conn.cursor() as cur:
            cur.execute(f"{query} LIMIT 0")
            return _row_estimate(cur, table) if estimate else None

    @staticmethod
    def read_arrow_on(
        snap: ArrowSnapshot,
        table: SourceTable,
        columns: list[str],
        where_sql: str | None,
        batch_rows: int = 50_000,
    ) -> Iterator[DiffBatch]:
        """``table``'s rows read by ``snap`` (``arrow_reader`` or ``open_arrow_reader``: a
        connection in this snapshot) in batches of up to ``batch_rows``; ``check_read`` first."""
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
        for read in snap.read(table, columns, where_sql):
            yield from read.slices(batch_rows)

    def query_arrow(self, query: str) -> pa.Table | None:
        """``query``'s result in this snapshot as an Arrow table (by ADBC), or None without an
        Arrow reader. A failing query raises; the snapshot's transaction goes on."""
        if self._conninfo is None or arrow_snapshot.adbc is None:
            return None
        return self.arrow_reader().query(query)

    def arrow_reader(self) -> ArrowSnapshot:
        """The ADBC connection in this reader's snapshot, opened on first use."""
        if self._arrow is None:
            self._arrow = self.open_arrow_reader()
        return self._arrow

    def open_arrow_reader(self) -> ArrowSnapshot:
        """Another ADBC connection in this reader's snapshot, for a parallel read; the caller
        closes it before this reader closes. Uses this reader's connection: not while another
        thread reads on it."""
        assert self._conninfo is not None
        return ArrowSnapshot(self._conninfo, self.export_snapshot())

    def close(self) -> None:
        """Close the Arrow reader's connection (the reader's own transaction is the caller's)."""
        if self._arrow is not None:
            self._arrow.close()
            self._arrow = None

    def lock_tables(self, tables: list[SourceTable]) -> None:
        """Take ACCESS SHARE locks on ``tables`` (and their partitions or children) in this
        reader's transaction, as its COPYs would: held until the reader closes, so that a
        session holding a conflicting lock is waited for (and reported) here, once, rather
        than by each parallel reader."""
        if tables:
            self.conn.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
                    sql.SQL(", ").join(sql.Identifier(t.schema, t.name) for t in tables)
                )
            )

    def export_snapshot(self) -> str:
        """``pg_export_snapshot()``: other connections can read this same snapshot with
        ``read_table(..., snapshot_name=...)`` while this reader stays open (parallel reads)."""
        row = self.conn.execute("SELECT pg_export_snapshot()").fetchone()
        assert row is not None
        return str(row[0])


@contextlib.contextmanager
def snapshot_reader(conninfo: str, snapshot_name: str | None = None) -> Iterator[SnapshotReader]:
    """Open a connection and a REPEATABLE READ READ ONLY transaction (importing ``snapshot_name``
    if given), take ``pg_current_snapshot()`` as its first query, and yield a ``SnapshotReader``.
    The transaction ends (read-only: nothing to commit) and the connection closes on exit.
    Tables whose columns are all ``arrow_readable`` are read as Arrow columns by ADBC in the same
    snapshot (``engine.postgres.arrow_snapshot``; ``INCVIEW_ARROW_POPULATION=0`` turns it off),
    the others by binary COPY into rows."""
    conn = psycopg.connect(conninfo, autocommit=True)
    try:
        with _repeatable_read(conn, snapshot_name):
            # INCVIEW_ARROW_POPULATION=0: every table by the row reader (a baseline, a way out)
            arrow = os.environ.get("INCVIEW_ARROW_POPULATION", "1") != "0"
            reader = SnapshotReader(conn, current_snapshot(conn), conninfo if arrow else None)
            try:
                yield reader
            finally:
                reader.close()
    finally:
        conn.close()
