"""Parallel population reads: a big table split into block ranges read on two connections in one
snapshot, other tables whole; every row once, errors raised, and a population through them
equal to its query."""

from __future__ import annotations

from collections import Counter

import pytest

from engine import Engine
from engine import population as population_module
from engine.errors import ViewError
from engine.postgres import parallel_reads as pr
from engine.postgres import snapshot
from engine.postgres.arrow_snapshot import QUERY_ERRORS
from engine.postgres.snapshot import SnapshotReader, snapshot_reader
from engine.sql.catalog import DictCatalog
from tests.e2e.test_engine_oracle import diff_rows

BIG = {"id": "integer", "amount": "numeric(10,2)", "note": "text", "grp": "integer"}
ODD = {"id": "integer", "span": "interval"}  # interval: read by the row reader


@pytest.fixture(autouse=True)
def split_small_tables(monkeypatch):
    """Test tables are small: split from 2 blocks, read as Arrow whatever their size."""
    monkeypatch.setattr(pr, "SPLIT_BLOCKS", 2)
    monkeypatch.setattr(snapshot, "SMALL_TABLE_BYTES", 0)


@pytest.fixture
def tables(pg_conn):
    pg_conn.execute("CREATE TABLE big (id integer, amount numeric(10,2), note text, grp integer)")
    pg_conn.execute(
        "INSERT INTO big SELECT i, (i % 997) / 7.0, repeat('x', i % 50) || i, i % 50 "
        "FROM generate_series(1, 30000) i"
    )
    pg_conn.execute("CREATE TABLE odd (id integer, span interval)")
    pg_conn.execute(
        "INSERT INTO odd SELECT i, i * interval '1 minute' FROM generate_series(1, 500) i"
    )
    pg_conn.execute("ALTER TABLE big REPLICA IDENTITY FULL; ALTER TABLE odd REPLICA IDENTITY FULL")
    catalog = DictCatalog({"big": BIG, "odd": ODD})
    return catalog.lookup(None, "big"), catalog.lookup(None, "odd")


def _multisets(batches) -> dict[str, Counter]:
    seen: dict[str, Counter] = {}
    for name, batch in batches:
        seen.setdefault(name, Counter()).update(tuple(map(repr, r)) for r in batch.rows)
    return seen


def _expected(reader, table, columns, where=None) -> Counter:
    rows = reader.read_table(table, columns, where, arrow=False)
    return Counter(tuple(map(repr, r)) for b in rows for r in b.rows)


def test_every_row_of_the_snapshot_arrives_once(pg_conn, pg_dsn, tables, monkeypatch):
    big, odd = tables
    used = []
    read_on = SnapshotReader.read_arrow_on

    def recording(snap, *args, **kwargs):
        used.append(snap)
        return read_on(snap, *args, **kwargs)

    monkeypatch.setattr(SnapshotReader, "read_arrow_on", staticmethod(recording))
    sources = [(big, ("id", "amount", "note"), "id % 3 <> 0"), (odd, ("id", "span"), None)]
    with snapshot_reader(pg_dsn) as reader:
        pg_conn.execute("INSERT INTO big VALUES (99999, 1, 'after the snapshot', 1)")
        pieces = pr.plan_pieces(reader, sources, lambda name: True, readers=2)
        assert [(p.table.name, p.arrow) for p in pieces] == [
            ("big", True), ("big", True), ("odd", False)
        ]  # fmt: skip
        assert "ctid <" in pieces[0].where_sql and "ctid >=" in pieces[1].where_sql
        with pr.parallel_reads(reader, sources, lambda name: True, readers=2, depth=3) as got:
            seen = _multisets(got)
        assert seen["public.big"] == _expected(reader, big, ["id", "amount", "note"], "id % 3 <> 0")
        assert sum(seen["public.big"].values()) == 20000
        assert seen["public.odd"] == _expected(reader, odd, ["id", "span"])
    assert len(set(map(id, used))) == 2  # the two ranges were read on two connections


def test_one_reader_reads_a_table_whole(pg_dsn, tables):
    big, _ = tables
    with snapshot_reader(pg_dsn) as reader:
        pieces = pr.plan_pieces(reader, [(big, ("id",), None)], lambda name: True, readers=1)
        assert [p.where_sql for p in pieces] == [None]
        with pr.parallel_reads(reader, [(big, ("id",), None)], lambda name: True, 1) as got:
            assert sum(seen.total() for seen in _multisets(got).values()) == 30000


def test_a_failing_range_fails_the_read_and_closes_the_readers(pg_dsn, tables, monkeypatch):
    big, _ = tables
    opened = []
    open_reader = SnapshotReader.open_arrow_reader

    def recording(self):
        opened.append(open_reader(self))
        return opened[-1]

    monkeypatch.setattr(SnapshotReader, "open_arrow_reader", recording)
    # division by zero in the last rows only: one range reads, the other fails
    sources = [(big, ("id",), "100 / (id - 29990) <> 12345")]
    with snapshot_reader(pg_dsn) as reader:
        with (
            pytest.raises(ViewError, match="reading table public.big for population failed"),
            pr.parallel_reads(reader, sources, lambda name: True, 2, 2) as got,
        ):
            for _ in got:
                pass
        assert len(opened) == 2  # reader 0's own ADBC connection and the extra one
        with pytest.raises(QUERY_ERRORS, match="INVALID_STATE"):  # closed: the snapshot can end
            opened[1].query("SELECT 1")


def test_a_missing_column_fails_before_reading(pg_dsn, tables):
    big, _ = tables
    with snapshot_reader(pg_dsn) as reader:
        ghost = DictCatalog({"big": {**BIG, "ghost": "integer"}}).lookup(None, "big")
        with pytest.raises(ViewError, match="columns changed since the view was planned"):
            pr.plan_pieces(reader, [(ghost, ("id", "ghost"), None)], lambda name: True, 2)


def test_a_population_on_two_readers_equals_its_query(
    pg_conn, pg_dsn, tables, tmp_path, monkeypatch
):
    monkeypatch.setattr(population_module, "READ_READERS", 2)
    monkeypatch.setattr(population_module, "READ_AHEAD_BATCHES", 2)
    planned = []
    plan = pr.plan_pieces

    def recording(*args):
        planned.extend(plan(*args))
        return planned

    monkeypatch.setattr(pr, "plan_pieces", recording)
    pg_conn.execute("CREATE TABLE label (id integer, name text)")
    pg_conn.execute("ALTER TABLE label REPLICA IDENTITY FULL")
    pg_conn.execute("INSERT INTO label SELECT i, 'l' || (i % 7) FROM generate_series(0, 60) i")
    sql = (
        "SELECT l.name, count(*) AS n, sum(b.amount) AS total, max(b.note) AS last_note "
        "FROM big b JOIN label l ON l.id = b.grp GROUP BY l.name"
    )
    with Engine(pg_dsn, tmp_path / "state", runner="local") as engine:
        engine.create_view("split_read", sql)
        assert diff_rows(pg_conn, "split_read", sql) == (0, 0)
        assert [p.table.name for p in planned if p.arrow].count("big") == 2  # two ranges
        pg_conn.execute("UPDATE big SET amount = amount + 1 WHERE id % 7 = 0")
        pg_conn.execute("DELETE FROM label WHERE id % 5 = 0")
        engine.catch_up()
        assert diff_rows(pg_conn, "split_read", sql) == (0, 0)
