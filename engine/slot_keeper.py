"""SlotKeeper: records the views' state LSNs and advances the shared slot, off the apply path.

Advancing a logical slot costs a few catalog round trips and ``pg_replication_slot_advance``,
which decodes the WAL from the slot's restart point again: 3-10 ms a call, and ~5 ms more when a
restart point is marked (``engine.postgres.restart_point``), none of which a result table waits
for. So ``Engine.catch_up`` (and the streaming loops) only ``request()`` an advance
and return as soon as the sinks committed; this thread does the work, coalescing requests that
arrive while it is busy. ``flush()`` does it synchronously (``run()``'s end, ``close()``), and
``stop()`` ends the thread. The work itself (``advance``, a callable from the Engine) runs under
the Engine's advance lock, so it never races a ``drop_view`` that drops the slot.

It must not advance past what every view committed: that rule lives in the callable (the
smallest state LSN over all views of the catalog), not here. A failing background advance is
logged and tried again at the next request; the slot merely keeps its WAL a little longer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class SlotKeeper:
    def __init__(self, advance: Callable[[], None]) -> None:
        self._advance = advance
        self._wake = threading.Condition()
        self._requested = False
        self._busy = False
        self._stopping = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="incview-slot-keeper", daemon=True)
        self._thread.start()

    def request(self) -> None:
        """Ask for an advance soon (returns at once)."""
        with self._wake:
            self._requested = True
            self._wake.notify()

    def flush(self) -> None:
        """Advance now, in the calling thread, after any advance in flight (raising what this
        advance raises; an earlier background failure is only logged: this one supersedes it)."""
        with self._wake:
            while self._busy:
                self._wake.wait()
            self._requested = False
            error, self._error = self._error, None
        self._advance()
        if error is not None:
            log.warning("an earlier background slot advance failed: %s", error)

    def stop(self) -> None:
        """End the thread (an advance in flight finishes first); no final advance."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._requested and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                self._requested = False
                self._busy = True
            try:
                self._advance()
            except Exception as e:  # kept for flush(); the next request tries again
                log.debug("background slot advance failed: %s", e)
                self._error = e
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()
