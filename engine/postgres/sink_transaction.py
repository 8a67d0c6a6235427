"""The result sink's transaction of one time, in as few round trips as the time allows.

A time's transaction used to cost a round trip per statement: ``BEGIN``, the lock of the view's
catalog row, the ``SET LOCAL``s with the diff table's statement, the COPYs, the planner's row
count of the result table, the delete between two ``SET LOCAL enable_hashjoin``, the insert,
the catalog row's update and ``COMMIT``. Statements whose answer the sink does not need before
the next one share a round trip here (sent as one simple query: no parameters, the values are
literals):

* ``open_time``: ``BEGIN``, the locking read of the view's applied LSN with the result table's
  ``reltuples`` (``opening_statement``, made once per sink), and what the time sends first (its
  settings, its diff table's statement);
* ``commit_time``: the catalog row's update and ``COMMIT``;
* ``record_if_behind``: a time without diffs is one autocommit ``UPDATE`` of the catalog row,
  guarded by its LSN (the row lock is the update's own);
* ``rowcount_of``: the row count of one statement of several sent together.

``rolled_back_on_error`` ends a transaction the body left open or failed with ``ROLLBACK``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from engine.postgres.view_catalog import ViewCatalog, lsn_to_int

_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR, TransactionStatus.ACTIVE)


def table_rows_sql(table: str) -> sql.Composed:
    """The planner's row count of ``table`` (``pg_class.reltuples``, NULL when unknown: never
    vacuumed nor analyzed), as a scalar subquery; ``as_rows`` reads its value."""
    return sql.SQL(
        "(SELECT CASE WHEN reltuples < 0 THEN NULL ELSE reltuples END "
        "FROM pg_catalog.pg_class WHERE oid = to_regclass({}))"
    ).format(sql.Literal(table))


def as_rows(value: float | None) -> float:
    """``table_rows_sql``'s value as a row count: infinite when unknown (then the table is one
    that index lookups suit)."""
    return float("inf") if value is None else float(value)


def opening_statement(view: str, target: str) -> sql.Composed:
    """``BEGIN`` and the locking read of ``view``'s applied LSN with ``target``'s planner row
    count: the start of every time of a sink (made once per sink)."""
    read = ViewCatalog.applied_lsn_query(view, lock=True, also=table_rows_sql(target))
    return sql.SQL("BEGIN; ") + read


def open_time(
    cur: psycopg.Cursor, opening: sql.Composable, then: sql.Composable | None
) -> tuple[bool, int | None, float]:
    """Send ``opening`` (``opening_statement``) and ``then`` in one round trip. Returns (whether
    the view's row exists, its applied LSN, the result table's planner row count)."""
    cur.execute(opening if then is None else sql.SQL("; ").join([opening, then]), prepare=False)
    cur.nextset()  # past BEGIN's result, to the locking read's
    row = cur.fetchone()
    if row is None:
        return False, None, float("inf")
    return True, lsn_to_int(row[0]) if row[0] is not None else None, as_rows(row[1])


def commit_time(
    cur: psycopg.Cursor, view: str, lsn: int, rows: int, ms: float, when: datetime | None
) -> None:
    """Record that ``view`` reflects ``lsn`` (``ViewCatalog.record_applied``) and ``COMMIT``, in
    one round trip."""
    statement = ViewCatalog.applied_statement(view, lsn, rows, ms, when)
    cur.execute(sql.SQL("{}; COMMIT").format(statement), prepare=False)


def record_if_behind(
    cur: psycopg.Cursor, view: str, lsn: int, ms: float, when: datetime | None
) -> bool:
    """Outside a transaction: record ``lsn`` for a time that wrote nothing, unless the view's row
    already holds ``lsn`` or a later one; whether it was recorded. An unregistered view records
    nothing either (the caller tells the two apart)."""
    statement = ViewCatalog.applied_statement(view, lsn, 0, ms, when, only_if_behind=True)
    cur.execute(statement, prepare=False)
    return cur.rowcount == 1


def rowcount_of(cur: psycopg.Cursor, verb: str) -> int:
    """The row count of the first of the statements just executed together whose command
    status starts with ``verb`` (e.g. ``DELETE``)."""
    while True:
        status = cur.statusmessage or ""
        if status.startswith(verb):
            return cur.rowcount
        if not cur.nextset():
            raise AssertionError(f"no {verb} among the statements sent")  # a bug of the caller


@contextlib.contextmanager
def rolled_back_on_error(conn: psycopg.Connection) -> Iterator[None]:
    """On an exception, ``ROLLBACK`` the transaction the body opened (if the connection is still
    usable), then re-raise."""
    try:
        yield
    except BaseException:
        if not conn.closed and conn.info.transaction_status in _OPEN:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
        raise
