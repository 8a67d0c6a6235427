"""Fault: an internal error (a bug raised inside an operator; a state directory that is missing
or corrupt) sends the view back to population by itself (runner local).

The bug is injected into the columnar reduce (the operator the ``totals`` view runs), failing a given number of its calls; everything else is real: Postgres, the slot, the
RocksDB state. Afterwards the views equal their queries; ``list_views`` keeps the error; a view
that fails every time ends in ``error`` after the capped attempts while the others keep running.
"""

from __future__ import annotations

import contextlib
import shutil

import pytest

from engine import Engine, ViewError
from engine.dataflow.collections.columnar_reduce import ColumnarReduceCollection
from engine.view_repairs import ViewRepairs
from tests.e2e.test_engine_oracle import diff_rows
from tests.reliability.test_slot_lost import VIEWS, _setup, _write


def _equal(conn, names=VIEWS):
    return {name: diff_rows(conn, name, VIEWS[name]) for name in names}


def _status(engine):
    return {s.name: (s.phase, s.last_error) for s in engine.list_views()}


@pytest.fixture
def failing_reduce(monkeypatch):
    """``fail[0]`` calls of the columnar reduce's ``_finish`` raise (then it works again): the
    end of a time's work, whether its rows came through the dataflow or its population's groups
    from Postgres (``preload``)."""
    fail = [0]
    finish = ColumnarReduceCollection._finish

    def buggy(self, *args):
        if fail[0] > 0:
            fail[0] -= 1
            raise RuntimeError("injected operator bug")
        return finish(self, *args)

    monkeypatch.setattr(ColumnarReduceCollection, "_finish", buggy)
    return fail


def _open(pg_dsn, state_dir, runner="local", *, create=False):
    """An engine with the test's patience; ``create``: with ``VIEWS`` created."""
    engine = Engine(pg_dsn, state_dir, runner=runner)
    engine.repairs = ViewRepairs(first_delay_s=0.05, cap_s=0.2)
    if create:
        for name, sql in VIEWS.items():
            engine.create_view(name, sql)
    return engine


@pytest.mark.slow
def test_a_bug_in_an_operator_repopulates_the_view(pg_conn, pg_dsn, state_dir, failing_reduce):
    _setup(pg_conn)
    with _open(pg_dsn, state_dir, create=True) as engine:
        _write(pg_conn, 100)
        failing_reduce[0] = 1  # the next batch of the reduce fails once
        engine.catch_up()
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}
        phase, error = _status(engine)["totals"]
        assert phase == "running"
        assert error == "re-populated after an internal error: RuntimeError: injected operator bug"
        assert _status(engine)["rows"] == ("running", None)
        _write(pg_conn, 200)  # and it keeps being maintained
        engine.catch_up()
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}

        failing_reduce[0] = 3  # the batch and two re-populations fail: backoff, then works
        _write(pg_conn, 300)
        engine.catch_up()
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}
        assert _status(engine)["totals"][0] == "running"


@pytest.mark.slow
def test_a_view_failing_every_time_ends_in_error(pg_conn, pg_dsn, state_dir, failing_reduce):
    _setup(pg_conn)
    with _open(pg_dsn, state_dir, create=True) as engine:
        failing_reduce[0] = 10**9
        _write(pg_conn, 100)
        with pytest.raises(ViewError, match="catch_up could not bring view.s. totals up to date"):
            engine.catch_up(timeout_s=30)  # the other view is done, this one gave up
        phase, error = _status(engine)["totals"]
        assert phase == "error"
        assert error.startswith("internal error (RuntimeError: injected operator bug), 5 times")
        assert "repopulate('totals')" in error
        for start in (200, 300):  # the other view keeps running
            _write(pg_conn, start)
            engine.catch_up(timeout_s=30)
            assert _equal(pg_conn, ["rows"]) == {"rows": (0, 0)}
        assert _status(engine)["rows"] == ("running", None)

        failing_reduce[0] = 0  # the bug is fixed: repopulate() brings the view back
        engine.repopulate("totals")
        engine.catch_up()
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}
        _write(pg_conn, 400)
        engine.catch_up()
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}
        assert _status(engine)["totals"][0] == "running"


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_lost_or_corrupt_state_directory_repopulates(pg_conn, pg_dsn, state_dir, damage):
    _setup(pg_conn)
    with _open(pg_dsn, state_dir, create=True) as engine:
        _write(pg_conn, 100)
        engine.catch_up()
    state = state_dir / "views" / "totals" / "state"
    if damage == "missing":
        shutil.rmtree(state)
    else:
        for f in state.iterdir():
            if f.is_file():
                f.write_bytes(b"\x00garbage" * 64)
    _write(pg_conn, 200)  # changes while no engine runs
    with _open(pg_dsn, state_dir) as engine:
        engine.catch_up()
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}
        phase, error = _status(engine)["totals"]
        assert phase == "running"
        assert error is not None and error.startswith("re-populated: its state")
        _write(pg_conn, 300)
        engine.catch_up()
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}


@pytest.mark.slow
def test_a_bug_in_an_operator_on_spark_repopulates_the_view(
    spark, pg_conn, pg_dsn, state_dir, failing_reduce
):
    """The same on the Spark runner: the bug raised in a micro-batch of the view's streaming
    query; the query's view is re-populated and its query restarted from the new state."""
    _setup(pg_conn)
    with _open(pg_dsn, state_dir, "spark", create=True) as engine:
        engine.catch_up(timeout_s=120)
        failing_reduce[0] = 1
        _write(pg_conn, 100)
        engine.catch_up(timeout_s=120)
        _write(pg_conn, 200)
        engine.catch_up(timeout_s=120)
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}
        phase, error = _status(engine)["totals"]
        assert phase == "running"
        assert error == "re-populated after an internal error: RuntimeError: injected operator bug"
        assert failing_reduce[0] == 0


@pytest.mark.slow
def test_a_view_given_up_on_spark_is_right_after_a_restart(
    spark, pg_conn, pg_dsn, state_dir, monkeypatch
):
    """A view whose micro-batches fail every time (its re-populations work) is given up on
    while its streaming query goes on (Spark commits the micro-batches the view skips). After a
    restart with the bug gone it resumes from its state, not from its query's offsets: equal to
    its query, and never ``running`` while it misses changes."""
    broken = [True]
    apply_view = Engine._apply_view

    def buggy(self, view, txs, end):
        if broken[0] and view.name == "totals":
            raise RuntimeError("injected bug in a micro-batch")
        return apply_view(self, view, txs, end)

    monkeypatch.setattr(Engine, "_apply_view", buggy)
    _setup(pg_conn)
    with _open(pg_dsn, state_dir, "spark", create=True) as engine:
        engine.catch_up(timeout_s=120)
        for start in range(100, 800, 100):  # it gives up; later batches are skipped
            _write(pg_conn, start)
            with contextlib.suppress(ViewError):
                engine.catch_up(timeout_s=120)
        phase, error = _status(engine)["totals"]
        assert phase == "error" and "no longer maintained" in error
        assert _equal(pg_conn, ["rows"]) == {"rows": (0, 0)}
    broken[0] = False
    with _open(pg_dsn, state_dir, "spark") as engine:
        engine.catch_up(timeout_s=120)
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}
        assert _status(engine)["totals"][0] == "running"
        _write(pg_conn, 900)
        engine.catch_up(timeout_s=120)
        assert _equal(pg_conn) == {"totals": (0, 0), "rows": (0, 0)}
