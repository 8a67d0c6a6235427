"""Point reads of many keys split over threads: RocksDB reads run without the GIL.

``get_many(read, keys)`` calls ``read`` (a rocksdict ``get`` taking a list of keys) on contiguous
slices of ``keys``, one slice in the calling thread and the others in a small shared pool, and
returns the values in the order of ``keys``. Slices stay contiguous so that each thread reads a
sorted run of keys (sorted keys read faster). The pool has one thread per core beyond the
first, at most three; on a machine with one core the read is a single call.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0  # a forked child has no pool threads: it makes its own
_THREADS = max(0, min(3, (os.cpu_count() or 1) - 1))


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="incview-read")
        _pool_pid = os.getpid()
    return _pool


def get_many(read: Callable[[list[bytes]], list], keys: list[bytes]) -> list:
    """``read(keys)``, computed as ``_THREADS + 1`` slices in parallel."""
    if not _THREADS:
        return read(keys)
    parts = _THREADS + 1
    step = -(-len(keys) // parts)
    slices = [keys[i : i + step] for i in range(0, len(keys), step)]
    futures = [_executor().submit(read, s) for s in slices[1:]]
    out = read(slices[0])
    for f in futures:
        out.extend(f.result())
    return out
