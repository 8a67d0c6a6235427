"""A throwaway PostgreSQL 15 server for the test suite, built from the system's server binaries.

``PostgresServer`` runs initdb into a private temp directory, starts ``postgres`` on a free
127.0.0.1 port with logical replication enabled and durability switched off (tests only), creates
a ``C``-collation database and a superuser role, and exposes a ``dsn``. When the process runs as
root (CI), initdb and pg_ctl run as the ``postgres`` OS user, since initdb refuses root. The
server is stopped by ``stop()``, by an ``atexit`` hook, or by the pytest fixtures in
``tests/conftest.py``. This module must not be imported by ``engine`` code, must not touch any
cluster it did not create, and must never skip silently: missing binaries are an error.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import uuid

import psycopg

ROLE = "pgtester"  # not "incview": "$user" in search_path would resolve to the incview schema
DATABASE = "pgtester"

_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "timezone": "'UTC'",
    "datestyle": "'ISO, MDY'",
    "log_min_messages": "warning",
}


class PostgresServerError(RuntimeError):
    """The test Postgres server could not be found, initialised or started."""


def find_bindir() -> str:
    """The directory holding ``initdb``/``pg_ctl``/``postgres`` (env ``INCVIEW_PG_BINDIR`` wins)."""
    candidates = []
    if os.environ.get("INCVIEW_PG_BINDIR"):
        candidates.append(os.environ["INCVIEW_PG_BINDIR"])
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(os.path.dirname(on_path))
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    raise PostgresServerError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in "
        f"{candidates or '/usr/lib/postgresql/*/bin or PATH'}; install the server package "
        "(Debian: apt-get install postgresql-15) or set INCVIEW_PG_BINDIR"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A private Postgres cluster: ``start()``, ``dsn``, ``connect()``, ``create_database()``, ``stop()``."""

    def __init__(self, bindir: str | None = None) -> None:
        self.bindir = bindir
        self.base_dir: str | None = None
        self.port: int | None = None
        self._as_postgres = os.geteuid() == 0
        self._running = False

    # -- paths and commands ------------------------------------------------------------------
    @property
    def data_dir(self) -> str:
        assert self.base_dir
        return os.path.join(self.base_dir, "data")

    @property
    def log_file(self) -> str:
        assert self.base_dir
        return os.path.join(self.base_dir, "postgres.log")

    def _cmd(self, binary: str, *args: str) -> list[str]:
        assert self.bindir
        cmd = [os.path.join(self.bindir, binary), *args]
        if self._as_postgres:
            return ["runuser", "-u", "postgres", "--", *cmd]
        return cmd

    def _run(self, binary: str, *args: str, timeout: float = 60) -> None:
        proc = subprocess.run(
            self._cmd(binary, *args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            cwd=self.base_dir,
        )
        if proc.returncode != 0:
            raise PostgresServerError(
                f"{binary} {' '.join(args)} failed ({proc.returncode}):\n"
                f"{proc.stdout.decode(errors='replace')}\n{self._log_tail()}"
            )

    def _log_tail(self) -> str:
        try:
            with open(self.log_file, errors="replace") as f:
                return "postgres log:\n" + "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def _make_base_dir(self) -> str:
        parent = tempfile.gettempdir()
        if self._as_postgres and not os.stat(parent).st_mode & stat.S_IXOTH:
            parent = "/tmp"  # the postgres user must be able to reach the data directory
        base = tempfile.mkdtemp(prefix="incview-pg-", dir=parent)
        if self._as_postgres:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(base, pw.pw_uid, pw.pw_gid)
        return base

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def dsn(self) -> str:
        return self.dsn_for(DATABASE)

    def dsn_for(self, dbname: str) -> str:
        if self.port is None:
            raise PostgresServerError("the server is not started")
        return f"host=127.0.0.1 port={self.port} user={ROLE} dbname={dbname}"

    def start(self) -> PostgresServer:
        if self._running:
            return self
        if self.bindir is None:
            self.bindir = find_bindir()
        missing = [
            b
            for b in ("initdb", "pg_ctl", "postgres")
            if not os.access(os.path.join(self.bindir, b), os.X_OK)
        ]
        if missing:
            raise PostgresServerError(f"{', '.join(missing)} not found in {self.bindir}")
        if self._as_postgres:
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresServerError(
                    "running as root but there is no 'postgres' OS user to run initdb as"
                ) from None
        self.base_dir = self._make_base_dir()
        atexit.register(self.stop)
        self._run(
            "initdb", "-D", self.data_dir, "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip
        with open(os.path.join(self.data_dir, "postgresql.conf"), "a") as f:
            f.write("\n# incview test settings\n")
            for k, v in _SETTINGS.items():
                f.write(f"{k} = {v}\n")
            f.write(f"unix_socket_directories = '{self.base_dir}'\n")
        last: Exception | None = None
        for _attempt in range(3):
            self.port = free_port()
            try:
                self._run(
                    "pg_ctl", "start", "-D", self.data_dir, "-l", self.log_file, "-w", "-t", "30",
                    "-o", f"-p {self.port}",
                )  # fmt: skip
                break
            except PostgresServerError as e:  # port taken between free_port() and bind: retry
                last = e
        else:
            raise last  # type: ignore[misc]
        self._running = True
        self._bootstrap()
        return self

    def _bootstrap(self) -> None:
        admin = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = psycopg.connect(admin, autocommit=True)
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with conn:
            conn.execute(f"CREATE ROLE {ROLE} SUPERUSER REPLICATION LOGIN")
            conn.execute(
                f"CREATE DATABASE {DATABASE} OWNER {ROLE} ENCODING 'UTF8' "
                "LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
            )

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

    def drop_database(self, name: str) -> None:
        with self.connect(autocommit=True) as conn:
            # slots pin a database: drop the ones a test left behind
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE database = %s AND NOT active",
                (name,),
            )
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        if self._running:
            self._running = False
            with contextlib.suppress(PostgresServerError, subprocess.TimeoutExpired, OSError):
                self._run("pg_ctl", "stop", "-D", self.data_dir, "-m", "immediate", "-w")
        if self.base_dir and os.path.isdir(self.base_dir):
            shutil.rmtree(self.base_dir, ignore_errors=True)
        self.base_dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
