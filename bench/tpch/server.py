"""The benchmark's throwaway Postgres: ``engine.postgres.embedded`` with benchmark settings.

Like the test suite's server (tests/postgres_server.py: durability off, trust auth on
127.0.0.1, C collation) but with memory settings for a data warehouse of a few GB:
``shared_buffers`` 1 GB, ``work_mem`` 64 MB, ``maintenance_work_mem`` 512 MB, ``max_wal_size``
8 GB (no checkpoint storms while loading). ``BenchServer().start()`` -> ``dsn``; ``stop()``
removes the cluster. It touches no cluster it did not create.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile

import psycopg

from engine.postgres.embedded import EmbeddedPostgres, EmbeddedPostgresError

SETTINGS = {
    "shared_buffers": "1GB",
    "work_mem": "64MB",
    "maintenance_work_mem": "512MB",
    "max_wal_size": "8GB",
    "max_connections": "50",
    "log_min_messages": "warning",
}


class BenchServer:
    def __init__(self) -> None:
        self.base_dir: str | None = None
        self.server: EmbeddedPostgres | None = None

    def start(self) -> BenchServer:
        self.base_dir = tempfile.mkdtemp(prefix="incview-tpch-pg-", dir="/tmp")
        self.server = EmbeddedPostgres(
            self.base_dir,
            user="bench",
            database="bench",
            durable=False,
            auth="trust",
            settings=SETTINGS,
        )
        self.server.start()
        return self

    @property
    def admin_dsn(self) -> str:
        assert self.server is not None
        return self.server.dsn_for("bench")

    def create_database(self, name: str) -> str:
        """A fresh C-collation database; returns its DSN."""
        assert self.server is not None
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(
                f"CREATE DATABASE {name} ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' "
                "TEMPLATE template0"
            )
        return self.server.dsn_for(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE database = %s AND NOT active",
                (name,),
            )
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        if self.server is not None:
            with contextlib.suppress(EmbeddedPostgresError, OSError):
                self.server.stop()
            self.server = None
        if self.base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def __enter__(self) -> BenchServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
