"""Whether the replication slot still holds every change the views need.

The slot is the views' only source of changes: if an operator drops it, ``max_slot_wal_keep_size``
invalidates it, or it is re-created (by hand, or after a restore or failover that lost it), the
changes between the views' state and the slot's new position are gone and a view that simply
went on reading would be silently wrong. ``slot_losses`` compares the slot with the LSN each
view's state needs (the smallest it has not applied; the slot never moves past it on its own,
since it is advanced to the smallest over all views): a missing or invalidated slot loses every
view, a slot whose ``confirmed_flush_lsn`` is past a view's needed LSN loses that view. The
engine re-populates what is lost (seed 003: "back to population") and says why. This module only
reads ``pg_replication_slots``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psycopg

from engine.postgres.cdc import parse_lsn


@dataclass(frozen=True)
class SlotState:
    exists: bool
    confirmed_lsn: int | None = None
    wal_status: str | None = None  # reserved, extended, unreserved, lost

    @property
    def usable(self) -> bool:
        return self.exists and self.wal_status != "lost"


def slot_state(conn: psycopg.Connection, slot: str) -> SlotState:
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text, wal_status FROM pg_replication_slots "
        "WHERE slot_name = %s AND database = current_database()",
        (slot,),
    ).fetchone()
    if row is None:
        return SlotState(False)
    return SlotState(True, parse_lsn(row[0]) if row[0] else None, row[1])


def slot_losses(slot: str, state: SlotState, needed: Mapping[str, int]) -> dict[str, str]:
    """View name -> why its changes are lost, for the views (``needed``: view -> the LSN its
    state needs changes after) that the slot can no longer serve."""
    if not state.exists:
        why = f"the replication slot {slot} was dropped"
        return {name: why for name in needed}
    if state.wal_status == "lost":
        why = f"the replication slot {slot} was invalidated (its WAL was removed)"
        return {name: why for name in needed}
    confirmed = state.confirmed_lsn or 0
    return {
        name: (
            f"the replication slot {slot} starts at {_lsn(confirmed)}, past {_lsn(lsn)} where the "
            "view's state is (re-created or restored)"
        )
        for name, lsn in needed.items()
        if lsn < confirmed
    }


def _lsn(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"
