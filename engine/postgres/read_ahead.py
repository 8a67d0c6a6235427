"""Reading ahead: a population's source reads run in threads while the dataflow computes.

A population alternates between waiting for the next batch of source rows (ADBC/libpq and the
Arrow casts, which release the GIL) and pushing it through the dataflow (numpy, Arrow and
RocksDB, which mostly release it too). ``read_ahead(batches)`` runs the iterator in a daemon
thread that stays at most ``depth`` batches ahead, so on two cores the read and the compute
overlap instead of taking turns. ``read_ahead_all([a, b, ...])`` runs several iterators, each in
its own thread (each reading on its own connection, ``engine.postgres.parallel_reads``), into
one queue of ``depth`` items: every item of every iterator once, each iterator's in its order,
the iterators' interleaved as they come. A reading connection is used by its thread alone while
the iterator runs; an error in one is raised to the consumer at the item where it happened (the
others are stopped), and a consumer that stops early (an error of its own) stops the threads
before the connections are used again.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
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
    with read_ahead_all([items], depth) as ahead:
        yield ahead


@contextmanager
def read_ahead_all(
    producers: Sequence[Iterator[T]],
    depth: int = 2,
    budget: int | None = None,
    size: Callable[[T], int] | None = None,
) -> Iterator[Iterator[T]]:
    """The items of all ``producers``, each run by its own thread, at most ``depth`` items
    ahead of the consumer together (see the module docstring); with ``budget`` also at most
    that many bytes (``size(item)``) ahead, beyond one item."""
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    ahead = threading.Condition()
    held = [0]  # the bytes of the items produced and not consumed yet

    def offer(item, n: int = 0) -> bool:
        if budget is not None:
            with ahead:
                while held[0] and held[0] + n > budget and not stop.is_set():
                    ahead.wait(0.1)
                held[0] += n
        while not stop.is_set():
            try:
                slots.put((item, n), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce(items: Iterator[T]) -> None:
        try:
            for item in items:
                if not offer(item, size(item) if size is not None else 0):
                    return
            offer(_DONE)
        except BaseException as e:  # handed to the consumer, raised there
            offer(_Failed(e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    threads = [
        threading.Thread(target=produce, args=(items,), name=f"incview-read-ahead-{i}", daemon=True)
        for i, items in enumerate(producers)
    ]
    for thread in threads:
        thread.start()

    def consume() -> Iterator[T]:
        running = len(threads)
        while running:
            item, n = slots.get()
            if n:
                with ahead:
                    held[0] -= n
                    ahead.notify_all()
            if item is _DONE:
                running -= 1
                continue
            if isinstance(item, _Failed):
                raise item.error
            yield item

    try:
        yield consume()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
