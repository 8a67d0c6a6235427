"""The result sink's transaction of one time, in as few round trips as the time allows.

A time's transaction used to cost a round trip per statement: ``BEGIN``, the lock of the view's
catalog row, the ``SET LOCAL``s with the diff table's statement, the COPYs, the planner's row
count of the result table, the delete between two ``SET LOCAL enable_hashjoin``, the insert,
the catalog row's update and ``COMMIT``. Statements whose answer the sink does not need before
the next one share a round trip here (sent as one simple query: no parameters, the values are
literals):

* ``open_time``: ``BEGIN``, the locking read of the view's applied LSN with the result table's
  ``reltuples``, and what the time sends first (its settings, its diff table's statement);
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

from engine.postgres.view_catalog import ViewCatalog, int_to_lsn, lsn_to_int

_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR, TransactionStatus.ACTIVE)


def open_time(
    cur: psycopg.Cursor, view: str, target: str, then: sql.Composable | None
) -> tuple[bool, int | None, float]:
    """``BEGIN``, lock ``view``'s catalog row and send ``then``, in one round trip. Returns
    (whether the row exists, its applied LSN, the planner's row count of the table ``target``:
    infinite when unknown, i.e. never vacuumed nor analyzed)."""
    rows = sql.SQL(
        "(SELECT CASE WHEN reltuples < 0 THEN NULL ELSE reltuples END "
        "FROM pg_catalog.pg_class WHERE oid = to_regclass({}))"
    ).format(sql.Literal(target))
    parts = [sql.SQL("BEGIN"), ViewCatalog.applied_lsn_query(view, lock=True, also=rows)]
    if then is not None:
        parts.append(then)
    cur.execute(sql.SQL("; ").join(parts), prepare=False)
    cur.nextset()  # past BEGIN's result, to the locking read's
    row = cur.fetchone()
    if row is None:
        return False, None, float("inf")
    lsn = lsn_to_int(row[0]) if row[0] is not None else None
    return True, lsn, float("inf") if row[1] is None else float(row[1])


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
    guard = sql.SQL(" AND (last_lsn IS NULL OR last_lsn < {}::pg_lsn)").format(
        sql.Literal(int_to_lsn(lsn))
    )
    cur.execute(ViewCatalog.applied_statement(view, lsn, 0, ms, when) + guard, prepare=False)
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
