"""The engine's memory budget setting: ``Engine(memory_mb=...)``, else ``INCVIEW_MEMORY_MB``.

Unset or 0: no engine-wide budget (each view's state keeps its own caches: see
``engine.dataflow.state.memory_budget``); a number of megabytes (at least 32): one
``MemoryBudget`` of that size for every view this engine opens. Its collections' caches share it
by use; ``INCVIEW_BUDGET_SHARES=equal`` gives them equal parts instead (what it did before
2026-12-01: for comparisons, ``bench.memory_budget``).
"""

from __future__ import annotations

import contextlib
import os

from engine.dataflow.state.memory_budget import MIN_BYTES, MemoryBudget

MEMORY_MB_ENV = "INCVIEW_MEMORY_MB"
SHARES_ENV = "INCVIEW_BUDGET_SHARES"


def memory_budget_setting(value: int | None) -> MemoryBudget | None:
    """The budget ``value`` megabytes name (None: the environment variable's, if set).

    >>> memory_budget_setting(0) is None, memory_budget_setting(64).total_bytes >> 20
    (True, 64)
    """
    mb = memory_mb_setting(value)
    if not mb:
        return None
    shares = os.environ.get(SHARES_ENV, "use").strip() or "use"
    if shares not in ("use", "equal"):
        raise ValueError(f"{SHARES_ENV} must be 'use' or 'equal', not {shares!r}")
    return MemoryBudget(mb << 20, by_use=shares == "use")


def memory_mb_setting(value: int | str | None, source: str = "memory_mb") -> int:
    """``value`` (None: the environment variable, unset: 0) as a checked number of megabytes.
    Raises ``ValueError`` naming the setting for anything but 0 or a whole number of at least
    32.

    >>> memory_mb_setting("512"), memory_mb_setting(None)
    (512, 0)
    >>> memory_mb_setting(8)
    Traceback (most recent call last):
    ...
    ValueError: memory_mb must be a whole number of megabytes, at least 32 (0: no budget), not 8
    """
    if value is None:
        value = os.environ.get(MEMORY_MB_ENV, "").strip()
        if not value:
            return 0
        source = MEMORY_MB_ENV
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # not a number: refused below, as it was given
            value = int(value)
    least = MIN_BYTES >> 20
    if isinstance(value, bool) or not isinstance(value, int) or 0 < value < least or value < 0:
        raise ValueError(
            f"{source} must be a whole number of megabytes, at least {least} (0: no budget), "
            f"not {value!r}"
        )
    return value
