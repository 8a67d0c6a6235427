"""``running(engine)``: ``Engine.run`` in a thread while a test's block runs.

Tests drive what a long-lived ``incview run`` answers (its commander's CALLs, its streaming
queries) from the test's own thread: the block runs while the engine runs; on leaving it the
engine stops (a batch in flight commits first) and an error ``run`` raised fails the test.
``Running.failure`` lets a block look at such an error while the engine should still run.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Running:
    thread: threading.Thread
    stop: threading.Event = field(default_factory=threading.Event)
    failure: list[BaseException] = field(default_factory=list)


@contextlib.contextmanager
def running(engine, join_s: float = 120, **run_kwargs) -> Iterator[Running]:
    """Run ``engine.run(**run_kwargs)`` in a thread for the duration of the block."""
    state = Running(threading.Thread(target=lambda: None))

    def run() -> None:
        try:
            engine.run(stop=state.stop, **run_kwargs)
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread
            state.failure.append(e)

    state.thread = threading.Thread(target=run, name="engine-run", daemon=True)
    state.thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        state.thread.join(join_s)
    assert not state.thread.is_alive(), f"Engine.run did not stop within {join_s:g} s"
    if state.failure:
        raise state.failure[0]
