"""The publication a ``CdcReader`` reads through, and the checks of its source tables (a part of
``CdcReader``).

``_check_tables`` checks each source: that it is a table (or a partitioned one), that it and the
partitions and inheritance children holding its rows have REPLICA IDENTITY FULL (``adopt``: given
to those below it that lack it), that none of them is a foreign table; it returns the tables to
publish (a table, an inheritance parent's children by name; a partitioned table publishes its
partitions, present and future, through itself). ``_ensure_publication`` creates the
publication or adds to it (``replace``: sets exactly those tables), each table ``ONLY``.
``check_wal_level`` and ``check_replica_identity`` give the errors a user can act on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import psycopg
from psycopg import sql

from engine.errors import ViewError
from engine.postgres.pgoutput import display_name, replica_identity_fix
from engine.postgres.source_tree import descendants

log = logging.getLogger(__name__)


def check_wal_level(setting: str) -> None:
    """Raise ``ViewError`` unless ``wal_level`` (the value of ``SHOW wal_level``) is logical."""
    if setting != "logical":
        raise ViewError(
            f"PostgreSQL runs with wal_level = {setting}, but incview reads changes through "
            "logical decoding, which needs wal_level = logical. Run "
            "ALTER SYSTEM SET wal_level = logical; as a superuser and restart the PostgreSQL "
            "server (the setting only takes effect at server start)."
        )


def check_replica_identity(schema: str, table: str, relreplident: str) -> None:
    """Raise ``ViewError`` unless the table's REPLICA IDENTITY is FULL (``pg_class.relreplident = 'f'``)."""
    if relreplident != "f":
        name = display_name(schema, table)
        current = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}.get(
            relreplident, relreplident
        )
        raise ViewError(
            f"table {name} has REPLICA IDENTITY {current}; incview needs the old values of "
            "updated and deleted rows to retract them, which Postgres only logs with REPLICA "
            f"IDENTITY FULL. Run: {replica_identity_fix(schema, table)}"
        )


def _split_table(table: str | tuple[str, str]) -> tuple[str, str]:
    if isinstance(table, tuple):
        return table
    schema, dot, name = table.partition(".")
    return (schema, name) if dot else ("public", schema)


class PublicationSetup:
    """``CdcReader``'s publication (``publication``, on its ``connection()``)."""

    publication: str
    connection: Callable[[], psycopg.Connection]  # SlotSession's

    def _members(self, conn: psycopg.Connection) -> set[tuple[str, str]]:
        """The tables added to the publication (a partitioned table itself, not its leaves)."""
        rows = conn.execute(
            "SELECT n.nspname::text, c.relname::text FROM pg_publication_rel r "
            "JOIN pg_publication p ON p.oid = r.prpubid "
            "JOIN pg_class c ON c.oid = r.prrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.pubname = %s",
            (self.publication,),
        ).fetchall()
        return {(s, t) for s, t in rows}

    def _publication_exists(self) -> bool:
        row = self.connection().execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)
        )
        return row.fetchone() is not None

    def _restore_publication(self, tables: set[tuple[str, str]] | None) -> None:
        """Best effort: the publication back to ``tables`` (None: it did not exist)."""
        conn = self.connection()
        try:
            if tables is None:
                pub = sql.Identifier(self.publication)
                conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(pub))
            elif self._members(conn) != tables:
                self._ensure_publication(conn, sorted(tables), replace=True)
        except psycopg.Error as e:
            log.warning("could not restore publication %s: %s", self.publication, e)

    def set_tables(
        self, tables: Iterable[str | tuple[str, str]], *, adopt_children: bool = False
    ) -> None:
        """Make the publication hold exactly ``tables`` (ALTER PUBLICATION ... SET TABLE)."""
        conn = self.connection()
        wanted, _ = self._check_tables(conn, tables, adopt_children)
        self._ensure_publication(conn, wanted, replace=True)

    def _check_tables(
        self, conn: psycopg.Connection, tables: Iterable[str | tuple[str, str]], adopt: bool
    ) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
        wanted: list[tuple[str, str]] = []
        tree: dict[str, list[str]] = {}
        for t in tables:
            schema, table = _split_table(t)
            publish, below = self._check_table(conn, schema, table, adopt)
            wanted += publish
            tree[f"{schema}.{table}"] = below
        return wanted, tree

    def _check_table(
        self, conn: psycopg.Connection, schema: str, table: str, adopt: bool
    ) -> tuple[list[tuple[str, str]], list[str]]:
        """Check a source table; return the tables to publish for it (the table itself and, for
        an inheritance parent, its children: a partitioned table's partitions, present and
        future, are published through it) and the names of the tables below it. Every table
        holding rows (the table, its leaf partitions, its children) needs REPLICA IDENTITY FULL;
        ``adopt`` gives it to the partitions and children that lack it."""
        row = conn.execute(
            "SELECT c.relkind::text, c.relreplident::text FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
            (schema, table),
        ).fetchone()
        name = display_name(schema, table)
        if row is None:
            raise ViewError(f"table {name} does not exist; create it before reading its changes")
        relkind, replident = row
        if relkind not in ("r", "p"):
            kinds = {"v": "a view", "m": "a materialized view", "f": "a foreign table"}
            raise ViewError(
                f"{name} is {kinds.get(relkind, f'a relation of kind {relkind!r}')}; incview "
                "reads changes of tables only: define the view over the underlying tables"
            )
        if relkind == "r":
            check_replica_identity(schema, table, replident)
        below = descendants(conn, schema, table)
        foreign = [d.qualified_name for d in below if d.relkind not in ("r", "p")]
        if foreign:
            raise ViewError(
                f"table {name} has partitions or children that are not tables ({foreign[0]} is "
                "a foreign table or the like): their changes cannot be read through logical "
                "decoding; define the view over the other partitions"
            )
        lacking = [d for d in below if d.relkind == "r" and d.replident != "f"]
        if lacking and adopt:
            for d in lacking:
                log.warning(
                    "%s is below source %s: setting its REPLICA IDENTITY FULL",
                    d.qualified_name,
                    name,
                )
                conn.execute(replica_identity_fix(d.schema, d.name))
        elif lacking:
            names = ", ".join(display_name(d.schema, d.name) for d in lacking)
            fixes = " ".join(replica_identity_fix(d.schema, d.name) for d in lacking)
            raise ViewError(
                f"table {name} has partitions or inheritance children without REPLICA IDENTITY "
                f"FULL ({names}); incview needs the old values of their updated and deleted "
                f"rows to retract them. Run: {fixes}"
            )
        children = [(d.schema, d.name) for d in below if relkind == "r"]
        return [(schema, table), *children], [d.qualified_name for d in below]

    def _ensure_publication(
        self, conn: psycopg.Connection, tables: Sequence[tuple[str, str]], *, replace: bool
    ) -> None:
        pub = sql.Identifier(self.publication)
        tables = list(dict.fromkeys(tables))
        # ONLY: each table by itself (the children to publish are listed); a partitioned table
        # publishes its partitions, present and future, under their own names all the same
        table_list = sql.SQL(", ").join(
            sql.SQL("ONLY {}").format(sql.Identifier(s, t)) for s, t in tables
        )
        with conn.transaction():
            info = conn.execute(
                "SELECT puballtables, pubinsert AND pubupdate AND pubdelete AND pubtruncate "
                "FROM pg_publication WHERE pubname = %s",
                (self.publication,),
            ).fetchone()
            if info is None:
                if tables:
                    conn.execute(
                        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(pub, table_list)
                    )
                else:
                    conn.execute(sql.SQL("CREATE PUBLICATION {}").format(pub))
                return
            all_tables, all_actions = info
            if not all_actions:
                conn.execute(
                    sql.SQL(
                        "ALTER PUBLICATION {} SET (publish = 'insert, update, delete, truncate')"
                    ).format(pub)
                )
            if all_tables:
                return
            # the members (pg_publication_tables lists a partitioned table's leaves instead)
            published = self._members(conn)
            if replace:
                if published != set(tables):
                    conn.execute(
                        sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(pub, table_list)
                    )
                return
            missing = [t for t in tables if t not in published]
            if missing:
                conn.execute(
                    sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                        pub,
                        sql.SQL(", ").join(
                            sql.SQL("ONLY {}").format(sql.Identifier(s, t)) for s, t in missing
                        ),
                    )
                )

    def published_tables(self) -> set[str]:
        rows = (
            self.connection()
            .execute(
                "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = %s",
                (self.publication,),
            )
            .fetchall()
        )
        return {f"{s}.{t}" for s, t in rows}
