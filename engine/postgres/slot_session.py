"""One session on incview's logical slot: its connection, the advisory lock every peek and
advance takes, and the two cheap questions a streaming source asks between batches (where do
the slot's transactions end; flush the WAL so the last commits are readable).

``CdcReader`` (``engine.postgres.cdc``) is a ``SlotSession`` that also decodes. The Spark
source's offset work runs in a Python process of its own beside every streaming query and uses
a bare ``SlotSession``: this module imports psycopg and nothing heavy (no pgoutput decoding, no
Arrow), which keeps that process small.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from psycopg import sql

from engine.errors import ViewError
from engine.postgres.pgoutput import format_lsn, parse_lsn, quote_ident

# Session settings the text-format value parsers rely on (engine.postgres.values).
SESSION_SETTINGS = {
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
    "extra_float_digits": "1",
    "bytea_output": "hex",
    "synchronous_commit": "on",  # flush_wal() relies on our own commits being flushed
}


#: a peek of the slot under ``slot_lock``'s advisory lock in ONE statement (one round trip, not
#: four): the outer row takes the lock, held until the statement's implicit transaction ends (an
#: autocommit session), and the peek, lateral to it (an argument depends on it), runs after it
PEEK_SQL = (
    "SELECT p.data FROM (SELECT pg_advisory_xact_lock(hashtext(%s))::text) AS l(held), "
    "LATERAL pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, 'proto_version', '1', "
    "'publication_names', %s || l.held) AS p(lsn, xid, data)"
)

#: ``commit_ends``' question, one statement under the lock too: the Commit messages of a peek
#: (byte 0 'C'; bytes 10-17 the transaction's end LSN), numbered among all its messages
_COMMIT_ENDS_SQL = (
    "SELECT n, total, substring(data from 11 for 8) FROM ("
    "SELECT row_number() OVER () AS n, count(*) OVER () AS total, data "
    f"FROM ({PEEK_SQL}) m) s WHERE get_byte(data, 0) = 67"
)


class SlotSession:
    """``conninfo``'s autocommit session on ``slot`` (publication ``publication``)."""

    def __init__(self, conninfo: str, slot: str, publication: str) -> None:
        self.conninfo = conninfo
        self.slot = slot
        self.publication = publication
        self._conn: psycopg.Connection | None = None

    def connection(self) -> psycopg.Connection:
        """The reader's own autocommit session, with the settings the value parsers need."""
        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(self.conninfo, autocommit=True)
            for name, value in SESSION_SETTINGS.items():
                conn.execute(
                    sql.SQL("SET {} TO {}").format(sql.Identifier(name), sql.Literal(value))
                )
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def slot_lock(self) -> Iterator[psycopg.Connection]:
        """The reader's connection inside a transaction holding the slot's advisory lock.

        A logical slot serves one backend at a time (a second peek fails with "replication slot
        ... is active"): every peek and advance of incview's slot, from any process (Spark tasks,
        several streaming queries, the local runner), takes this lock first (a peek takes it in
        its own statement: ``PEEK_SQL``)."""
        conn = self.connection()
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._lock_key,))
            yield conn

    @property
    def _lock_key(self) -> str:
        return f"incview.slot:{self.slot}"

    def peek_params(self, upto_lsn: int | None, limit: int | None) -> tuple:
        """``PEEK_SQL``'s parameters: the messages after the confirmed position (``limit``
        changes or, a peek stopping only between transactions, a little more; with
        ``upto_lsn``, only the transactions whose commit record starts before it)."""
        upto = format_lsn(upto_lsn) if upto_lsn is not None else None
        return (self._lock_key, self.slot, upto, limit, quote_ident(self.publication))

    def _peek_error(self, e: psycopg.errors.UndefinedObject) -> ViewError:
        if "replication slot" in str(e):
            return self._no_slot()
        return ViewError(
            f"reading slot {self.slot}: {e}; the publication {self.publication} must "
            "exist before the slot's first change (call ensure() before creating the slot)"
        )

    def _no_slot(self) -> ViewError:
        return ViewError(
            f"replication slot {self.slot} does not exist; call CdcReader.ensure(tables) (or "
            "exported_snapshot()) to create it"
        )

    def commit_ends(self, limit: int) -> tuple[list[tuple[int, int]], int]:
        """Where the transactions in the slot end, without shipping their rows: a peek of about
        ``limit`` messages from the confirmed position, filtered in the server to the Commit
        messages. Returns ([(end_lsn, messages up to and including that commit)], messages read);
        fewer messages read than ``limit`` means the peek reached the end of the flushed WAL."""
        with self.connection().cursor(binary=True) as cur:
            try:
                cur.execute(_COMMIT_ENDS_SQL, self.peek_params(None, limit))
                rows = cur.fetchall()
            except psycopg.errors.UndefinedObject as e:
                raise self._peek_error(e) from e
        ends = [(int.from_bytes(end, "big"), int(n)) for n, _total, end in rows]
        return ends, int(rows[-1][1]) if rows else 0

    def flush_wal(self) -> int:
        """Flush the WAL so every transaction committed before this call is visible to the
        next ``poll()`` (peek reads only flushed WAL; with ``synchronous_commit = off`` commits
        can sit unflushed for a while). Costs one xid and one round trip. Returns an LSN past
        the end of every transaction committed before the call, the WAL flushed up to it."""
        conn = self.connection()
        # A transaction that wrote WAL commits synchronously (flushing all WAL before it); a
        # transactional logical message is the smallest such write, and pgoutput ignores it
        # (no 'messages' option) and skips the then empty transaction. The message's end LSN
        # comes back in the same round trip: every transaction committed before this call ends
        # before it, and the commit after it flushed the WAL past it.
        row = conn.execute(
            "SELECT pg_logical_emit_message(true, 'incview.flush', '')::text"
        ).fetchone()
        assert row is not None
        return parse_lsn(row[0])
