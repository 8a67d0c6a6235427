"""Peak resident memory of the engine process and of its child processes (Spark's JVM and its
Python workers), sampled from /proc (Linux) by a background thread.

``MemorySampler().start()`` ... ``stop()``; ``peak_mb`` holds, per group (``engine`` = this
process, ``jvm`` = java descendants, ``workers`` = other descendants), the largest sum of RSS
seen at one sample. The engine's own peak also reads the kernel's high-water mark (VmHWM), which
misses nothing between samples; ``reset_high_water`` restarts that mark (to read the peak of one
step, e.g. one view's population: ``MemorySampler.stop`` then still reports the whole run's peak,
kept in ``peak_mb`` by the sampler). The engine's samples are also split in two (largest of
each): ``engine_anon``, its own memory (anonymous pages: Python, Arrow, RocksDB's caches), and
``engine_files``, the pages of files it maps (its libraries and, read through a memory map, the
state's table files: the kernel's page cache, clean, dropped under memory pressure). It only reads
/proc, and writes this process's clear_refs.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_bytes(pid: int) -> int:
    return _resident(pid)[0]


def _resident(pid: int) -> tuple[int, int]:
    """(resident bytes, of which file-backed or shared) of ``pid``; zeros when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
        return int(fields[1]) * PAGE, int(fields[2]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0, 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            out += [int(x) for x in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
        except OSError:
            continue
    return out


def _descendants(pid: int) -> list[int]:
    todo, seen = _children(pid), []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


def _is_java(pid: int) -> bool:
    try:
        return b"java" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


def reset_high_water() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux ``clear_refs`` 5); False if denied."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def high_water_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class MemorySampler:
    def __init__(self, interval_s: float = 0.25, exclude: set[int] | None = None) -> None:
        self.interval_s = interval_s
        self.exclude = exclude if exclude is not None else set()  # e.g. the writer process
        self.peak_mb = {
            "engine": 0.0,
            "jvm": 0.0,
            "workers": 0.0,
            "engine_anon": 0.0,
            "engine_files": 0.0,
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        me = os.getpid()
        resident, files = _resident(me)
        now = {
            "engine": resident,
            "jvm": 0,
            "workers": 0,
            "engine_anon": resident - files,
            "engine_files": files,
        }
        for pid in _descendants(me):
            if pid in self.exclude:
                continue
            now["jvm" if _is_java(pid) else "workers"] += _rss_bytes(pid)
        for k, v in now.items():
            self.peak_mb[k] = max(self.peak_mb[k], v / 2**20)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def note_high_water(self) -> float:
        """Fold the kernel's high-water mark into the engine's peak; returns it (MB)."""
        hwm = high_water_mb()
        self.peak_mb["engine"] = max(self.peak_mb["engine"], hwm)
        return hwm

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.note_high_water()
        return self.peak_mb
