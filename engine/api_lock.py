"""``serialized``: the Engine's public calls, one at a time, whatever thread makes them.

The Engine's calls share its Postgres connections (the catalog's, the sinks', the CDC reader's)
and its views' state. Two at once from two threads (``create_view`` from a web request or a
Dagster op while ``run()`` polls in another thread, ``list_views`` from a monitor) would
interleave their transactions on one connection: the second's ``transaction()`` becomes a
savepoint in the first's, whose commit then takes the second's writes with it, half done (a
population's rows committed with another view's apply, measured by
``tests/e2e/test_memory_budget_engine.py``: "RELEASE SAVEPOINT can only be used in transaction
blocks"). So every public call holds the Engine's one re-entrant lock (``_api_lock``): a call
from another thread waits for the one under way (``run()``'s loop takes it for each poll, not
while it sleeps). The Spark runner's streaming queries apply on Spark's threads through their
own connection and do not take it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T", bound=Callable)


def serialized(method: T) -> T:
    """``method`` run under its Engine's ``_api_lock``."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._api_lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]
