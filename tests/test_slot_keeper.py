"""SlotKeeper: requests coalesce into background advances, flush() advances in the caller's
thread after any advance in flight, stop() ends the thread, a failing advance does not kill it.
The Engine-level behaviour (the slot follows the views after catch_up) is in
tests/e2e/test_engine_running.py."""

from __future__ import annotations

import threading
import time

import pytest

from engine.slot_keeper import SlotKeeper


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def test_requests_run_in_the_background_and_coalesce():
    calls: list[str] = []
    release = threading.Event()

    def advance():
        calls.append(threading.current_thread().name)
        release.wait(5)

    keeper = SlotKeeper(advance)
    try:
        keeper.request()
        wait_for(lambda: len(calls) == 1)
        for _ in range(10):  # while the first advance runs: one more, not ten
            keeper.request()
        release.set()
        wait_for(lambda: len(calls) == 2)
        time.sleep(0.05)
        assert len(calls) == 2
        assert set(calls) == {"incview-slot-keeper"}
    finally:
        release.set()
        keeper.stop()


def test_flush_waits_for_the_advance_in_flight_then_advances_in_the_caller():
    order: list[str] = []
    started = threading.Event()
    release = threading.Event()

    def advance():
        name = threading.current_thread().name
        if name == "incview-slot-keeper":
            started.set()
            release.wait(5)
        order.append(name)

    keeper = SlotKeeper(advance)
    try:
        keeper.request()
        assert started.wait(5)
        threading.Timer(0.1, release.set).start()
        keeper.flush()
        assert order == ["incview-slot-keeper", threading.current_thread().name]
    finally:
        keeper.stop()


def test_a_failing_background_advance_is_retried_and_flush_raises_its_own_failure():
    attempts = [0]

    def advance():
        attempts[0] += 1
        if attempts[0] <= 2:
            raise RuntimeError("slot busy")

    keeper = SlotKeeper(advance)
    try:
        keeper.request()
        wait_for(lambda: attempts[0] == 1)
        keeper.request()
        wait_for(lambda: attempts[0] == 2)
        keeper.flush()  # the third attempt succeeds: the earlier failures are only logged
        assert attempts[0] == 3
    finally:
        keeper.stop()
    failing = SlotKeeper(lambda: (_ for _ in ()).throw(RuntimeError("no slot")))
    try:
        with pytest.raises(RuntimeError, match="no slot"):
            failing.flush()
    finally:
        failing.stop()


def test_stop_ends_the_thread_without_advancing():
    calls = [0]
    keeper = SlotKeeper(lambda: calls.__setitem__(0, calls[0] + 1))
    keeper.stop()
    assert not keeper._thread.is_alive()
    assert calls[0] == 0
