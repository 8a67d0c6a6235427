"""``incview demo`` against the test server: the writer runs, every view stays equal to its query.

The demo must end with exit code 0 and the line "all views equal their queries", leave no view
and no replication slot behind, be re-runnable, and refuse to drop a ``demo`` schema it did not
create.
"""

from __future__ import annotations

import psycopg
import pytest

from engine.cli import main


@pytest.mark.slow
def test_demo_keeps_every_view_equal_to_its_query(pg_dsn, tmp_path, capsys):
    argv = ["demo", "--dsn", pg_dsn, "--state-dir", str(tmp_path / "s"), "--seconds", "8"]
    assert main([*argv, "--report-every", "2.5"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[-1] == "all views equal their queries"
    assert "equals its query: NO" not in out
    assert out.count("equals its query: yes") >= 4 * 3  # periodic reports and the final one
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM incview.views").fetchone()[0] == 0
        assert conn.execute("SELECT to_regnamespace('demo')").fetchone()[0] is None
    # re-runnable on the same state dir and database
    assert (
        main(["--dsn", pg_dsn, "--state-dir", str(tmp_path / "s"), "demo", "--seconds", "1"]) == 0
    )
    assert capsys.readouterr().out.rstrip().endswith("all views equal their queries")


def test_demo_keep_then_rerun_replaces_its_own_schema(pg_dsn, tmp_path, capsys):
    base = ["demo", "--dsn", pg_dsn, "--state-dir", str(tmp_path / "s"), "--seconds", "0.5"]
    assert main([*base, "--keep"]) == 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM demo.revenue_by_segment").fetchone()[0] > 0
    assert main(base) == 0  # drops the kept views first
    assert capsys.readouterr().out.rstrip().endswith("all views equal their queries")


def test_demo_refuses_a_demo_schema_it_did_not_create(pg_dsn, tmp_path, capsys):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA demo")
        conn.execute("CREATE TABLE demo.precious (v int)")
    assert main(["demo", "--dsn", pg_dsn, "--state-dir", str(tmp_path / "s")]) == 1
    assert "was not created by the incview demo" in capsys.readouterr().err
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('demo.precious')").fetchone()[0] is not None
