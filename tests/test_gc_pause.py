"""gc_paused: the collector off inside a bulk step, back on after it, left to the outermost."""

from __future__ import annotations

import gc

import pytest

from engine.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_off_inside_and_on_after_also_after_an_error():
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), gc_paused():
        1 / 0  # noqa: B018
    assert gc.isenabled()


def test_a_step_inside_another_leaves_it_to_the_outermost():
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the inner step turned the collector back on too early"
    assert gc.isenabled()


def test_a_collector_already_off_stays_off():
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_population_and_apply_run_with_the_collector_off(monkeypatch):
    """The engine's two bulk steps are wrapped (a plain call shows the switch)."""
    from engine.applying import ApplyMixin
    from engine.population import PopulationMixin

    seen = []
    for cls, name in ((PopulationMixin, "_populate"), (ApplyMixin, "_apply_view")):
        inner = getattr(cls, name).__wrapped__
        monkeypatch.setattr(inner, "__code__", _record.__code__)
        getattr(cls, name)(seen)
    assert seen == [False, False]


def _record(seen, *args, **kwargs):
    """Runs with the wrapped method's module globals: imports what it uses itself."""
    import gc

    seen.append(gc.isenabled())
