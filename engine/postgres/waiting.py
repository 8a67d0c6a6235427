"""Statements that may wait on other sessions: say whom they wait for, and give up in time.

Creating the replication slot waits until every transaction running at that moment ends (a
session idle in a transaction that wrote keeps it waiting for as long as it stays idle);
publishing a table or changing its REPLICA IDENTITY, or a population's COPY, waits for
conflicting table locks. Inside
``waits_reported(conn, what, dsn, timeout_s)`` the statements run with that statement timeout
while a watcher thread (its own connection) looks up the sessions ``conn``'s backend waits for
(``pg_blocking_pids``) and logs them; when the timeout ends the wait, ``WaitedTooLong`` (a
``ViewError``) names each blocking backend's pid, state, age and query, and what to do.
Nothing the statement did survives its cancellation (Postgres rolls it back).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from engine.errors import ViewError

log = logging.getLogger("engine.postgres.waiting")

#: how often the watcher looks (and logs while the wait lasts)
POLL_S = 0.5
LOG_EVERY_S = 5.0

_BLOCKERS = """
SELECT a.pid, coalesce(a.state, ''), coalesce(a.application_name, ''),
       coalesce(extract(epoch FROM now() - coalesce(a.xact_start, a.backend_start)), 0),
       coalesce(a.usename::text, ''), left(coalesce(a.query, ''), 120)
FROM pg_stat_activity a
WHERE a.pid = ANY (pg_blocking_pids(%s))
ORDER BY a.pid
"""


class WaitedTooLong(ViewError):
    """A statement waited on other sessions longer than the engine's ``wait_timeout_s``."""


@dataclass(frozen=True)
class Blocker:
    """A session another one waits for."""

    pid: int
    state: str
    application: str
    age_s: float
    user: str
    query: str

    def describe(self) -> str:
        app = f", application {self.application!r}" if self.application else ""
        return (
            f"backend pid {self.pid} (user {self.user}{app}, {self.state or 'busy'} for "
            f"{self.age_s:.0f} s in its transaction, last query {self.query!r})"
        )


def blockers_of(conn: psycopg.Connection, pid: int) -> list[Blocker]:
    """The sessions backend ``pid`` waits for right now (empty: it waits for none)."""
    rows = conn.execute(_BLOCKERS, (pid,)).fetchall()
    return [Blocker(int(r[0]), r[1], r[2], float(r[3]), r[4], " ".join(r[5].split())) for r in rows]


class _Watcher(threading.Thread):
    """Looks up whom ``pid`` waits for every ``POLL_S`` until stopped; logs it now and then."""

    def __init__(self, dsn: str, pid: int, what: str) -> None:
        super().__init__(name=f"incview-wait-{pid}", daemon=True)
        self.dsn, self.pid, self.what = dsn, pid, what
        self.seen: list[Blocker] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                waited = 0.0
                next_log = 0.0
                while not self.stop.wait(POLL_S):
                    waited += POLL_S
                    found = blockers_of(conn, self.pid)
                    if found:
                        self.seen = found
                        if waited >= next_log:
                            log.warning(
                                "%s waits for %s", self.what, "; ".join(b.describe() for b in found)
                            )
                            next_log = waited + LOG_EVERY_S
        except psycopg.Error as e:  # only a report: the statement itself goes on
            log.debug("watching the wait of %s: %s", self.what, e)


@contextlib.contextmanager
def waits_reported(
    conn: psycopg.Connection, what: str, dsn: str, timeout_s: float, *, locks_only: bool = False
) -> Iterator[None]:
    """Run the block's statements on ``conn`` with a statement timeout of ``timeout_s`` (with
    ``locks_only``: a lock timeout, for long statements such as a population's COPY), reporting
    whom they wait for; ``WaitedTooLong`` when the timeout ends one."""
    setting = "lock_timeout" if locks_only else "statement_timeout"
    conn.execute(
        sql.SQL("SET {} = {}").format(
            sql.Identifier(setting), sql.Literal(f"{int(timeout_s * 1000)}ms")
        )
    )
    watcher = _Watcher(dsn, conn.info.backend_pid, what)
    watcher.start()
    try:
        yield
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as e:
        blockers = watcher.seen
        if not blockers:
            raise WaitedTooLong(
                f"{what} gave up after waiting {timeout_s:g} s (for other sessions' "
                "transactions or locks): try again, or give incview a longer wait_timeout_s"
            ) from e
        raise WaitedTooLong(
            f"{what} gave up after waiting {timeout_s:g} s for "
            + "; ".join(b.describe() for b in blockers)
            + ": end that transaction (COMMIT or ROLLBACK it, or pg_terminate_backend("
            + f"{blockers[0].pid})) and try again, or give incview a longer wait_timeout_s"
        ) from e
    finally:
        watcher.stop.set()
        watcher.join()
        if not conn.closed:
            with contextlib.suppress(psycopg.Error):
                conn.execute(sql.SQL("RESET {}").format(sql.Identifier(setting)))
