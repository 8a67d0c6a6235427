"""Point reads of many keys split over threads: RocksDB reads run without the GIL.

``get_many(read, keys)`` calls ``read`` (a rocksdict ``get`` taking a list of keys) on contiguous
slices of ``keys``, one slice in the calling thread and the others in a small shared pool, and
returns the values in the order of ``keys``. Slices stay contiguous so that each thread reads a
sorted run of keys (sorted keys read faster). The pool has one thread per core beyond the
first, at most three; on a machine with one core the read is a single call. ``ahead(read, keys)``
starts one such read in a thread of its own and returns its future: a collection reads what it
will need later while its own thread goes on with other work.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

_pools: dict[str, tuple[ThreadPoolExecutor, int]] = {}  # forked children make their own
_THREADS = max(0, min(3, (os.cpu_count() or 1) - 1))


def _executor(name: str = "incview-read", threads: int = _THREADS) -> ThreadPoolExecutor:
    pool = _pools.get(name)
    if pool is None or pool[1] != os.getpid():
        pool = _pools[name] = (ThreadPoolExecutor(threads, thread_name_prefix=name), os.getpid())
    return pool[0]


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


def ahead(read: Callable[[list[bytes]], list], keys: list[bytes]) -> Future:
    """``read(keys)`` running in a thread of its own (not the pool ``get_many`` splits over, so
    that reads the caller makes meanwhile do not wait behind it); its future. With one core:
    done before it returns."""
    if not _THREADS:
        done: Future = Future()
        done.set_result(read(keys))
        return done
    return _executor("incview-read-ahead", 1).submit(read, keys)


def settle() -> None:
    """Wait until every read started by ``ahead`` in this process has finished (a store about to
    close must not be read meanwhile): the reads run one after the other in one thread."""
    pool = _pools.get("incview-read-ahead")
    if pool is not None and pool[1] == os.getpid():
        pool[0].submit(int).result()
