"""The database a bench runs against: ``--dsn``'s, else a private throwaway server
(``tests/postgres_server.py``: logical decoding on, durability off), removed afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def bench_dsn(dsn: str | None) -> Iterator[str]:
    """``dsn`` if given, else the DSN of a server started for the block and stopped after."""
    if dsn:
        yield dsn
        return
    from tests.postgres_server import PostgresServer

    with PostgresServer() as server:
        yield server.dsn
