"""The TimeZone a view's expressions are evaluated under: Postgres' session setting, as planned.

Postgres computes casts between timestamptz and date/timestamp/text, ``date_trunc`` and
``extract`` of a timestamptz (and of a date, which it promotes to timestamptz) and timestamptz
+/- interval in the session's ``TimeZone``. incview captures the creating session's value when a
view is created (the catalog keeps it with the view) and plans the view under that zone every
time, whatever the zone of a later session or of the engine's own connections.

``planning_time_zone(name)`` makes ``name`` the zone the expression compiler reads for the
duration of one planning, and records whether a compiled expression depended on it (the
physical plan, and so ``explain``, names it then). With no zone (``None``: a caller that did not
capture one) zone-dependent expressions are refused. This module must not evaluate values or
talk to Postgres.

>>> with planning_time_zone("Europe/Paris") as tz:
...     current_time_zone() is tz, tz.used
(True, False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from engine.errors import UnsupportedSQL
from engine.sql.zoned_time import load_zone


@dataclass
class PlanningTimeZone:
    """The zone of one planning (``name``: Postgres' ``TimeZone`` setting, or None) and
    whether an expression used it."""

    name: str | None
    used: bool = False

    def zone(self, what: str, where: str):
        """The ``ZoneInfo`` of ``name`` for ``what`` (found ``where``); marks the zone used.

        Raises ``UnsupportedSQL`` when there is no zone or the tz database does not know it."""
        if self.name is None:
            raise UnsupportedSQL(
                f"{what} is not supported {where}: it depends on the session's TimeZone, and "
                "this planning has none (plan the view with the TimeZone of the session that "
                "creates it)"
            )
        try:
            zone = load_zone(self.name)
        except ValueError:
            raise UnsupportedSQL(
                f"{what} is not supported {where}: it depends on the session's TimeZone "
                f"{self.name!r}, which is not a zone of the IANA tz database; SET TimeZone to a "
                "zone name such as 'Europe/Paris' (or 'UTC') in the session that creates the view"
            ) from None
        self.used = True
        return zone


_CURRENT: ContextVar[PlanningTimeZone | None] = ContextVar("incview_time_zone", default=None)


def current_time_zone() -> PlanningTimeZone:
    """The zone of the planning under way (a zone-less one outside ``planning_time_zone``)."""
    return _CURRENT.get() or PlanningTimeZone(None)


@contextlib.contextmanager
def planning_time_zone(name: str | None) -> Iterator[PlanningTimeZone]:
    """Plan under Postgres ``TimeZone`` ``name`` inside the ``with`` block."""
    tz = PlanningTimeZone(name)
    token = _CURRENT.set(tz)
    try:
        yield tz
    finally:
        _CURRENT.reset(token)
