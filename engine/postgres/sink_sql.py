"""The SQL a result sink sends about its table, and its checks of the table (a part of
``ResultSink``).

The column lists and definitions of the result table and of the diff tables, the row-hash index
expression, and the two statements that apply a diff table: the multiset delete (``-w`` physical
copies of each retracted row, found through the row-hash index and matched with ``IS NOT
DISTINCT FROM``, picked by ``ctid``) and the insert of ``w`` copies of each inserted row. The
checks: that an existing result table has the view's columns, and its row-hash index.
"""

from __future__ import annotations

import hashlib

import psycopg
from psycopg import sql

from engine.errors import ViewError
from engine.sql.types import SqlType, TypeKind, from_pg_name

# The multiset delete finds a diff row's copies in the result table through an expression index
# on ``hash_record(ROW(<all columns>))``: Postgres' record hash hashes each column with its
# type's hash function, so values equal under ``=`` hash equally (1.0 and 1.00, int4 and int8,
# char(n) with and without trailing blanks) and NULLs hash too. The index holds 4 bytes per row
# (no btree row-size limit on wide text); the exact ``IS NOT DISTINCT FROM`` test decides.
ROW_HASH = "hash_record"
# the running sink's diff tables, kept for the session: this prefix and a digest of the layout
SESSION_DIFFS = "incview_sink_d_"


def _base_type_sql(t: SqlType) -> str:
    """``t`` without length/precision (a cast to it never truncates or rounds)."""
    if t.kind is TypeKind.ENUM or t.kind is TypeKind.ARRAY:
        return t.sql()
    return "bpchar" if t.kind is TypeKind.CHAR else SqlType(t.kind).sql()


class SinkStatements:
    """``ResultSink``'s SQL (``_build_statements`` makes it from ``columns`` and the diff
    tables' ``_tmp_types``) and checks of its result table."""

    columns: list[tuple[str, SqlType]]
    _tmp_types: list[SqlType]
    _target: sql.Identifier
    view: str

    def _build_statements(self) -> None:
        cols = [sql.Identifier(n) for n, _ in self.columns]
        pos = [sql.Identifier(f"c{i}") for i in range(len(self.columns))]
        self._col_list = sql.SQL(", ").join(cols)
        self._pos_list = sql.SQL(", ").join(pos)
        # temp-table column definitions: c0 <type>, ..., w bigint
        self._tmp_defs = sql.SQL(", ").join(
            [
                sql.SQL("{} {}").format(p, sql.SQL(t.sql()))
                for p, t in zip(pos, self._tmp_types, strict=True)
            ]
            + [sql.SQL("w bigint NOT NULL")]
        )
        layout = repr([t.sql() for t in self._tmp_types]).encode()
        self._session_diffs = SESSION_DIFFS + hashlib.md5(layout).hexdigest()[:16]
        self._diff_rows = 0  # rows COPYed into it since this sink last truncated it
        self._target_defs = sql.SQL(", ").join(
            sql.SQL("{} {}").format(c, sql.SQL(t.sql()))
            for c, (_, t) in zip(cols, self.columns, strict=True)
        )
        # json has no equality nor hash: its text stands for it (incview carries it as text)
        json = [t.kind is TypeKind.JSON for _, t in self.columns]

        def cmp(prefix: str, c: sql.Composable, j: bool) -> sql.Composable:
            return sql.SQL(prefix + "{}" + ("::text" if j else "")).format(c)

        self._row_hash_index = sql.SQL("{}(ROW({}))").format(
            sql.SQL(ROW_HASH),
            sql.SQL(", ").join(cmp("", c, j) for c, j in zip(cols, json, strict=True)),
        )
        target_hash = sql.SQL("{}(ROW({}))").format(
            sql.SQL(ROW_HASH),
            sql.SQL(", ").join(cmp("t.", c, j) for c, j in zip(cols, json, strict=True)),
        )
        # the diff table's columns cast to the result table's base types (bigint -> integer,
        # text -> bpchar ...): the same per-type hash functions on both sides
        diff_hash = sql.SQL("{}(ROW({}))").format(
            sql.SQL(ROW_HASH),
            sql.SQL(", ").join(
                sql.SQL("d.{}::{}").format(p, sql.SQL(_base_type_sql(t)))
                if t.kind is not TypeKind.JSON
                else sql.SQL("d.{}::text").format(p)
                for p, (_, t) in zip(pos, self.columns, strict=True)
            ),
        )
        exact = [
            sql.SQL("{} IS NOT DISTINCT FROM {}").format(cmp("t.", c, j), cmp("d.", p, j))
            for c, p, j in zip(cols, pos, json, strict=True)
        ]
        self._match = sql.SQL(" AND ").join(
            [sql.SQL("{} = {}").format(target_hash, diff_hash), *exact]
        )

    def _delete_sql(self, target: sql.Composable, source: str) -> sql.Composed:
        """Delete ``-w`` physical copies (by ctid) of every row of ``source`` with ``w < 0``."""
        return sql.SQL(
            "DELETE FROM {target} AS x USING ("
            " SELECT m.tid FROM ("
            "  SELECT t.ctid AS tid, -d.w AS n,"
            "   row_number() OVER (PARTITION BY d.ctid) AS k"
            "  FROM {source} AS d JOIN {target} AS t ON {match}"
            "  WHERE d.w < 0) AS m"
            " WHERE m.k <= m.n) AS s "
            "WHERE x.ctid = s.tid"
        ).format(target=target, source=sql.Identifier(source), match=self._match)

    def _insert_sql(self, target: sql.Composable, source: str, single: bool) -> sql.Composed:
        """Insert ``w`` copies of every row of ``source`` with ``w = 1`` (single) / ``w > 1``."""
        if single:
            return sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE w = 1").format(
                target, self._col_list, self._pos_list, sql.Identifier(source)
            )
        return sql.SQL(
            "INSERT INTO {} ({}) SELECT {} FROM {} AS d CROSS JOIN LATERAL generate_series(1, d.w)"
            " WHERE d.w > 1"
        ).format(target, self._col_list, sql.SQL(", ").join(
            sql.SQL("d.{}").format(sql.Identifier(f"c{i}")) for i in range(len(self.columns))
        ), sql.Identifier(source))  # fmt: skip

    def _table_columns(
        self, cur: psycopg.Cursor, ident: sql.Identifier
    ) -> list[tuple[str, str]] | None:
        row = cur.execute("SELECT to_regclass(%s)::oid", (ident.as_string(cur),)).fetchone()
        if row is None or row[0] is None:
            return None
        cols = cur.execute(
            "SELECT attname, format_type(atttypid, atttypmod), atttypid FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (row[0],),
        ).fetchall()
        self._type_oids = [oid for _, _, oid in cols]
        return [(n, t) for n, t, _ in cols]

    def _check_table(self, cur: psycopg.Cursor) -> bool:
        """Whether the result table exists; raises if its columns differ from the view's."""
        cols = self._table_columns(cur, self._target)
        if cols is None:
            return False
        expected = [(n, t.sql()) for n, t in self.columns]
        ok = len(cols) == len(expected)
        if ok:
            for (name, type_name), (want_name, want_t), oid in zip(
                cols, self.columns, self._type_oids, strict=True
            ):
                try:
                    kind = from_pg_name(type_name).kind
                except ValueError:  # an enum, an array of one: the very type
                    same = cur.execute("SELECT %s::regtype::oid = %s", (want_t.sql(), oid))
                    kind = want_t.kind if same.fetchone()[0] else None
                if name != want_name or kind is not want_t.kind:
                    ok = False
                    break
        if not ok:
            raise ViewError(
                f"result table {self.qualified_name} of view {self.view} has columns {cols}, but "
                f"the view produces {expected}: drop the table (or the view) and re-create the view"
            )
        self._ensure_row_index(cur, self._target)
        return True

    def _ensure_row_index(self, cur: psycopg.Cursor, table: sql.Identifier) -> None:
        """Create the row-hash index the multiset delete looks rows up by, unless ``table`` has
        it (tables written by an older incview, or whose index someone dropped, get it here)."""
        row = cur.execute(
            "SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass "
            "AND pg_get_indexdef(indexrelid) LIKE %s",
            (table.as_string(cur), f"%{ROW_HASH}(ROW(%"),
        ).fetchone()
        if row is not None and row[0] == 0:
            cur.execute(sql.SQL("CREATE INDEX ON {} ({})").format(table, self._row_hash_index))
