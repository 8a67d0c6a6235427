"""CdcReader over partitioned tables and inheritance parents (a real PostgreSQL 15): what is
published, and a partition's or child's changes reported under every table above it, rows
matched by column name (a partition with another column order, a child with an extra column)."""

from __future__ import annotations

import time

import pytest

from engine.errors import ViewError
from engine.postgres.cdc import CdcReader
from engine.postgres.source_tree import ancestors, descendant_names, descendants

TREE = """
CREATE TABLE s (k int, v int, g text) PARTITION BY RANGE (k);
CREATE TABLE s1 PARTITION OF s FOR VALUES FROM (0) TO (100) PARTITION BY LIST (g);
CREATE TABLE s1_a PARTITION OF s1 FOR VALUES IN ('a');
CREATE TABLE s1_other PARTITION OF s1 DEFAULT;
CREATE TABLE s2 (g text, v int, k int);
ALTER TABLE s ATTACH PARTITION s2 FOR VALUES FROM (100) TO (200);
CREATE TABLE p (k int, v int);
CREATE TABLE p_c (extra text) INHERITS (p);
"""


@pytest.fixture
def reader(pg_dsn):
    r = CdcReader(pg_dsn, slot="test_cdc_tree", publication="test_cdc_tree_pub")
    yield r
    r.drop()
    r.close()


def test_leaf_changes_are_reported_under_every_ancestor(pg_conn, reader):
    pg_conn.execute(TREE)
    for t in ("s1_a", "s1_other", "s2", "p", "p_c"):
        pg_conn.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    tree = reader.ensure(["public.s", "public.p", "public.s1_a"])
    assert tree == {
        "public.s": ["public.s1", "public.s1_a", "public.s1_other", "public.s2"],
        "public.p": ["public.p_c"],
        "public.s1_a": [],
    }
    assert descendant_names(pg_conn, ["public.s"]) == {"public.s": tree["public.s"]}
    members = pg_conn.execute("SELECT prrelid::regclass::text FROM pg_publication_rel ORDER BY 1")
    assert [m for (m,) in members.fetchall()] == ["p", "p_c", "s", "s1_a"]
    with pg_conn.transaction():
        pg_conn.execute("INSERT INTO s VALUES (1, 10, 'a'), (2, 20, 'b'), (150, 30, 'c')")
        pg_conn.execute("UPDATE s SET k = 120 WHERE k = 1")  # s1_a -> s2
        pg_conn.execute("INSERT INTO p VALUES (1, 1)")
        pg_conn.execute("INSERT INTO p_c VALUES (2, 2, 'x')")
    reader.flush_wal()
    (tx,) = reader.poll()
    s = tx.changes["public.s"]
    names = tx.relations["public.s"].column_names
    by_name = [dict(zip(names, row, strict=True)) for row in s.rows]
    got = sorted(((r["k"], r["v"], r["g"]), w) for r, w in zip(by_name, s.weights, strict=True))
    assert got == [
        ((1, 10, "a"), -1),
        ((1, 10, "a"), 1),
        ((2, 20, "b"), 1),
        ((120, 10, "a"), 1),
        ((150, 30, "c"), 1),
    ]
    assert set(tx.changes) == {
        "public.s",
        "public.s1",
        "public.s1_a",
        "public.s1_other",
        "public.s2",
        "public.p",
        "public.p_c",
    }
    leaf = tx.changes["public.s1_a"]  # the leaf itself, for a view that reads it
    assert sorted(zip(leaf.rows, leaf.weights, strict=True)) == [
        ((1, 10, "a"), -1),
        ((1, 10, "a"), 1),
    ]
    mid = tx.changes["public.s1"]
    assert sorted(zip(mid.rows, mid.weights, strict=True)) == [
        ((1, 10, "a"), -1),
        ((1, 10, "a"), 1),
        ((2, 20, "b"), 1),
    ]
    p = tx.changes["public.p"]
    assert tx.relations["public.p"].column_names == ("k", "v")  # the parent's own rows first
    assert sorted(zip(p.rows, p.weights, strict=True)) == [((1, 1), 1), ((2, 2), 1)]
    oid = pg_conn.execute("SELECT 'public.s1_a'::regclass::oid").fetchone()[0]
    assert ancestors(pg_conn, oid) == ["public.s", "public.s1"]


def test_descendant_names_of_many_roots_in_one_query_as_each_roots_own(pg_conn):
    """``descendant_names`` asks for every root at once (each catch_up does): per root, the
    names and their order are those of ``descendants`` (schema, then name; a saved tree is
    compared with them), a child under two parents counted once, a plain or missing table []."""
    pg_conn.execute(TREE)
    pg_conn.execute(
        'CREATE SCHEMA a; CREATE SCHEMA "a-b";'
        "CREATE TABLE m (k int); CREATE TABLE a.z () INHERITS (m);"
        'CREATE TABLE "a-b".c () INHERITS (m); CREATE TABLE q (j int);'
        "CREATE TABLE a.both () INHERITS (m, q); CREATE TABLE plain (k int)"
    )
    roots = ["public.s", "public.p", "public.m", "public.q", "public.plain", "public.gone"]
    got = descendant_names(pg_conn, roots)
    for root in roots:
        schema, _, name = root.partition(".")
        assert got[root] == [d.qualified_name for d in descendants(pg_conn, schema, name)], root
    assert got["public.m"] == ["a.both", "a.z", "a-b.c"]  # schema "a" before "a-b", as descendants
    assert got["public.q"] == ["a.both"] and got["public.plain"] == got["public.gone"] == []
    assert descendant_names(pg_conn, []) == {}


def test_ancestors_are_read_beside_the_peeks_session_and_closed_with_it(pg_conn, reader):
    pg_conn.execute(TREE)
    for t in ("s1_a", "s1_other", "s2", "p", "p_c"):
        pg_conn.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    reader.ensure(["public.s"])
    for round_ in range(3):  # every poll's Relation messages send the lookups again
        pg_conn.execute("INSERT INTO s VALUES (%s, 1, 'a'), (150, 2, 'c')", (round_,))
        reader.flush_wal()
        (tx,) = reader.poll()
        assert sum(tx.changes["public.s"].weights) == 2 and "public.s2" in tx.changes
    pids = {reader.connection().info.backend_pid, reader.catalog_connection().info.backend_pid}
    assert len(pids) == 2
    reader.close()
    for _ in range(100):
        alive = pg_conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (list(pids),)
        ).fetchone()[0]
        if not alive:
            break
        time.sleep(0.05)
    assert not alive


def test_children_without_replica_identity_full_are_named(pg_conn, reader):
    pg_conn.execute(TREE)
    pg_conn.execute("ALTER TABLE p REPLICA IDENTITY FULL")
    with pytest.raises(ViewError, match=r"public\.p_c\).*ALTER TABLE public\.p_c REPLICA"):
        reader.ensure(["public.p"])
    assert reader.ensure(["public.p"], adopt_children=True) == {"public.p": ["public.p_c"]}
    row = pg_conn.execute("SELECT relreplident::text FROM pg_class WHERE relname = 'p_c'")
    assert row.fetchone()[0] == "f"
    assert pg_conn.execute("SELECT count(*) FROM pg_publication_rel").fetchone()[0] == 2
