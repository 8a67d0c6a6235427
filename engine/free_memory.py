"""Handing memory freed by a big step (a population) back to the operating system.

A population builds Arrow arrays, Python objects and write batches of hundreds of MB that are
freed when it ends, but the allocators keep the pages: Arrow's pool (mimalloc or jemalloc)
caches them, and glibc's malloc only returns the top of its heap. ``release_free_memory``
asks both to give back what they hold unused (measured on the 11 TPC-H views at SF 0.1: the
engine's RSS after the last population 877 -> ~650 MB). It frees nothing in use, so it is safe
to call at any time; it costs a few milliseconds, so call it after big steps, not per batch.
A running engine applies change after change, whose batches are freed the same way:
``ThrottledRelease`` gives their pages back at most every ``RELEASE_INTERVAL_S`` (at SF 1, the
11 TPC-H views after 9 streams: the process's own memory 317 -> 271 MB, in 2.6 ms).
"""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Callable

import pyarrow as pa


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim`` (from the C library the process already has loaded), or None
    where it has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> None:
    """Return the free pages of Arrow's memory pool and of the C heap to the OS."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: the least time between two releases of a running engine (``ThrottledRelease``)
RELEASE_INTERVAL_S = 10.0


class ThrottledRelease:
    """``release_free_memory`` when called, unless it ran less than ``interval_s`` ago: for the
    places a running engine passes after every poll (the end of ``catch_up``, an idle poll of
    ``run``). Must be called from the thread that applies the changes: Arrow's mimalloc pool
    gives back the calling thread's free pages."""

    def __init__(
        self,
        interval_s: float = RELEASE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        release: Callable[[], None] = release_free_memory,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._release = release
        self._last = clock()
        self.releases = 0

    def __call__(self) -> bool:
        """Release now if the interval has passed; returns whether it did."""
        now = self._clock()
        if now - self._last < self.interval_s:
            return False
        self._release()
        self._last = now
        self.releases += 1
        return True
