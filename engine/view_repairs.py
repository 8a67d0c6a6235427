"""When a view that failed inside the engine is re-populated, and when the engine gives up.

An internal error (a bug raised inside an operator, a state store that cannot be read) sends
the view back to population (seed 003: "any other error sends the view back to population").
``ViewRepairs`` keeps, per view, how many times that happened in a row and when the next try
is due: the first right away, then after ``first_delay_s`` doubling up to ``cap_s``; after
``max_attempts`` failures in a row the engine stops trying (phase ``error``) instead of looping
hot on a view that fails the same way every time. A view that then applies changes for
``forgive_after_s`` without failing starts from a clean record again. A full state directory is
retried the same way (its state reopened, not re-populated), and never given up on.

A re-population may also be ``requested`` without a failure (a TRUNCATE seen on a Spark
thread): due at once, not counted. This module only keeps the books: the ``Engine``
(``engine.recovery``) re-populates.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

#: failures in a row after which a view stays in ``error`` (until ``repopulate`` or a restart)
MAX_ATTEMPTS = 5
FIRST_DELAY_S = 1.0
CAP_S = 60.0
FORGIVE_AFTER_S = 300.0


@dataclass
class Repair:
    """One view's failures in a row, the last one's message, and when to re-populate it."""

    failures: int
    error: str
    due: float  # time.monotonic() of the next re-population
    last_failure: float
    repopulate: bool = True  # False: only reopen its state and retry (a full disk)
    pending: bool = True  # False once re-populated (kept to count a repeat failure)


class ViewRepairs:
    """The books of the views that failed with an internal error (see the module docstring)."""

    def __init__(
        self,
        max_attempts: int = MAX_ATTEMPTS,
        first_delay_s: float = FIRST_DELAY_S,
        cap_s: float = CAP_S,
        forgive_after_s: float = FORGIVE_AFTER_S,
    ) -> None:
        self.max_attempts = max_attempts
        self.first_delay_s = first_delay_s
        self.cap_s = cap_s
        self.forgive_after_s = forgive_after_s
        self._repairs: dict[str, Repair] = {}

    def failed(self, name: str, error: str, *, repopulate: bool = True) -> Repair:
        """Record a failure of ``name``; returns its record (``gave_up`` tells what to do).
        ``repopulate=False``: a failure that retrying fixes (a full disk), never given up on."""
        now = time.monotonic()
        old = self._repairs.get(name)
        failures = 1 if old is None else old.failures + 1
        delay = 0.0 if failures == 1 else min(self.cap_s, self.first_delay_s * 2 ** (failures - 2))
        if repopulate and failures >= self.max_attempts:
            delay = math.inf  # given up: only ``forget`` (repopulate, a restart) tries again
        repair = Repair(failures, error, now + delay, now, repopulate)
        self._repairs[name] = repair
        return repair

    def requested(self, name: str, why: str) -> Repair:
        """``name`` must be re-populated for a reason that is not a failure (a TRUNCATE of its
        input seen by a Spark micro-batch, re-populated by the run loop's thread): due now,
        not counted."""
        now = time.monotonic()
        old = self._repairs.get(name)
        repair = Repair(old.failures if old else 0, why, now, now)
        self._repairs[name] = repair
        return repair

    def gave_up(self, repair: Repair) -> bool:
        return repair.repopulate and repair.failures >= self.max_attempts

    def get(self, name: str) -> Repair | None:
        return self._repairs.get(name)

    def gave_up_on(self, name: str) -> bool:
        repair = self._repairs.get(name)
        return repair is not None and self.gave_up(repair)

    def error_of(self, name: str) -> str:
        return self._repairs[name].error

    def is_pending(self, name: str) -> bool:
        """Whether ``name`` waits for its re-population (it applies nothing meanwhile)."""
        repair = self._repairs.get(name)
        return repair is not None and repair.pending

    def due(self) -> list[str]:
        """The views whose re-population is due now."""
        now = time.monotonic()
        return [n for n, r in self._repairs.items() if r.pending and r.due <= now]

    def next_due_in(self) -> float | None:
        """Seconds until the next re-population is due (None: none waits)."""
        dues = [r.due for r in self._repairs.values() if r.pending and r.due < math.inf]
        return max(0.0, min(dues) - time.monotonic()) if dues else None

    def repaired(self, name: str) -> None:
        """``name`` was re-populated: it applies changes again (its failures still count)."""
        if name in self._repairs:
            self._repairs[name].pending = False

    def applied(self, name: str) -> None:
        """``name`` applied a batch: forget its failures once it ran long enough without one."""
        repair = self._repairs.get(name)
        if (
            repair is not None
            and not repair.pending
            and time.monotonic() - repair.last_failure > self.forgive_after_s
        ):
            del self._repairs[name]

    def forget(self, name: str) -> None:
        """``name`` was dropped, gave up, or re-populated on request."""
        self._repairs.pop(name, None)
