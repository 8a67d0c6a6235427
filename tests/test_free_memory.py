"""``engine.free_memory.release_free_memory`` gives freed heap pages back to the OS."""

from __future__ import annotations

import sys

import pytest

from engine.free_memory import _malloc_trim, release_free_memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or _malloc_trim() is None, reason="glibc on Linux"
)
def test_freed_heap_pages_go_back_to_the_os():
    # 2 KB chunks come from malloc's heap; keeping every 64th alive pins the heap's top, so
    # free() alone cannot shrink it: only a trim returns the free pages between them
    chunks = [bytes(2048) for _ in range(120_000)]
    chunks = [c if i % 64 == 0 else None for i, c in enumerate(chunks)]
    before = _rss_mb()
    release_free_memory()
    after = _rss_mb()
    assert before - after > 100, (before, after)
    assert sum(c is not None for c in chunks) > 1000  # the live ones are untouched
    release_free_memory()  # nothing left to free: still fine
