"""Where a ``catch_up`` spends its time, per view: wall-clock wrappers on the engine's parts.

``PhaseTimes(engine)`` wraps the shared CDC reader (``flush_wal``, ``poll`` = peek + pgoutput
decode, ``advance``) and, for every view, its dataflow (``push``, ``time_end``, ``commit``) and
its sink (``apply``). After a timed ``catch_up`` of ``total`` seconds, ``alone(view, total)``
is the time the view would have needed by itself: the whole ``catch_up`` less what the other
views' dataflows and sinks took (the shared CDC work and the orchestration stay in). This is an
estimate: alone, the publication would carry only the view's tables, so the decode part is an
upper bound for views over fewer tables. When the engine's parts are not there to wrap (a runner
that does not run the dataflow in this process), ``per_view`` is False and only the whole
``catch_up`` is known. It only measures: it changes no behaviour.
"""

from __future__ import annotations

import time

from engine.engine import Engine

SHARED = ("flush_wal", "poll", "advance")


class PhaseTimes:
    def __init__(self, engine: Engine) -> None:
        self.shared = dict.fromkeys(SHARED, 0.0)
        self.own: dict[str, float] = {}
        self.per_view = True
        try:
            for method in SHARED:
                self._wrap(engine.reader, method, self.shared, method)
            for name, view in engine.views.items():
                self.own[name] = 0.0
                df = view.physical.dataflow
                for method in ("push", "time_end", "commit"):
                    self._wrap(df, method, self.own, name)
                self._wrap(view.sink, "apply", self.own, name)
        except AttributeError:
            self.per_view = False

    @staticmethod
    def _wrap(obj: object, method: str, totals: dict[str, float], key: str) -> None:
        real = getattr(obj, method)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                totals[key] += time.perf_counter() - t0

        setattr(obj, method, timed)

    def reset(self) -> None:
        for d in (self.shared, self.own):
            for k in d:
                d[k] = 0.0

    def alone(self, view: str, total: float) -> float:
        return total - sum(t for name, t in self.own.items() if name != view)

    def breakdown(self, total: float) -> str:
        parts = [f"{k} {v * 1000:.0f}" for k, v in self.shared.items()]
        parts += [f"{k} {v * 1000:.0f}" for k, v in sorted(self.own.items(), key=lambda x: -x[1])]
        rest = total - sum(self.shared.values()) - sum(self.own.values())
        return ", ".join(parts) + f", other {rest * 1000:.0f} (ms)"
