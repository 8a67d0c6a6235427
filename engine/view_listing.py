"""``list_views`` and ``ViewStatus``: each view's phase, lag, rows, state size and last error.

Lag comes from a peek of the slot: 0 when nothing is pending for a view, else now minus the
commit time of the last source transaction it applied (or of the oldest pending one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.api_lock import serialized
from engine.postgres.cdc import (
    visible_in_snapshot,
)
from engine.postgres.pgoutput import Begin, Commit, PgOutputDecoder, Relation, Truncate
from engine.sql.planner import explain

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ViewStatus:
    name: str
    phase: str  # populating | running | error | sink_error
    lag_ms: float | None
    rows: int | None
    state_bytes: int
    last_error: str | None


class ViewListingMixin:
    """The part of ``Engine`` described in the module docstring."""

    @serialized
    def list_views(self) -> list[ViewStatus]:
        """Every view's status.

        ``lag_ms``: 0 when the view has applied every committed change of its inputs (nothing
        pending in the slot beyond what it applied); while changes are pending, now minus the
        commit time of the last source transaction the view applied (or, before it applied any,
        of the oldest pending one); None for a view this engine has not opened.
        """
        pending = self._pending_commit_times()
        now = datetime.now(UTC)
        out = []
        for record in self.catalog.all():
            view = self.views.get(record.name)
            rows = None
            lag = None
            if view is not None:
                rows = view.sink.row_count(self.conn)  # (on Spark the sink's is the query's)
                oldest = pending.get(record.name)
                if oldest is None:
                    lag = 0.0
                else:
                    since = view.last_commit or oldest
                    lag = max(0.0, (now - since).total_seconds() * 1000)
            out.append(
                ViewStatus(
                    record.name,
                    record.phase,
                    lag,
                    rows,
                    view.store.size_bytes() if view is not None else 0,
                    record.last_error,
                )
            )
        return out

    def _pending_commit_times(self, max_changes: int = 10_000) -> dict[str, datetime]:
        """View name -> commit time of its oldest pending transaction (one that touches its
        inputs and that it has not applied), from a peek of the slot; a fresh decoder, so the
        reader's own position and state are left alone."""
        if not self.views or not self.reader.slot_exists():
            return {}
        decoder = PgOutputDecoder()
        result: dict[str, datetime] = {}
        begin: Begin | None = None
        touched: set[str] = set()
        for data in self.reader.peek(max_changes):
            kind = data[0]
            if kind in (73, 85, 68, 84, 66, 67, 82, 89):  # I U D T B C R Y
                ev = decoder.decode(data)
            else:
                continue
            if isinstance(ev, Begin):
                begin, touched = ev, set()
            elif isinstance(ev, Commit):
                if begin is None:
                    continue
                for view in self.views.values():
                    if (
                        view.name not in result
                        and ev.end_lsn > view.state_time
                        and touched.intersection(view.inputs)
                        and not (
                            view.snapshot is not None
                            and visible_in_snapshot(begin.xid, view.snapshot)
                        )
                    ):
                        result[view.name] = ev.commit_ts
                begin = None
            elif isinstance(ev, Truncate):
                for o in ev.oids:
                    if o in decoder.relations:
                        touched.add(decoder.relations[o].qualified_name)
                        touched.update(self.reader.ancestors_of(o))  # a partition's parents
            elif not isinstance(ev, Relation) and hasattr(ev, "oid"):
                rel = decoder.relations.get(ev.oid)
                if rel is not None and rel.qualified_name not in touched:
                    touched.add(rel.qualified_name)
                    touched.update(self.reader.ancestors_of(ev.oid))
        return result

    @serialized
    def explain(self, sql: str, time_zone: str | None = None) -> str:
        """The plans of ``sql`` under Postgres ``TimeZone`` ``time_zone`` (default: the engine
        connection's), as ``create_view`` would make them."""
        return explain(sql, self.sources, time_zone or self.session_time_zone())
