"""A throwaway PostgreSQL server for the test suite: ``engine.postgres.embedded`` with test settings.

``PostgresServer`` creates a private temp directory (``in_memory``: on /dev/shm when it has room,
as the test suite's server does) and starts an ``EmbeddedPostgres`` in it with
durability switched off (fsync, synchronous_commit and full_page_writes off, initdb --no-sync,
immediate shutdown), trust authentication on 127.0.0.1 and the ``pgtester`` superuser and database
(all C collation). Finding the binaries, running as the ``postgres`` OS user when root, the free
port and ``wal_level = logical`` live once, in the engine module. The server is stopped by
``stop()``, by an ``atexit`` hook, or by the pytest fixtures in ``tests/conftest.py``. ``engine``
code must not import this module; it must not touch any cluster it did not create, and must never
skip silently: missing binaries are an error.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator

import psycopg

from engine.postgres import interval_dumpers
from engine.postgres.embedded import (
    EmbeddedPostgres,
    EmbeddedPostgresError,
    find_bindir,
    free_port,
)

ROLE = "pgtester"  # not "incview": "$user" in search_path would resolve to the incview schema
DATABASE = "pgtester"

TEST_SETTINGS = {"max_connections": "200", "log_min_messages": "warning"}

PostgresServerError = EmbeddedPostgresError

__all__ = [
    "DATABASE",
    "ROLE",
    "PostgresServer",
    "PostgresServerError",
    "find_bindir",
    "free_port",
]


def _parameter(value):
    """An engine value as psycopg takes it for a column: an array (a tuple) as a list."""
    if isinstance(value, tuple):
        return [_parameter(v) for v in value]
    return value


#: a tmpfs for the test suite's cluster: ``CREATE DATABASE`` (one per test) creates ~1,200 files,
#: 200-300 ms on this machine's ext4 disk against 8-11 ms there (the cluster is not durable anyway)
MEMORY_DIR = "/dev/shm"
#: the least free space ``MEMORY_DIR`` must have to be used
MEMORY_DIR_ROOM = 4 << 30


def _roomy_tmpfs(path: str) -> bool:
    """Whether ``path`` is a writable directory with ``MEMORY_DIR_ROOM`` free."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK) and st.f_bavail * st.f_frsize >= MEMORY_DIR_ROOM


class PostgresServer:
    """A private Postgres cluster: ``start()``, ``dsn``, ``connect()``, ``create_database()``, ``stop()``."""

    def __init__(
        self,
        bindir: str | None = None,
        settings: dict[str, str] | None = None,
        in_memory: bool = False,
    ) -> None:
        self.bindir = bindir
        self.settings = {**TEST_SETTINGS, **(settings or {})}
        #: the cluster on a tmpfs (``MEMORY_DIR``) when there is one with room (the test suite's)
        self.in_memory = in_memory
        self.base_dir: str | None = None
        self.server: EmbeddedPostgres | None = None

    @property
    def port(self) -> int | None:
        return self.server.port if self.server else None

    @property
    def data_dir(self) -> str:
        assert self.server
        return str(self.server.data_dir)

    @property
    def log_file(self) -> str:
        assert self.server
        return str(self.server.log_file)

    def _make_base_dir(self) -> str:
        parent = tempfile.gettempdir()
        if self.in_memory and _roomy_tmpfs(MEMORY_DIR):
            parent = MEMORY_DIR
        if os.geteuid() == 0 and not os.stat(parent).st_mode & stat.S_IXOTH:
            parent = "/tmp"  # the postgres user must be able to reach the data directory
        return tempfile.mkdtemp(prefix="incview-pg-", dir=parent)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def dsn(self) -> str:
        return self.dsn_for(DATABASE)

    def dsn_for(self, dbname: str) -> str:
        if self.server is None or self.server.port is None:
            raise PostgresServerError("the server is not started")
        return self.server.dsn_for(dbname)

    def start(self) -> PostgresServer:
        if self.server is not None:
            return self
        self.base_dir = self._make_base_dir()
        atexit.register(self.stop)
        self.server = EmbeddedPostgres(
            self.base_dir,
            user=ROLE,
            database=DATABASE,
            durable=False,
            auth="trust",
            settings=self.settings,
            bindir=self.bindir,
        )
        self.server.start()
        self.bindir = self.server.bindir
        return self

    def connect(self, dbname: str = DATABASE, **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.dsn_for(dbname), **kwargs)

    def create_database(self, prefix: str = "t") -> str:
        """Create a fresh C-collation database; returns its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with self.connect(autocommit=True) as conn:
            conn.execute(
                f"CREATE DATABASE {name} OWNER {ROLE} ENCODING 'UTF8' "
                "LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0 STRATEGY FILE_COPY"
            )
        return name

    @contextlib.contextmanager
    def database_with_table(
        self, prefix: str, columns: list[tuple[str, str]], rows: list[tuple]
    ) -> Iterator[psycopg.Connection]:
        """A fresh database holding ``t (id int PRIMARY KEY, <columns>)`` with ``rows`` (ids
        0, 1, ... in order): an autocommit connection to it, the database dropped afterwards.

        ``rows`` hold values as the engine carries them: an interval (``PgInterval``) goes in
        with its months, days and time apart, an array (a tuple) as an array."""
        name = self.create_database(prefix)
        rows = [tuple(_parameter(v) for v in r) for r in rows]
        try:
            with self.connect(name, autocommit=True) as conn:
                interval_dumpers.register(conn)
                cols = ", ".join(f"{n} {t}" for n, t in columns)
                conn.execute(f"CREATE TABLE t (id int PRIMARY KEY, {cols})")
                placeholders = ", ".join(["%s"] * (len(columns) + 1))
                with conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO t VALUES ({placeholders})",
                        [(i, *r) for i, r in enumerate(rows)],
                    )
                yield conn
        finally:
            self.drop_database(name)

    def drop_database(self, name: str) -> None:
        with self.connect(autocommit=True) as conn:
            # slots pin a database (and their names are cluster-wide): drop the ones a test left
            # behind, ending first a backend that still holds one (a SIGKILLed client's backend
            # may not have noticed yet)
            deadline = time.monotonic() + 30
            while True:
                conn.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                    "WHERE database = %s AND active",
                    (name,),
                )
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE database = %s AND NOT active",
                    (name,),
                )
                left = conn.execute(
                    "SELECT count(*) FROM pg_replication_slots WHERE database = %s", (name,)
                ).fetchone()[0]
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        if self.server is not None:
            with contextlib.suppress(PostgresServerError, OSError):
                self.server.stop()
            self.server = None
        if self.base_dir and os.path.isdir(self.base_dir):
            shutil.rmtree(self.base_dir, ignore_errors=True)
        self.base_dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
