"""The incview schema: created on first use, migrated forward, LSN round trips."""

from __future__ import annotations

from engine.postgres.view_catalog import MIGRATIONS, SCHEMA, ViewCatalog, int_to_lsn, lsn_to_int


def test_created_on_first_use_and_idempotent(pg_conn):
    cat = ViewCatalog.open(pg_conn)
    ViewCatalog.open(pg_conn)
    version = pg_conn.execute(
        f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'"
    ).fetchone()[0]
    assert int(version) == len(MIGRATIONS)
    cat.insert("v1", "SELECT 1", "public", "v1")
    rec = cat.get("v1")
    assert rec.phase == "populating" and rec.last_lsn is None and rec.result_table == "v1"


def test_older_schema_is_migrated_forward_keeping_rows(pg_conn):
    with pg_conn.transaction():
        pg_conn.execute(MIGRATIONS[0])
        pg_conn.execute(f"INSERT INTO {SCHEMA}.meta VALUES ('schema_version', '1')")
        pg_conn.execute(
            f"INSERT INTO {SCHEMA}.views (name, sql, result_schema, result_table, phase) "
            "VALUES ('old', 'SELECT 2', 'public', 'old', 'running')"
        )
    cat = ViewCatalog.open(pg_conn)
    rec = cat.get("old")
    assert rec.sql == "SELECT 2" and rec.heartbeat is None and rec.last_batch_rows is None


def test_applied_lsn_round_trip(pg_conn):
    cat = ViewCatalog.open(pg_conn)
    cat.insert("v", "SELECT 1", "public", "v")
    lsn = (0x1A << 32) | 0x2B3C
    assert lsn_to_int(int_to_lsn(lsn)) == lsn
    with pg_conn.transaction(), pg_conn.cursor() as cur:
        ViewCatalog.record_applied(cur, "v", lsn, 5, 1.5, None)
        assert ViewCatalog.applied_lsn(cur, "v", lock=True) == lsn
    assert cat.get("v").last_lsn == lsn and cat.get("v").last_batch_rows == 5
