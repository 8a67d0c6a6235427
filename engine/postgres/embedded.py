"""The embedded PostgreSQL server behind ``Engine(dsn=None)``, run from the system's server binaries.

``EmbeddedPostgres(directory)`` owns one persistent cluster: ``directory/data`` (PGDATA),
``directory/postgres.log``, ``directory/pgpass`` (the generated password, referenced from the DSN
with libpq's ``passfile`` so the DSN itself holds no secret) and ``directory/incview.conf`` (the
settings, rewritten before every start and included from ``postgresql.conf``). ``start()``
runs initdb on first use, then starts the server unless it is already running (the port and pid
are read back from ``postmaster.pid``; a stale pid file left by a crash, and backends orphaned by
a killed postmaster, are cleared first); it listens on 127.0.0.1 only, on the port it had before
when that is free, with ``wal_level = logical`` and durable defaults (fsync on). When the process
runs as root, initdb and pg_ctl run as the ``postgres`` OS user (initdb refuses root) and the
directory is handed to that user; if that user cannot reach the directory (a clone under
``/root``), the cluster is created under ``FALLBACK_ROOT`` and ``directory`` becomes a symlink. ``release()`` stops the server only if this object started it
(or an earlier owner handed it over) and no other client is connected. A file lock serialises
concurrent starts and stops on the same directory. The test suite's throwaway server
(``tests/postgres_server.py``) is this class with test-only settings (``durable=False``,
``auth="trust"``). This module must not touch any cluster outside ``directory``.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from engine.errors import IncviewError

BINARIES = ("initdb", "pg_ctl", "postgres")

# Settings of every embedded server; the caller's ``settings`` are applied on top.
BASE_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",  # TCP only: no socket-path length limit, no /tmp lock files
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_connections": "100",
    "timezone": "'UTC'",
    "datestyle": "'ISO, MDY'",
    # LOG-level lines come with every poll of the slot (logical decoding's "starting logical
    # decoding for slot" / "found consistent point"); keep the log to what matters.
    "log_min_messages": "fatal",
}
# Test-only settings (tests/postgres_server.py): fast, not crash-safe.
NON_DURABLE_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

_LOG_ROTATE_BYTES = 20 * 1024 * 1024
# Where the cluster lives when root runs incview on a state dir the postgres user cannot reach
# (a symlink at the state dir points here).
FALLBACK_ROOT = "/var/lib/incview/embedded"


class EmbeddedPostgresError(IncviewError):
    """The embedded PostgreSQL server could not be found, initialised, started or stopped."""


def find_bindir() -> str:
    """The directory holding ``initdb``/``pg_ctl``/``postgres`` (env ``INCVIEW_PG_BINDIR`` wins)."""
    candidates = []
    if os.environ.get("INCVIEW_PG_BINDIR"):
        candidates.append(os.environ["INCVIEW_PG_BINDIR"])
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    candidates += sorted(glob.glob("/usr/pgsql-*/bin"), reverse=True)
    on_path = shutil.which("initdb") or shutil.which("pg_ctl")
    if on_path:
        candidates.append(os.path.dirname(on_path))
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in BINARIES):
            return d
    raise EmbeddedPostgresError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in "
        f"{candidates or '/usr/lib/postgresql/*/bin or PATH'}: the embedded server (used when no "
        "dsn is given) needs them. Install the server package (Debian/Ubuntu: "
        "apt-get install postgresql-15; Fedora: dnf install postgresql-server; macOS: "
        "brew install postgresql@15), set INCVIEW_PG_BINDIR to their directory, or pass "
        "--dsn / INCVIEW_DSN to use an existing database"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_is_free(port: int) -> bool:
    """Whether Postgres could listen on ``port``. Like Postgres, with SO_REUSEADDR: the
    TIME_WAIT sockets its own shutdown left behind must not move a restarted server to another
    port (every client's DSN names the old one); a live listener still makes the bind fail."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _postgres_user() -> tuple[int, int] | None:
    """(uid, gid) of the ``postgres`` OS user when running as root, else None."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        raise EmbeddedPostgresError(
            "running as root, but initdb refuses to run as root and there is no 'postgres' OS "
            "user to run the embedded server as: create it (useradd --system postgres, or "
            "install the postgresql server package) or run incview as an ordinary user"
        ) from None
    return pw.pw_uid, pw.pw_gid


def _blocking_ancestor(path: Path, uid: int) -> Path | None:
    """The first ancestor of ``path`` the user ``uid`` cannot enter (no o+x, not its own)."""
    for parent in reversed(path.parents):
        try:
            st = parent.stat()
        except FileNotFoundError:
            return None  # created by us below, mode 0755
        if st.st_uid != uid and not st.st_mode & stat.S_IXOTH:
            return parent
    return None


def _process_cwd(pid: int) -> str | None:
    """The working directory of ``pid`` (Linux /proc), or None if it is unknown or unreadable."""
    try:
        return os.path.realpath(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, e.g. a killed postmaster whose parent has
    not reaped it yet, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: trust kill(pid, 0)
    return state not in ("Z", "X", "x")


class EmbeddedPostgres:
    """One persistent PostgreSQL cluster under ``directory``: ``start()``, ``dsn``, ``release()``."""

    def __init__(
        self,
        directory: str | Path,
        *,
        user: str = "postgres",
        database: str = "incview",
        durable: bool = True,
        auth: str = "password",
        settings: dict[str, str] | None = None,
        bindir: str | None = None,
    ) -> None:
        if auth not in ("password", "trust"):
            raise ValueError(f"auth must be 'password' or 'trust', not {auth!r}")
        # A symlink (see _prepare_directory) is followed: the server runs on the real path.
        self.requested = Path(directory).absolute()
        self.directory = Path(os.path.realpath(self.requested))
        self.user = user
        self.database = database
        self.durable = durable
        self.auth = auth
        self.settings = {**BASE_SETTINGS, **({} if durable else NON_DURABLE_SETTINGS)}
        self.settings.update(settings or {})
        self.bindir = bindir
        self.port: int | None = None
        self.pid: int | None = None
        self.started_here = False
        self._owner = _postgres_user()

    # -- paths -------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_file(self) -> Path:
        return self.directory / "postgres.log"

    @property
    def passfile(self) -> Path:
        return self.directory / "pgpass"

    @property
    def _conf_file(self) -> Path:
        return self.directory / "incview.conf"

    @property
    def _handover_file(self) -> Path:
        return self.directory / "stop-when-unused"

    @property
    def _server_file(self) -> Path:
        return self.directory / "server.json"

    # -- connection strings ------------------------------------------------------------------
    @property
    def dsn(self) -> str:
        return self.dsn_for(self.database)

    def dsn_for(self, dbname: str) -> str:
        if self.port is None:
            raise EmbeddedPostgresError(
                f"the embedded PostgreSQL server in {self.directory} is not started: call start()"
            )
        dsn = f"host=127.0.0.1 port={self.port} user={self.user} dbname={dbname}"
        if self.auth == "password":
            dsn += f" passfile={self.passfile}"
        return dsn

    def connect(self, dbname: str | None = None, **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.dsn_for(dbname or self.database), **kwargs)

    # -- commands ----------------------------------------------------------------------------
    def _cmd(self, binary: str, *args: str) -> list[str]:
        assert self.bindir
        cmd = [os.path.join(self.bindir, binary), *args]
        if self._owner is not None:
            return ["runuser", "-u", "postgres", "--", *cmd]
        return cmd

    def _run(self, binary: str, *args: str, timeout: float = 120) -> None:
        # pg_ctl start always gets "-l logfile": a postmaster inheriting our pipes would keep
        # them open and make subprocess.run wait forever.
        try:
            proc = subprocess.run(
                self._cmd(binary, *args),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                cwd=self.directory,
            )
        except subprocess.TimeoutExpired as e:
            raise EmbeddedPostgresError(
                f"{binary} {' '.join(args)} did not finish within {timeout} s\n{self.log_tail()}"
            ) from e
        if proc.returncode != 0:
            raise EmbeddedPostgresError(
                f"{binary} {' '.join(args)} failed ({proc.returncode}):\n"
                f"{proc.stdout.decode(errors='replace')}\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_file, errors="replace") as f:
                return f"postgres log ({self.log_file}):\n" + "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.directory / ".lock", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> EmbeddedPostgres:
        """Initialise the cluster on first use and start it unless it is already running."""
        if self.bindir is None:
            self.bindir = find_bindir()
        missing = [b for b in BINARIES if not os.access(os.path.join(self.bindir, b), os.X_OK)]
        if missing:
            raise EmbeddedPostgresError(
                f"{', '.join(missing)} not found in {self.bindir}: install the PostgreSQL server "
                "package or point INCVIEW_PG_BINDIR at the directory holding initdb and pg_ctl"
            )
        self._prepare_directory()
        with self._locked():
            if not (self.data_dir / "PG_VERSION").exists():
                self._initdb()
            running = self._running_postmaster()
            if running is None:
                self._clear_stale()
                self._start_server()
                self.started_here = True
                self._handover_file.unlink(missing_ok=True)
            else:
                self.pid, self.port = running
            self._server_file.write_text(json.dumps({"port": self.port, "pid": self.pid}))
        self._ensure_database()
        return self

    def _prepare_directory(self) -> None:
        if self._owner is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            return
        uid, gid = self._owner
        blocked = _blocking_ancestor(self.directory, uid)
        if blocked is not None:
            if self.directory.exists() or self.requested.is_symlink():
                raise EmbeddedPostgresError(
                    f"the embedded PostgreSQL server runs as the 'postgres' OS user (initdb "
                    f"refuses root), which cannot enter {blocked} (mode "
                    f"{stat.filemode(blocked.stat().st_mode)}) to reach {self.directory}: run "
                    f"chmod o+x {blocked}, or use a state directory it can reach"
                )
            # e.g. a clone under /root (0700): keep the cluster where the postgres user can
            # reach it, and leave a symlink at the requested place
            digest = hashlib.sha256(str(self.requested).encode()).hexdigest()[:16]
            target = Path(FALLBACK_ROOT) / f"{self.requested.parent.name.lstrip('.')}-{digest}"
            target.mkdir(parents=True, exist_ok=True)
            for d in [target, *target.parents]:
                if d == Path(FALLBACK_ROOT).parent:
                    break
                os.chmod(d, 0o755)
            self.requested.parent.mkdir(parents=True, exist_ok=True)
            self.requested.symlink_to(target, target_is_directory=True)
            self.directory = target
        self.directory.mkdir(parents=True, exist_ok=True)
        st = self.directory.stat()
        if (st.st_uid, st.st_gid) != (uid, gid):
            os.chown(self.directory, uid, gid)

    def _initdb(self) -> None:
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise EmbeddedPostgresError(
                f"{self.data_dir} exists but holds no PostgreSQL cluster (no PG_VERSION): move "
                "it away or delete it, and the embedded server will initialise a new one"
            )
        args = ["-D", str(self.data_dir), "-U", self.user, "-E", "UTF8", "--locale=C"]
        pwfile = self.directory / "initdb-password"
        if self.auth == "password":
            password = secrets.token_urlsafe(24)
            self._write_private(self.passfile, f"*:*:*:{self.user}:{password}\n")
            self._write_private(pwfile, password + "\n", for_server=True)
            args += ["--auth-local=peer", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
        else:
            args += ["--auth=trust"]
        if not self.durable:
            args.append("--no-sync")
        try:
            self._run("initdb", *args)
        finally:
            pwfile.unlink(missing_ok=True)
        with open(self.data_dir / "postgresql.conf", "a") as f:
            f.write(f"\n# incview: settings of the embedded server\ninclude '{self._conf_file}'\n")

    def _write_private(self, path: Path, text: str, *, for_server: bool = False) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        if for_server and self._owner is not None:
            os.chown(path, *self._owner)

    def _running_postmaster(self) -> tuple[int, int] | None:
        """(pid, port) of this cluster's live postmaster once it accepts connections, else None."""
        deadline = time.monotonic() + 120
        while True:
            pid_file = self.data_dir / "postmaster.pid"
            try:
                lines = pid_file.read_text().splitlines()
                pid, port = int(lines[0]), int(lines[3])
                status = lines[7].strip() if len(lines) > 7 else ""
            except FileNotFoundError:
                return None
            except (ValueError, IndexError):  # being written right now
                pid, port, status = 0, 0, "starting"
            if pid and not self._is_our_postmaster(pid):
                return None
            if status == "ready":
                return pid, port
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(
                    f"the embedded PostgreSQL server in {self.data_dir} (pid {pid}) stays in state "
                    f"{status!r}: wait for it, or stop it with "
                    f"pg_ctl stop -D {self.data_dir}\n{self.log_tail()}"
                )
            time.sleep(0.1)  # starting (crash recovery) or stopping: wait for it to settle

    def _is_our_postmaster(self, pid: int) -> bool:
        if not _pid_alive(pid):
            return False
        cwd = _process_cwd(pid)
        if cwd is None:
            # No /proc, or another user's process: trust a live pid only without /proc.
            return not os.path.isdir("/proc")
        # The postmaster runs with PGDATA as its working directory.
        return cwd == os.path.realpath(self.data_dir)

    def _clear_stale(self) -> None:
        """Remove a stale postmaster.pid and kill backends orphaned by a killed postmaster."""
        pid_file = self.data_dir / "postmaster.pid"
        if pid_file.exists():
            pid_file.unlink()  # its postmaster is gone (_running_postmaster said so)
        if not os.path.isdir("/proc"):
            return
        data = os.path.realpath(self.data_dir)
        orphans = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid() and _process_cwd(int(entry)) == data:
                orphans.append(int(entry))
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_pid_alive(p) for p in orphans) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _preferred_port(self) -> int:
        try:
            port = int(json.loads(self._server_file.read_text())["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return free_port()
        return port if _port_is_free(port) else free_port()

    def _write_conf(self, port: int) -> None:
        lines = ["# written by incview before every start of the embedded server"]
        lines += [f"{k} = {v}" for k, v in self.settings.items()]
        lines.append(f"port = {port}")
        self._conf_file.write_text("\n".join(lines) + "\n")
        os.chmod(self._conf_file, 0o644)

    def _rotate_log(self) -> None:
        with contextlib.suppress(OSError):
            if self.log_file.stat().st_size > _LOG_ROTATE_BYTES:
                self.log_file.replace(self.log_file.with_suffix(".log.1"))

    def _start_server(self) -> None:
        self._rotate_log()
        last: Exception | None = None
        port = self._preferred_port()
        for _attempt in range(3):
            self._write_conf(port)
            try:
                self._run(
                    "pg_ctl", "start", "-D", str(self.data_dir), "-l", str(self.log_file),
                    "-w", "-t", "120", "-s",
                )  # fmt: skip
            except EmbeddedPostgresError as e:  # the port was taken meanwhile: retry
                last = e
                port = free_port()
                continue
            running = self._running_postmaster()
            if running is None:
                raise EmbeddedPostgresError(
                    f"the embedded PostgreSQL server in {self.data_dir} exited right after "
                    f"starting\n{self.log_tail()}"
                )
            self.pid, self.port = running
            return
        assert last is not None
        raise last

    def _ensure_database(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = self.connect("postgres", autocommit=True)
                break
            except psycopg.OperationalError as e:
                if time.monotonic() > deadline:
                    raise EmbeddedPostgresError(
                        f"cannot connect to the embedded PostgreSQL server in {self.directory} "
                        f"(port {self.port}): {e}\n{self.log_tail()}"
                    ) from e
                time.sleep(0.05)
        with conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
            if not exists:
                conn.execute(
                    psycopg.sql.SQL(
                        "CREATE DATABASE {} ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' "
                        "TEMPLATE template0"
                    ).format(psycopg.sql.Identifier(self.database))
                )

    def other_clients(self) -> int:
        """Client and walsender sessions besides the one asking."""
        with self.connect("postgres", autocommit=True) as conn:
            return conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND backend_type IN ('client backend', 'walsender')"
            ).fetchone()[0]

    def release(self, wait_s: float = 1.0) -> bool:
        """Stop the server if this object started it (or it was handed over) and nobody else
        is connected; if others are, hand it over to the last of them. True if stopped."""
        if self.port is None:
            return False
        with self._locked():
            if not (self.started_here or self._handover_file.exists()):
                return False
            if self._running_postmaster() is None:
                self.started_here = False
                return False
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    others = self.other_clients()
                except psycopg.OperationalError:
                    others = 0
                # sessions we just closed may take a moment to end
                if not others or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if others:
                self._handover_file.touch()
                self.started_here = False
                return False
            self._stop()
            self._handover_file.unlink(missing_ok=True)
            return True

    def stop(self) -> None:
        """Stop the server unconditionally (if it runs)."""
        if self.bindir is None:
            self.bindir = find_bindir()
        with self._locked():
            if self._running_postmaster() is not None:
                self._stop()

    def _stop(self) -> None:
        mode = "fast" if self.durable else "immediate"
        try:
            self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60")
        except EmbeddedPostgresError:
            if self._running_postmaster() is None:
                pass  # already gone
            else:
                self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate", "-w")
        self.started_here = False
        self.pid = None
