"""Change data capture from PostgreSQL: a pgoutput logical slot read as whole transactions of diffs.

``CdcReader`` owns one publication and one logical replication slot. ``ensure(tables)`` checks
``wal_level`` and each table's REPLICA IDENTITY FULL, creates or extends the publication
(``cdc_publication``) and creates the slot. ``poll()`` peeks the slot (``pg_logical_slot_peek_binary_changes``; psycopg 3
has no streaming replication API), decodes the pgoutput messages and returns whole
``Transaction`` objects whose changes are ``DiffBatch`` Z-sets per table (INSERT +new, DELETE
-old, UPDATE -old +new): Arrow columns decoded a whole peek at a time
(``engine.postgres.columnar_assembly``; ``columnar=False``: rows, message by message). Peeking does not consume: the slot only moves when the consumer calls
``advance(tx.end_lsn)`` after its sink committed that transaction, so a crash replays from the
last committed LSN. ``exported_snapshot()``, ``current_snapshot()`` and ``visible_in_snapshot()``
give population a snapshot consistent with the slot. This module must not apply changes, keep
view state or commit anything in the source database besides the slot and the publication (and,
asked to with ``adopt_children``, REPLICA IDENTITY FULL on partitions and inheritance children).

Partitioned tables and inheritance parents (``engine.postgres.source_tree``): a source is
published ``ONLY``; a partitioned one then publishes every partition, present and future, under
the partition's own name (``publish_via_partition_root`` stays off: with it a TRUNCATE of one
partition is not replicated, and a view reading a partition itself would miss its changes); an
inheritance parent's children are published by name. A transaction reports each partition's or
child's changes under its own name AND under the name of every table above it, so a view of
the parent sees them, projected by column name (a child's extra columns, another column order).

Observed on PostgreSQL 15 (tests/postgres/test_cdc.py): ``upto_nchanges`` is checked only after
a whole WAL record is decoded, and a transaction's changes are all emitted when its commit record
is decoded, so a peek never ends inside a transaction; it overshoots the limit by the rest of the
transaction that crosses it (a 50k-row transaction comes whole with a limit of 1). ``poll`` still
drops an incomplete tail (and peeks further when that leaves nothing), so it never returns a
partial transaction. Peek reads WAL only up to the flushed position: with
``synchronous_commit = off`` a commit becomes visible to ``poll`` only after the WAL writer
flushes it (up to ~3 x ``wal_writer_delay``); ``flush_wal()`` forces it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

import psycopg
from psycopg import sql

from engine.errors import ViewError
from engine.postgres.cdc_publication import PublicationSetup, check_wal_level
from engine.postgres.cdc_row_assembly import RowAssembly
from engine.postgres.cdc_transaction import Transaction
from engine.postgres.columnar_assembly import ColumnarAssembler
from engine.postgres.pg_types import TypeResolver
from engine.postgres.pgoutput import (
    PgOutputDecoder,
    format_lsn,
    parse_lsn,
)
from engine.postgres.slot_session import PEEK_SQL, SlotSession
from engine.postgres.source_tree import ancestors
from engine.postgres.waiting import WaitedTooLong, waits_reported
from engine.sql.types import SqlType

log = logging.getLogger(__name__)

_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")
_FETCH = 10000  # messages per chunk of the bounded (streamed) peek
#: rows per chunk libpq hands psycopg (chunked rows need libpq 17; older ones stream row by row)
_STREAM_CHUNK = _FETCH if psycopg.pq.version() >= 170000 else 1


def _blocks(rows: Iterable[tuple], size: int) -> Iterator[list[bytes]]:
    """The first column of ``rows``, ``size`` at a time."""
    it = iter(rows)
    while block := [r[0] for r in islice(it, size)]:
        yield block


class _Counted:
    """The first column of a cursor's rows, counted as they pass (``n``)."""

    def __init__(self) -> None:
        self.n = 0

    def over(self, rows: Iterable[tuple]) -> Iterator[bytes]:
        for row in rows:
            self.n += 1
            yield row[0]


# -- snapshots ---------------------------------------------------------------------------------


class PgSnapshot(NamedTuple):
    """``pg_current_snapshot()``: 64-bit xids (epoch-qualified)."""

    xmin: int
    xmax: int
    xip: frozenset[int]


@dataclass(frozen=True)
class ExportedSnapshot:
    """What ``CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')`` returned.

    ``name`` goes to ``SET TRANSACTION SNAPSHOT``; the slot's changes start exactly after the
    snapshot (at ``consistent_lsn``), so no xid filtering is needed on this path.
    """

    name: str
    slot: str
    consistent_lsn: int


def parse_snapshot(text: str) -> PgSnapshot:
    """``'726:730:726,728'`` -> ``PgSnapshot(726, 730, frozenset({726, 728}))``."""
    xmin, xmax, xip = text.split(":")
    return PgSnapshot(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))


def current_snapshot(conn: psycopg.Connection) -> PgSnapshot:
    """The snapshot of ``conn``'s current transaction (call it inside the REPEATABLE READ
    transaction that reads the population data, after ``SET TRANSACTION SNAPSHOT`` if any)."""
    row = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
    assert row is not None
    return parse_snapshot(row[0])


def widen_xid(xid: int, reference: int) -> int:
    """A 32-bit xid as the 64-bit xid nearest to ``reference`` (a 64-bit xid, e.g. xmax).

    >>> widen_xid(5, (3 << 32) + 10)
    12884901893
    >>> widen_xid(0xFFFFFFF0, (3 << 32) + 10) == (2 << 32) + 0xFFFFFFF0
    True
    """
    if xid >= 1 << 32:
        return xid
    delta = (xid - reference) & 0xFFFFFFFF
    if delta >= 1 << 31:
        delta -= 1 << 32
    return reference + delta


def visible_in_snapshot(xid: int, snapshot: PgSnapshot) -> bool:
    """Whether transaction ``xid`` (committed) is visible in ``snapshot``: xid < xmin, or
    xid < xmax and not in xip. 32-bit xids (pgoutput's) are widened with xmax's epoch."""
    full = widen_xid(xid, snapshot.xmax)
    if full < snapshot.xmin:
        return True
    return full < snapshot.xmax and full not in snapshot.xip


# -- the reader --------------------------------------------------------------------------------


class CdcReader(SlotSession, PublicationSetup, RowAssembly):
    """A logical slot + publication read as whole transactions.

    Example::

        reader = CdcReader(dsn, slot="incview_slot", publication="incview_pub")
        reader.ensure(["public.orders"])
        for tx in reader.poll():
            apply(tx)                  # the consumer's sink commits tx.end_lsn ...
            reader.advance(tx.end_lsn)  # ... and only then the slot moves
    """

    def __init__(
        self,
        conninfo: str,
        slot: str,
        publication: str,
        *,
        after_lsn: int | str = 0,
        wait_timeout_s: float = 60.0,
        max_buffered_changes: int = 0,
        columnar: bool = True,
    ) -> None:
        if not _SLOT_NAME.match(slot):
            raise ViewError(
                f"replication slot name {slot!r} is invalid: use 1-63 lower-case letters, "
                "digits and underscores"
            )
        super().__init__(conninfo, slot, publication)
        self.decoder = PgOutputDecoder(resolve=self._resolve_type)
        self._types: dict[int, SqlType] = {}
        # End LSN of the last transaction returned by poll(): later polls skip up to it.
        self.last_lsn = parse_lsn(after_lsn) if isinstance(after_lsn, str) else after_lsn
        # whether the last poll() read to the end of the WAL flushed when it peeked (nothing
        # committed before that peek is left to poll)
        self.exhausted = False
        # how long a statement may wait on other sessions (engine.postgres.waiting)
        self.wait_s = wait_timeout_s
        self._ancestors: dict[int, list[str]] = {}  # relation oid -> ancestors_of(oid)
        self._catalog: psycopg.Connection | None = None  # catalog_connection()
        # poll(): a transaction's diffs past this many go to disk (SpilledChanges) and the peek
        # is streamed from a server-side cursor; 0: everything in memory (no bound)
        self.max_buffered_changes = max_buffered_changes
        self.spilled_transactions = 0  # how many polled transactions spilled (counters)
        self.spilled_chunks = 0
        # decode a peek's row changes column-wise (engine.postgres.columnar_assembly); False:
        # message by message with PgOutputDecoder (the reference the columnar path equals)
        self.columnar = columnar

    def _resolve_type(self, type_oid: int) -> SqlType:
        """A column type that is not built in (an enum, a domain, an array of them), read from
        pg_type on a short connection of its own: the decoder asks while the reader's session
        may be streaming a peek."""
        t = self._types.get(type_oid)
        if t is None:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                t = self._types[type_oid] = TypeResolver(conn).resolve(type_oid)
        return t

    def __enter__(self) -> CdcReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- setup ----------------------------------------------------------------------------
    def ensure(
        self,
        tables: Iterable[str | tuple[str, str]],
        *,
        create_slot: bool = True,
        adopt_children: bool = False,
    ) -> dict[str, list[str]]:
        """Check the server and ``tables``, publish them (adding to an existing publication) and
        create the slot if missing. ``create_slot=False`` leaves the slot to
        ``exported_snapshot()`` (population with a new slot). A partition or inheritance child
        without REPLICA IDENTITY FULL is an error, or with ``adopt_children`` is given FULL.
        Returns each table's partitions and children (``source_tree.descendant_names``) as
        checked and published here."""
        conn = self.connection()
        row = conn.execute("SHOW wal_level").fetchone()
        assert row is not None
        check_wal_level(row[0])
        wanted, tree = self._check_tables(conn, tables, adopt_children)
        had = self._members(conn) if self._publication_exists() else None
        try:
            with waits_reported(conn, "publishing the views' tables", self.conninfo, self.wait_s):
                self._ensure_publication(conn, wanted, replace=False)
            if create_slot and not self.slot_exists():
                what = f"creating the replication slot {self.slot}"
                with waits_reported(conn, what, self.conninfo, self.wait_s):
                    conn.execute(
                        "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,)
                    )
        except WaitedTooLong:
            self._restore_publication(had)  # leave the publication as it was
            raise
        return tree

    def slot_exists(self) -> bool:
        row = (
            self.connection()
            .execute(
                "SELECT plugin::text, database::text = current_database() FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (self.slot,),
            )
            .fetchone()
        )
        if row is None:
            return False
        plugin, same_db = row
        if plugin != "pgoutput" or not same_db:
            raise ViewError(
                f"replication slot {self.slot} exists but is not a pgoutput slot of this database "
                f"(plugin {plugin}); choose another slot name or drop it with "
                f"SELECT pg_drop_replication_slot('{self.slot}');"
            )
        return True

    def confirmed_lsn(self) -> int:
        """The slot's ``confirmed_flush_lsn`` (where the next peek starts)."""
        row = (
            self.connection()
            .execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            )
            .fetchone()
        )
        if row is None:
            raise self._no_slot()
        return parse_lsn(row[0])

    # -- reading --------------------------------------------------------------------------
    def peek(self, limit: int | None, upto_lsn: int | None = None) -> list[bytes]:
        """The raw pgoutput messages from the slot's confirmed position (``limit`` rows or, since
        a peek stops only between transactions, a little more; with ``upto_lsn``, only the
        transactions whose commit record starts before it), in one round trip (``PEEK_SQL``)."""
        with self.connection().cursor(binary=True) as cur:
            try:
                cur.execute(PEEK_SQL, self.peek_params(upto_lsn, limit))
                return [r[0] for r in cur.fetchall()]
            except psycopg.errors.UndefinedObject as e:
                raise self._peek_error(e) from e

    def read_range(self, start: int, end: int) -> list[Transaction]:
        """The whole transactions whose end LSN lies in (``start``, ``end``], oldest first: the
        contents of one micro-batch with LSN offsets. Deterministic as long as the slot has not
        been advanced past ``start`` (it never is before the batch is committed)."""
        self.last_lsn = start
        if self.max_buffered_changes > 0:  # streamed, huge transactions partly on disk
            txs, _, _ = self._peek_bounded(None, upto_lsn=end)
        else:
            txs, _ = self._assemble(self.peek(None, upto_lsn=end))
        return [tx for tx in txs if start < tx.end_lsn <= end]

    def rewind(self, lsn: int) -> None:
        """Return the transactions ending after ``lsn`` again from the next ``poll()`` (after a
        failed apply: what was polled but not committed must be read again, not skipped)."""
        self.last_lsn = min(self.last_lsn, lsn)

    def poll(self, max_changes: int = 10000) -> list[Transaction]:
        """The committed transactions after the last one returned, whole, oldest first.

        About ``max_changes`` pgoutput messages are read (a peek never ends inside a
        transaction, so one big transaction comes whole however large). Peeking starts at the
        slot's confirmed position every time; transactions already returned (end LSN <=
        ``last_lsn``) are skipped without decoding their rows, and when the limit was spent on
        them the peek is repeated with a larger limit. Call ``advance()`` to keep that cheap.
        """
        limit = max(int(max_changes), 1)
        while True:
            if self.max_buffered_changes > 0:
                txs, skipped_messages, read = self._peek_bounded(limit)
            else:
                messages = self.peek(limit)
                txs, skipped_messages = self._assemble(messages)
                read = len(messages)
            if txs or read < limit:
                # fewer messages than asked for: the peek reached the end of the flushed WAL
                self.exhausted = read < limit
                if txs:
                    self.last_lsn = txs[-1].end_lsn
                return txs
            # The limit was spent on already-returned transactions (or an incomplete tail).
            limit = max(limit * 2, skipped_messages + max_changes)

    def _peek_bounded(
        self, limit: int | None, upto_lsn: int | None = None
    ) -> tuple[list[Transaction], int, int]:
        """``peek`` + ``_assemble`` in bounded memory: the messages stream in (libpq's chunked
        rows, ``_FETCH`` at a time, never all in a list; one round trip, where a server-side
        cursor took six) and each transaction's diffs past ``max_buffered_changes`` go to disk.
        Returns (transactions, skipped messages, messages read)."""
        counted = _Counted()
        bound = self.max_buffered_changes
        with self.connection().cursor(binary=True) as cur:
            rows = cur.stream(PEEK_SQL, self.peek_params(upto_lsn, limit), size=_STREAM_CHUNK)
            try:
                if not self.columnar:
                    txs, skipped = self._assemble(counted.over(rows), bound)
                    return txs, skipped, counted.n
                # blocks of at most the bound: a transaction holds at most ~2x the bound in RAM
                assembler = ColumnarAssembler(self, bound)
                for block in _blocks(rows, min(_FETCH, bound) if bound > 0 else _FETCH):
                    counted.n += len(block)
                    assembler.feed(block)
                txs, skipped = assembler.finish()
            except psycopg.errors.UndefinedObject as e:
                raise self._peek_error(e) from e
            finally:
                rows.close()  # a stream left midway is cancelled and drained: the session lives
        return txs, skipped, counted.n

    def _assemble(
        self, messages: Iterable[bytes], spill_after: int = 0
    ) -> tuple[list[Transaction], int]:
        """Group decoded messages into transactions after ``last_lsn``; drops an incomplete tail.
        Returns the transactions and the number of messages of skipped (old) transactions. With
        ``spill_after``, a transaction's gathered diffs move to disk each time they reach that
        many (``Transaction.spilled``)."""
        if self.columnar:
            assembler = ColumnarAssembler(self, spill_after)
            assembler.feed(messages if isinstance(messages, list) else list(messages))
            return assembler.finish()
        return self._assemble_rows(messages, spill_after)

    def ancestors_of(self, oid: int) -> list[str]:
        """The tables relation ``oid`` is a partition or inheritance child of (all depths), from
        the catalog, cached per relation until its next Relation message or ``forget_tree()``."""
        found = self._ancestors.get(oid)
        if found is None:
            found = self._ancestors[oid] = ancestors(self.catalog_connection(), oid)
        return found

    def catalog_connection(self) -> psycopg.Connection:
        """A second autocommit session, for catalog questions between peeks: a peek's logical
        decoding leaves its session's catalog caches invalidated, so the next query there is
        planned from cold (the ancestors' query ~1 ms after a peek, ~0.1 ms on this one)."""
        if self._catalog is None or self._catalog.closed:
            self._catalog = psycopg.connect(self.conninfo, autocommit=True)
        return self._catalog

    def close(self) -> None:
        super().close()
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    def forget_tree(self) -> None:
        """Drop the cached ancestors (after an ATTACH, DETACH or new inheritance child)."""
        self._ancestors.clear()

    # -- moving the slot ------------------------------------------------------------------
    def advance(self, lsn: int | str) -> int:
        """Confirm everything up to ``lsn`` (a transaction's ``end_lsn``) so Postgres can recycle
        its WAL; call it only after the sink committed that LSN. Never moves backwards. Returns
        the slot's confirmed LSN afterwards."""
        target = parse_lsn(lsn) if isinstance(lsn, str) else lsn
        current = self.confirmed_lsn()
        if target <= current:
            return current
        with self.slot_lock() as conn:
            row = conn.execute(
                "SELECT end_lsn::text FROM pg_replication_slot_advance(%s, %s::pg_lsn)",
                (self.slot, format_lsn(target)),
            ).fetchone()
        assert row is not None
        self.last_lsn = max(self.last_lsn, target)
        return parse_lsn(row[0])

    def drop(self) -> None:
        """Drop the slot and the publication (when no view needs them any more)."""
        conn = self.connection()
        if self.slot_exists():
            self._end_slot_holder(conn)
            conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        conn.execute(
            sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(self.publication))
        )

    def _end_slot_holder(self, conn: psycopg.Connection, wait_s: float = 3.0) -> None:
        """No view is left, but a backend may still hold the slot: a peek whose client went
        away (a stopped streaming query's last ``latestOffset`` over a long backlog) decodes on
        until the server notices. Wait ``wait_s`` for it, then end it (a peek consumes nothing);
        the drop then raises only if the slot is still held after another ``wait_s``."""
        query = "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s"
        for attempt in range(2):
            deadline = time.monotonic() + wait_s
            while True:
                row = conn.execute(query, (self.slot,)).fetchone()
                if row is None or row[0] is None:
                    return
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if attempt == 0:
                log.warning("ending backend %s, which still peeks slot %s", row[0], self.slot)
                conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))

    # -- snapshots for population ---------------------------------------------------------
    @contextlib.contextmanager
    def exported_snapshot(self) -> Iterator[ExportedSnapshot]:
        """Create the slot on a replication connection with an exported snapshot and yield it
        while that connection stays open (the snapshot lives as long as it does)::

            with reader.exported_snapshot() as snap:
                with psycopg.connect(dsn) as conn:
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    conn.execute(f"SET TRANSACTION SNAPSHOT '{snap.name}'")
                    ...  # COPY the population data; poll() then starts right after it

        The slot must not exist yet; it stays after the block (drop() removes it).
        """
        if self.slot_exists():
            raise ViewError(
                f"replication slot {self.slot} already exists, and a snapshot can only be "
                "exported when a slot is created: populate with current_snapshot() and "
                "visible_in_snapshot() instead, or drop() the slot first"
            )
        rconn = psycopg.connect(self.conninfo, replication="database", autocommit=True)
        try:
            res = rconn.pgconn.exec_(
                f"CREATE_REPLICATION_SLOT {self.slot} LOGICAL pgoutput (SNAPSHOT 'export')".encode()
            )
            if res.status != psycopg.pq.ExecStatus.TUPLES_OK:
                msg = (res.error_message or b"").decode(errors="replace").strip()
                raise ViewError(f"cannot create replication slot {self.slot}: {msg}")
            fields = {res.fname(i): res.get_value(0, i) for i in range(res.nfields)}
            yield ExportedSnapshot(
                name=fields[b"snapshot_name"].decode(),
                slot=self.slot,
                consistent_lsn=parse_lsn(fields[b"consistent_point"].decode()),
            )
        finally:
            rconn.close()
