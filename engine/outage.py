"""What a lost database looks like, and how long to wait before trying it again.

``is_outage(exc)`` tells a database that went away (a restart, a shutdown, a network cut: the
connection broke or cannot be made) from every other failure, looking through the exception's
causes (the engine wraps a failed sink write in a ``ViewError``); ``is_disk_full(exc)`` tells a
full state directory (retried, never re-populated). ``Backoff`` hands out capped
exponential delays with jitter, reset by the first success. The engine's long-lived loops use
both to keep running through an outage (seed 003: database-side errors put a view in an
error-sinking phase that retries until the database is back). This module must not open
connections or touch views.
"""

from __future__ import annotations

import errno
import random
import re

import psycopg

#: errors that mean "the connection is gone or cannot be made", not "the statement was wrong"
_LOST = (psycopg.OperationalError, psycopg.InterfaceError)
#: SQLSTATE classes of a server going away (57P01 admin_shutdown, 57P02/57P03, 08xxx connection)
_LOST_STATES = ("08", "57P")


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says a disk of ours is full (a
    write to the state directory failed with ENOSPC: RocksDB says "No space left on device")."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def is_outage(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the database is unreachable."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, _LOST):
            return True
        if isinstance(exc, psycopg.Error):
            state = getattr(exc, "sqlstate", None) or ""
            if state.startswith(_LOST_STATES):
                return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


# how a lost database reads in a failure that only exists as text (a Spark task's traceback)
_LOST_TEXT = re.compile(
    r"psycopg\.(OperationalError|InterfaceError|errors\.(AdminShutdown|CrashShutdown|"
    r"CannotConnectNow|ConnectionException|ConnectionFailure|ConnectionDoesNotExist|"
    r"SqlclientUnableToEstablishSqlconnection))\b"
)


def is_outage_text(text: str | None) -> bool:
    """Whether a failure known only by its text (a Spark streaming query's exception, whose
    task died of a Postgres error) says the database was unreachable."""
    return bool(text) and _LOST_TEXT.search(text) is not None


class Backoff:
    """Capped exponential delays: ``first``, doubling up to ``cap`` seconds, +-20% jitter.

    >>> b = Backoff(first=1.0, cap=4.0, jitter=0.0)
    >>> [b.next_delay() for _ in range(4)]
    [1.0, 2.0, 4.0, 4.0]
    >>> b.reset(); b.next_delay()
    1.0
    """

    def __init__(self, first: float = 0.5, cap: float = 30.0, jitter: float = 0.2) -> None:
        self.first = first
        self.cap = cap
        self.jitter = jitter
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.first * 2**self.failures)
        self.failures += 1
        if self.jitter:
            delay *= 1 + random.uniform(-self.jitter, self.jitter)
        return delay

    def reset(self) -> None:
        self.failures = 0
