"""The result sink: writes a view's consolidated diffs into its Postgres result table, exactly once.

``ResultSink.apply(diffs, lsn)`` runs ONE transaction that locks the view's row in
``incview.views``, skips the batch if the view already reflects ``lsn`` (a replay after a crash),
binary-COPYs the rows with a negative weight into a temp table (never ANALYZEd; kept for the
session, one per row layout, emptied before each use) and deletes exactly ``|w|`` physical
copies of each (multiset-exact: duplicates and NULLs included, rows found through the result
table's row-hash index, matched with ``IS NOT DISTINCT FROM`` and picked by ``ctid``: the cost
follows the diffs, not the table), COPYs ``w`` copies of every row with a positive weight
straight into the result table, and records the LSN, so results and LSN commit together; its
statements share round trips where they can (``sink_transaction``). The COPY data is encoded
from Arrow columns with no Python per row (``sink_column_path``, ``diff_copy``, ``copy_binary``;
tuple batches are converted once); a time whose output the dataflow spilled to disk, a
``SpilledOutput``, is COPYed chunk by chunk, never whole in memory. Tables with inet, cidr or
array columns (and ``arrow_copy=False``) keep the row path (``sink_row_path``).
``populate(batches, lsn)`` writes a view's whole content (``sink_population``); the SQL about the
table and its checks are in ``sink_sql``. The sink uses its own dedicated AUTOCOMMIT connection
(each operation opens its own transaction); it must not plan, keep view state, advance
replication slots, or write anything in the database besides its result table (with its row-hash
index), its staging table, its session's temp tables and the view's row in ``incview.views``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

import psycopg
from psycopg import sql

from engine.dataflow.batch import DiffBatch
from engine.dataflow.spilled_output import SpilledOutput
from engine.errors import ViewError
from engine.postgres import interval_dumpers, values
from engine.postgres import sink_transaction as tx
from engine.postgres.arrays import array_literal
from engine.postgres.diff_copy import DiffCopy
from engine.postgres.diff_weights import DiffWeights
from engine.postgres.sink_column_path import SinkColumnPath
from engine.postgres.sink_population import SinkPopulation
from engine.postgres.sink_row_path import DIFFS, SinkRowPath
from engine.postgres.sink_sql import SESSION_DIFFS, SinkStatements
from engine.postgres.view_catalog import ViewCatalog
from engine.sql.types import BIGINT, SqlType, TypeKind
from engine.view_names import STAGING_SUFFIX

# psycopg type names for binary COPY (``Copy.set_types``). The server decodes each field with the
# *column's* receive function, so string types all travel with the text dumper/loader (psycopg
# has no binary bpchar dumper) and numeric(p,s) with the plain numeric one.
COPY_TYPES: dict[TypeKind, str] = {
    TypeKind.SMALLINT: "int2",
    TypeKind.INTEGER: "int4",
    TypeKind.BIGINT: "int8",
    TypeKind.NUMERIC: "numeric",
    TypeKind.REAL: "float4",
    TypeKind.DOUBLE: "float8",
    TypeKind.TEXT: "text",
    TypeKind.VARCHAR: "text",
    TypeKind.CHAR: "text",
    TypeKind.BOOLEAN: "bool",
    TypeKind.DATE: "date",
    TypeKind.TIMESTAMP: "timestamp",
    TypeKind.TIMESTAMPTZ: "timestamptz",
    TypeKind.INTERVAL: "interval",
    TypeKind.TIME: "time",
    TypeKind.UUID: "uuid",
    TypeKind.BYTEA: "bytea",
    TypeKind.NAME: "text",
    TypeKind.ENUM: "text",
    # these go by text COPY (``_TEXT_COPY``), parsed by the column's input function
    TypeKind.JSONB: "text",
    TypeKind.JSON: "text",
    TypeKind.INET: "text",
    TypeKind.CIDR: "text",
    TypeKind.ARRAY: "text",
    TypeKind.UNKNOWN: "text",
}
# Kinds whose binary form is not their text: a table with such a column is COPYed as text.
_TEXT_COPY = frozenset({TypeKind.JSONB, TypeKind.INET, TypeKind.CIDR, TypeKind.ARRAY})
# Kinds the Arrow COPY (``diff_copy``) has no binary encoding of: tables with such a column
# keep the row path (psycopg ``write_row``, text COPY).
_ROW_COPY_ONLY = frozenset({TypeKind.INET, TypeKind.CIDR, TypeKind.ARRAY})


def _array_encoder(columns: list[tuple[str, SqlType]]) -> Callable[[tuple], tuple] | None:
    """A row mapper writing array columns (tuples) as array input text; None without arrays."""
    arrays = [i for i, (_, t) in enumerate(columns) if t.kind is TypeKind.ARRAY]
    if not arrays:
        return None

    def encode(row: tuple) -> tuple:
        row = list(row)
        for i in arrays:
            if row[i] is not None:
                row[i] = array_literal(row[i], values.input_text)
        return tuple(row)

    return encode


TX_WORK_MEM = "64MB"
# a delete of fewer rows than 1/_HASH_DELETE_SHARE of the table's goes through the row-hash index
_HASH_DELETE_SHARE = 2
_PROBE_MIN_ROWS = 1_000
SESSION_TEMP_BUFFERS = "64MB"
# ResultSink._local_settings
_LOCAL_SETTINGS = (
    f"SET LOCAL jit = off; SET LOCAL work_mem = '{TX_WORK_MEM}'; SET LOCAL enable_mergejoin = off"
)

_HASH_JOINS_OFF = sql.SQL("SET LOCAL enable_hashjoin = off")
_HASH_JOINS_ON = sql.SQL("SET LOCAL enable_hashjoin = on")

_NARROW_INTS = (TypeKind.SMALLINT, TypeKind.INTEGER)


def close_sink_connection(conn: psycopg.Connection) -> None:
    """Close a sink connection, dropping the diff tables its session kept first (a closed
    session's temp tables are otherwise dropped by its server process as it exits, after the
    close returned)."""
    if not conn.closed:
        with contextlib.suppress(psycopg.Error):
            conn.execute("DISCARD TEMP")
    conn.close()


def drop_unused_diff_tables(conn: psycopg.Connection, used: Iterable[str]) -> None:
    """Drop the diff tables ``conn``'s session kept that no sink named in ``used`` writes
    (``ResultSink.diff_table_name``): after a view was dropped, its layout's table unless an
    open view shares it. Only on a connection no other thread is writing through."""
    keep = set(used)
    rows = conn.execute(
        "SELECT relname::text FROM pg_class WHERE relnamespace = pg_my_temp_schema() "
        "AND starts_with(relname::text, %s)",
        (SESSION_DIFFS,),
    ).fetchall()
    for (name,) in rows:
        if name not in keep:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(sql.Identifier(name)))


def _widened(t: SqlType) -> SqlType:
    """The type of a column in the diff temp tables (narrow ints widened to bigint)."""
    return BIGINT if t.kind in _NARROW_INTS else t


# rows COPYed into a kept diff table past which its next use truncates it rather than deletes
_DIFF_TABLE_SLACK = 1_000
_MAX_IDENT = 63  # NAMEDATALEN - 1: Postgres truncates longer identifiers silently


def staging_name(table: str) -> str:
    """``<table>__incview_new``, shortened (with a hash) so Postgres never truncates it onto
    ``table`` itself or onto another table's staging name."""
    name = table + STAGING_SUFFIX
    if len(name.encode()) <= _MAX_IDENT:
        return name
    digest = hashlib.sha1(table.encode()).hexdigest()[:8]
    head = table.encode()[: _MAX_IDENT - len(STAGING_SUFFIX) - 9].decode(errors="ignore")
    return f"{head}_{digest}{STAGING_SUFFIX}"


class ResultSink(SinkStatements, SinkColumnPath, SinkRowPath, SinkPopulation):
    """Writes one view's diffs into ``schema.table`` over a dedicated autocommit connection.

    ``columns`` are the result table's columns, in order, with their types; rows passed to
    ``apply``/``populate`` are tuples of the Python values psycopg returns for those types.
    ``strict`` (default): a delete that finds fewer copies of a row than its weight asks for means
    the result table no longer matches the view; the transaction is rolled back and ``ViewError``
    raised (re-populate the view to repair it). ``arrow_copy`` (default): ``apply`` writes from
    Arrow columns by binary COPY (``diff_copy``); False keeps the row path (benchmarks compare).
    """

    def __init__(
        self,
        conn: psycopg.Connection,
        view: str,
        schema: str,
        table: str,
        columns: list[tuple[str, SqlType]],
        *,
        strict: bool = True,
        arrow_copy: bool = True,
    ) -> None:
        if not conn.autocommit:
            raise ViewError(
                f"the result sink of view {view} needs an autocommit connection (it opens one "
                "transaction per batch itself): connect with psycopg.connect(dsn, autocommit=True)"
            )
        if not columns:
            raise ViewError(f"view {view} has no output columns: a result table needs at least one")
        names = [n for n, _ in columns]
        if len(set(names)) != len(names):
            dups = sorted({n for n in names if names.count(n) > 1})
            raise ViewError(
                f"view {view} has duplicate output column names {dups}: give each output "
                "column a distinct alias (SELECT ... AS name)"
            )
        self.conn = conn
        interval_dumpers.register(conn)  # months, days and time apart (PgInterval)
        self.view = view
        self.schema = schema
        self.table = table
        self.columns = list(columns)
        self.strict = strict
        self._copy_types = [COPY_TYPES[t.kind] for _, t in columns]
        self._format = sql.SQL(
            "TEXT" if any(t.kind in _TEXT_COPY for _, t in columns) else "BINARY"
        )
        self._encode = _array_encoder(self.columns)
        # psycopg's binary int2/int4 dumpers wrap out-of-range ints silently (2**40 -> 0): the
        # diff tables hold them as bigint so the server range-checks them on INSERT, and
        # population checks them in Python (_check_int_ranges)
        self._tmp_types = [_widened(t) for _, t in columns]
        self._tmp_copy_types = [COPY_TYPES[t.kind] for t in self._tmp_types]
        self._narrow_ints = [
            (i, n, t) for i, (n, t) in enumerate(columns) if t.kind in _NARROW_INTS
        ]
        self._target = sql.Identifier(schema, table)
        # BEGIN and the locking read that open every time, rendered once
        self._opening = sql.SQL(
            tx.opening_statement(view, self._target.as_string(conn)).as_string(conn)
        )
        #: the planner's row count of the result table, read when a time's transaction opened
        self._target_rows: float | None = None
        self._staging = sql.Identifier(schema, staging_name(table))
        self._checked = False
        # apply() COPYs a time's diffs from columns (diff_copy): retractions into the diff table,
        # insertions straight into the result table; False (or a column _ROW_COPY_ONLY): rows
        # by write_row into the diff table, then DELETE and INSERT ... SELECT
        self.arrow_copy = arrow_copy and not any(t.kind in _ROW_COPY_ONLY for _, t in columns)
        self._diff_copy = (
            DiffCopy(
                conn,
                [t for _, t in columns],
                self._copy_types,
                self._tmp_types,
                self._tmp_copy_types,
            )
            if self.arrow_copy
            else None
        )
        self._build_statements()
        self._configure_session()

    def _configure_session(self) -> None:
        """Bigger temp-table buffers for the diff tables; Postgres only accepts this before the
        session first touches a temp table, so on a used connection it is skipped."""
        with contextlib.suppress(psycopg.errors.InvalidParameterValue):
            self.conn.execute(f"SET temp_buffers = '{SESSION_TEMP_BUFFERS}'")

    @staticmethod
    def _local_settings(cur: psycopg.Cursor) -> None:
        """Per-transaction planner settings (SET LOCAL: nothing leaks into the session).

        No JIT: compiling the delete's expressions costs more than running them. Sorts and
        hashes of a 100k-diff batch stay in memory. No merge join: the multiset delete must hash
        the (small) diff table and stream the result table past it, never sort the result table.
        """
        cur.execute(_LOCAL_SETTINGS)

    # -- SQL ------------------------------------------------------------------------------------

    @property
    def diff_table_name(self) -> str:
        """The name of the temp table this sink keeps its times' diffs in (``_diff_table``)."""
        return self._session_diffs

    def _diff_table(self, cur: psycopg.Cursor) -> str:
        """The session's diff table of this sink's row layout, emptied (``_diff_table_sql``);
        its name."""
        cur.execute(self._diff_table_sql())
        return self._session_diffs

    def _diff_table_sql(self, *, settings: bool = False) -> sql.Composed:
        """The statement that creates the session's diff table of this sink's row layout if the
        session has none yet (a new connection, or its creating transaction rolled back) and
        empties it; ``settings``: ``_local_settings`` first.

        Kept for the session and emptied at each use, in one statement with the ``CREATE ...
        IF NOT EXISTS`` (it holds the last time's diffs until then; ``close_sink_connection``
        drops it): by ``DELETE``, or by ``TRUNCATE`` once ``_DIFF_TABLE_SLACK`` rows were COPYed
        into it since the last, so its dead rows stay few (nothing vacuums a temp table, and
        the planner sizes a never-analyzed table by its pages). A temp table created and dropped
        in each time wrote ~21 KB of catalog WAL (a truncation ~2 KB, a delete ~50 bytes), which
        the slot's decoding reads back (``docs/dataflow.md``, the result sink). Not ``ON COMMIT
        DELETE ROWS``: every commit touching temp tables truncates all such tables of the
        session, the other views' too. Statements that read it are never prepared
        (``prepare=False``): a cached generic plan would keep the table's size from the time it
        was planned.
        """
        name = sql.Identifier(self._session_diffs)
        truncate = self._diff_rows > _DIFF_TABLE_SLACK
        if truncate:
            self._diff_rows = 0
        return sql.SQL("{}CREATE TEMP TABLE IF NOT EXISTS {} ({}); {} {}").format(
            sql.SQL(_LOCAL_SETTINGS + "; " if settings else ""),
            name,
            self._tmp_defs,
            sql.SQL("TRUNCATE" if truncate else "DELETE FROM"),
            name,
        )

    # -- checks ---------------------------------------------------------------------------------
    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"

    def _lock_view(self, cur: psycopg.Cursor) -> int | None:
        try:
            lsn = ViewCatalog.applied_lsn(cur, self.view, lock=True)
        except psycopg.errors.UndefinedTable:
            raise self._no_catalog() from None
        if cur.rowcount == 0:
            raise self._unregistered()
        return lsn

    def _no_catalog(self) -> ViewError:
        return ViewError(
            f"the incview catalog (incview.views) does not exist in this database, so view "
            f"{self.view} cannot record what it applied: open it with ViewCatalog.open(conn)"
        )

    def _unregistered(self) -> ViewError:
        return ViewError(
            f"view {self.view} is not registered in incview.views, so its sink cannot record "
            "the applied LSN: create the view (ViewCatalog.insert) before writing results"
        )

    @contextlib.contextmanager
    def _failures(self, what: str) -> Iterator[None]:
        """A write's failure as a ViewError naming ``what`` (it was rolled back); connection
        losses and ViewErrors go through as they are."""
        try:
            yield
        except (ViewError, psycopg.OperationalError, psycopg.InterfaceError):
            raise
        except (psycopg.Error, TypeError, ValueError, OverflowError) as e:
            raise ViewError(
                f"{what} into result table {self.qualified_name} of view {self.view} failed and "
                f"was rolled back (no rows and no LSN changed): {type(e).__name__}: {e}"
            ) from e

    # -- running phase --------------------------------------------------------------------------
    def apply(
        self,
        diffs: DiffBatch,
        lsn: int,
        commit_time: datetime | None = None,
        *,
        consolidate: bool = False,
    ) -> bool:
        """Apply one time's diffs and record ``lsn``, in one transaction; returns False (and
        writes nothing) if the view already reflects ``lsn``.

        ``diffs`` must be consolidated (distinct rows, what the dataflow's sink emits per time);
        pass ``consolidate=True`` to have it done here (costs a dict update per diff). With
        ``strict`` on, a repeated row with negative weight makes the delete find too few rows
        and raises instead of writing a wrong result. The transaction's statements share round
        trips where they can (``sink_transaction``).
        """
        start = time.perf_counter()
        opening: sql.Composable | None = sql.SQL(_LOCAL_SETTINGS)
        if isinstance(diffs, SpilledOutput):
            what, write = f"applying {len(diffs)} spilled diffs", self._write_spilled
        else:
            if consolidate:
                diffs = diffs.consolidate()
            if not len(diffs) and self._checked:
                return self._record_unchanged(lsn, start, commit_time)
            what = f"applying {len(diffs)} diffs"
            if self._diff_copy is None:
                write = self._write_rows
            else:
                weights = DiffWeights.of(diffs)
                write = functools.partial(self._write_columns, weights=weights)
                if weights.n_del:  # the SET LOCALs go with the diff table's statement
                    opening = self._diff_table_sql(settings=True)
        with (
            self._failures(f"{what} at LSN {lsn:X}"),
            self.conn.cursor() as cur,
            tx.rolled_back_on_error(self.conn),
        ):
            try:
                if self._holds(cur, lsn, opening):
                    cur.execute("ROLLBACK")
                    return False
                written = write(cur, diffs)
            finally:
                self._target_rows = None
            ms = (time.perf_counter() - start) * 1000.0
            tx.commit_time(cur, self.view, lsn, written, ms, commit_time)
        return True

    def _record_unchanged(self, lsn: int, start: float, commit_time: datetime | None) -> bool:
        """``apply`` of a time without diffs: the catalog row's update alone (one round trip)."""
        with self._failures(f"recording LSN {lsn:X}"), self.conn.cursor() as cur:
            ms = (time.perf_counter() - start) * 1000.0
            try:
                if tx.record_if_behind(cur, self.view, lsn, ms, commit_time):
                    return True
                ViewCatalog.applied_lsn(cur, self.view)
            except psycopg.errors.UndefinedTable:
                raise self._no_catalog() from None
            if cur.rowcount == 0:
                raise self._unregistered()
        return False

    def _holds(self, cur, lsn: int, then: sql.Composable | None) -> bool:
        """Open the time's transaction: lock the view's row, sending ``then`` along; whether the
        result table already holds ``lsn`` (then the caller writes nothing). Keeps the result
        table's planner row count for ``_delete_tmp``. Checks once that the result table exists.
        """
        try:
            registered, applied, self._target_rows = tx.open_time(cur, self._opening, then)
        except psycopg.errors.UndefinedTable:
            raise self._no_catalog() from None
        if not registered:
            raise self._unregistered()
        if applied is not None and applied >= lsn:
            return True
        if not self._checked:
            if not self._check_table(cur):
                raise ViewError(
                    f"result table {self.qualified_name} of view {self.view} does not "
                    "exist: populate the view before applying changes"
                )
            self._checked = True
        return False

    def _write_spilled(self, cur: psycopg.Cursor, diffs: SpilledOutput) -> int:
        """A time whose output stayed on disk: its chunks are COPYed one after the other (never
        all in memory), in the same one transaction: by columns, retractions into the diff
        table and insertions straight into the result table, the delete at the end (a
        consolidated time holds each row once, so no insertion can match a retraction); or by
        the row path into the diff table. Returns the rows deleted + inserted (``apply`` made
        the ``SET LOCAL``s)."""
        if self._diff_copy is None:
            n_del, n_ins, multi = self._copy_spilled_rows(cur, diffs)
            self._apply_tmp(cur, self._target, DIFFS, n_del, n_ins, multi)
        else:
            n_del, n_ins = self._copy_spilled_columns(cur, diffs)
            if n_del:
                self._delete_tmp(cur, self._target, self._session_diffs, n_del)
        return n_del + n_ins

    def _apply_tmp(
        self,
        cur: psycopg.Cursor,
        target: sql.Composable,
        tmp: str,
        n_del: int,
        n_ins: int,
        multi: bool,
    ) -> None:
        """Delete the retractions of ``tmp`` from ``target`` and insert its insertions, in one
        round trip."""
        inserts = []
        if n_ins:
            inserts.append(self._insert_sql(target, tmp, single=True))
            if multi:
                inserts.append(self._insert_sql(target, tmp, single=False))
        if n_del:
            self._delete_tmp(cur, target, tmp, n_del, then=inserts)
        elif inserts:
            cur.execute(sql.SQL("; ").join(inserts), prepare=False)

    @staticmethod
    def _estimated_rows(cur: psycopg.Cursor, table: sql.Composable) -> float:
        """The planner's row count of ``table`` (``sink_transaction.table_rows_sql``)."""
        query = sql.SQL("SELECT {}").format(tx.table_rows_sql(table.as_string(cur)))
        row = cur.execute(query).fetchone()
        return tx.as_rows(row[0] if row else None)

    def _delete_tmp(
        self,
        cur: psycopg.Cursor,
        target: sql.Composable,
        tmp: str,
        n_del: int,
        then: list[sql.Composable] | None = None,
    ) -> None:
        """Delete ``-w`` copies of every row of ``tmp`` with ``w < 0`` from ``target`` (with the
        statements ``then`` in the same round trip); in strict mode, raise unless exactly
        ``n_del`` rows went.

        Unless the diffs are a large share of the table (``_HASH_DELETE_SHARE``), the rows are
        looked up one by one through the row-hash index (hash joins off for this statement): the
        planner, without statistics of the diff table, otherwise tends to hash the whole result
        table (measured, 100k deletes from 1M rows: ~1.2 s of server CPU hashing vs ~0.6 s). A
        few deletes (under ``_PROBE_MIN_ROWS``) it looks up by the index itself. The table's
        size is the planner's row count, read when ``apply`` opened the time (else asked here).
        """
        probe = n_del >= _PROBE_MIN_ROWS and _HASH_DELETE_SHARE * n_del < self._rows_of(cur, target)
        statements: list[sql.Composable] = [self._delete_sql(target, tmp)]
        if probe:
            statements = [_HASH_JOINS_OFF, *statements, _HASH_JOINS_ON]
        cur.execute(sql.SQL("; ").join([*statements, *(then or [])]), prepare=False)
        deleted = tx.rowcount_of(cur, "DELETE")
        if self.strict and deleted != n_del:
            raise ViewError(
                f"result table {self.qualified_name} of view {self.view} no longer matches "
                f"the view: {n_del - deleted} of {n_del} rows to delete were not found "
                "(was the table changed outside incview?); re-populate the view to repair it"
            )

    def _rows_of(self, cur: psycopg.Cursor, target: sql.Composable) -> float:
        if target is self._target and self._target_rows is not None:
            return self._target_rows
        return self._estimated_rows(cur, target)

    # -- housekeeping ---------------------------------------------------------------------------
    def drop(self) -> None:
        """Drop the result table and any staging table a failed population left behind."""
        drop_result_table(self.conn, self.schema, self.table)
        self._checked = False

    def exists(self) -> bool:
        with self.conn.cursor() as cur:
            return self._table_columns(cur, self._target) is not None

    def row_count(self, conn: psycopg.Connection | None = None) -> int:
        """The result table's row count (a full count, not an estimate), read through ``conn``
        (default: the sink's)."""
        row = (
            (conn or self.conn)
            .execute(sql.SQL("SELECT count(*) FROM {}").format(self._target))
            .fetchone()
        )
        assert row is not None
        return int(row[0])


def drop_result_table(conn: psycopg.Connection, schema: str, table: str) -> None:
    """Drop a view's result table and its staging table, if they exist (also for a view whose
    columns are unknown here: one this process has not opened, or could not plan)."""
    with conn.transaction():
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, table)))
        staging = sql.Identifier(schema, staging_name(table))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging))
