"""``with_keepalives``: both ends of every engine connection notice a silent network cut.

The cut itself is ``tests/reliability/test_network_cut.py``; here, that the settings reach the
client (libpq) and the server (session settings), and that a user's own choice wins.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

from engine import Engine
from engine.postgres.keepalives import with_keepalives


def test_both_ends_get_the_keepalive_settings(pg_dsn):
    dsn = with_keepalives(pg_dsn)
    client = conninfo_to_dict(dsn)
    assert client["keepalives"] == "1" and client["keepalives_idle"] == "10"
    with psycopg.connect(dsn) as conn:
        shown = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_user_timeout")
        }
        assert shown == {
            "tcp_keepalives_idle": "10",
            "tcp_keepalives_interval": "5",
            "tcp_user_timeout": "30000",
        }


def test_a_users_own_settings_win(pg_dsn):
    dsn = with_keepalives(f"{pg_dsn} keepalives_idle=3 options='-c tcp_keepalives_idle=7'")
    assert conninfo_to_dict(dsn)["keepalives_idle"] == "3"
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SHOW tcp_keepalives_idle").fetchone()[0] == "7"
        assert conn.execute("SHOW tcp_keepalives_count").fetchone()[0] == "3"
    assert with_keepalives(dsn) == dsn  # nothing left to add


def test_the_engine_connects_with_them(pg_dsn, state_dir):
    with Engine(pg_dsn, state_dir, runner="local") as eng:
        assert eng.conn.execute("SHOW tcp_user_timeout").fetchone()[0] == "30000"
        assert conninfo_to_dict(eng.dsn)["keepalives_count"] == "3"
