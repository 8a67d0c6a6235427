"""read_ahead: a population's source batches produced by a thread, in order, errors and early
stops handed across."""

import threading
import time

import pytest

from engine.postgres.read_ahead import read_ahead, read_ahead_all


def test_items_arrive_in_order_from_another_thread():
    threads = []

    def items():
        for i in range(50):
            threads.append(threading.current_thread())
            yield i

    with read_ahead(items()) as ahead:
        assert list(ahead) == list(range(50))
    assert threads and all(t is not threading.current_thread() for t in threads)


def test_the_producer_stays_at_most_depth_items_ahead():
    produced = []

    def items():
        for i in range(100):
            produced.append(i)
            yield i

    with read_ahead(items(), depth=2) as ahead:
        first = next(ahead)
        time.sleep(0.3)
        # one handed over, two waiting in the queue, one blocked in put
        assert first == 0 and len(produced) <= 4


def test_an_error_of_the_reader_is_raised_at_its_batch():
    def items():
        yield 1
        yield 2
        raise RuntimeError("the COPY failed")

    got = []
    with pytest.raises(RuntimeError, match="the COPY failed"), read_ahead(items()) as ahead:
        for item in ahead:
            got.append(item)
    assert got == [1, 2]


def test_a_consumer_stopping_early_stops_and_closes_the_reader():
    closed = threading.Event()

    def items():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    with pytest.raises(ValueError), read_ahead(items()) as ahead:
        for item in ahead:
            if item == 3:
                raise ValueError("the sink failed")
    assert closed.is_set()  # the connection is free again when read_ahead returns


def test_several_producers_each_in_order_every_item_once():
    def items(tag, n):
        for i in range(n):
            yield tag, i

    with read_ahead_all([items("a", 40), items("b", 25), items("c", 0)], depth=3) as ahead:
        got = list(ahead)
    for tag, n in (("a", 40), ("b", 25)):
        assert [i for t, i in got if t == tag] == list(range(n))
    assert len(got) == 65


def test_the_byte_budget_bounds_what_is_read_ahead():
    produced = []

    def items():
        for i in range(100):
            produced.append(i)
            yield b"x" * 1000

    with read_ahead_all([items()], depth=50, budget=3000, size=len) as ahead:
        next(ahead)
        time.sleep(0.3)
        # one handed over, three (3,000 bytes) waiting, one blocked on the budget
        assert len(produced) <= 5
        assert sum(1 for _ in ahead) == 99


def test_an_error_of_one_producer_stops_the_others():
    stopped = threading.Event()

    def endless():
        try:
            while True:
                yield 0
        finally:
            stopped.set()

    def failing():
        yield 1
        raise RuntimeError("one range failed")

    with (
        pytest.raises(RuntimeError, match="one range failed"),
        read_ahead_all([endless(), failing()], depth=4) as ahead,
    ):
        for _ in ahead:
            pass
    assert stopped.is_set()
