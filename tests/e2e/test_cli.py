"""The ``incview`` command line against a real Postgres."""

from __future__ import annotations

import psycopg
import pytest

from engine.cli import main


def test_cli_verbs_end_to_end(pg_dsn, tmp_path, capsys):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, g text, v int)")
        conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO t VALUES (1, 'a', 10), (2, 'a', 5), (3, 'b', 1)")
        base = ["--dsn", pg_dsn, "--state-dir", str(tmp_path / "s"), "--runner", "local"]
        assert (
            main([*base, "create-view", "sums", "SELECT g, sum(v) AS total FROM t GROUP BY g"]) == 0
        )
        conn.execute("UPDATE t SET v = 7 WHERE id = 3")
        assert main([*base, "catch-up"]) == 0
        assert sorted(conn.execute("SELECT * FROM sums").fetchall()) == [("a", 15), ("b", 7)]
        assert main([*base, "list-views"]) == 0
        assert "sums" in capsys.readouterr().out
        assert main([*base, "explain", "SELECT g FROM t WHERE v > 3"]) == 0
        assert "== Optimized logical plan ==" in capsys.readouterr().out
        assert main([*base, "create-view", "bad", "SELECT now()"]) == 1
        assert "not deterministic" in capsys.readouterr().err
        assert main([*base, "drop-view", "sums"]) == 0
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0


def test_cli_memory_budget(pg_dsn, tmp_path, capsys, monkeypatch):
    """``--memory-mb`` reaches the Engine (its views within one budget); a bad value is refused
    by name before anything is opened."""
    import engine.engine

    opened = []
    real = engine.engine.Engine.__init__

    def spy(self, *a, **k):
        real(self, *a, **k)
        opened.append(self.memory_budget)

    monkeypatch.setattr(engine.engine.Engine, "__init__", spy)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
        conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    base = ["--dsn", pg_dsn, "--state-dir", str(tmp_path / "s"), "--runner", "local"]
    assert main([*base, "--memory-mb", "40", "create-view", "c", "SELECT count(*) FROM t"]) == 0
    assert opened[-1].total_bytes == 40 << 20
    with pytest.raises(SystemExit) as exit_:
        main([*base, "--memory-mb", "10", "list-views"])
    assert exit_.value.code == 2
    assert "--memory-mb must be a whole number of megabytes, at least 32" in capsys.readouterr().err
    assert main([*base, "drop-view", "c"]) == 0
