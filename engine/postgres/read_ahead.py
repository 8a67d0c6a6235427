"""Reading ahead: a population's source reads run in a thread while the dataflow computes.

A population alternates between waiting for the next batch of source rows (ADBC/libpq and the
Arrow casts, which release the GIL) and pushing it through the dataflow (numpy, Arrow and
RocksDB, which mostly release it too). ``read_ahead(batches)`` runs the iterator in a daemon
thread that stays at most ``depth`` batches ahead, so on two cores the read and the compute
overlap instead of taking turns. The reading connection is used by that thread alone while the
iterator runs; an error in it is raised to the consumer at the batch where it happened, and a
consumer that stops early (an error of its own) stops the thread before the connection is
used again.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

_DONE = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


@contextmanager
def read_ahead(items: Iterator[T], depth: int = 2) -> Iterator[Iterator[T]]:
    """``items``, produced by a thread at most ``depth`` items ahead of the consumer. On exit
    the thread is stopped and joined (and ``items`` closed), also when the consumer stopped
    early."""
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(_DONE)
        except BaseException as e:  # handed to the consumer, raised there
            offer(_Failed(e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="incview-read-ahead", daemon=True)
    thread.start()

    def consume() -> Iterator[T]:
        while True:
            item = slots.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    try:
        yield consume()
    finally:
        stop.set()
        thread.join()
