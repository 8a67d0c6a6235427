"""``Transaction``: one committed source transaction as diffs per table, what ``CdcReader.poll``
returns."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from engine.dataflow.batch import DiffBatch
from engine.postgres.pgoutput import Relation
from engine.postgres.tx_spill import SpilledChanges


@dataclass
class Transaction:
    """One committed source transaction as diffs per table ("schema.table", unquoted).

    ``truncated`` names the tables the transaction TRUNCATEd: a consumer first retracts the
    table's whole content as of *before* this transaction, then applies ``changes[table]``, which
    holds only the diffs made after the transaction's last TRUNCATE of that table (the earlier
    ones were wiped by it). ``relations[table]`` is the table's shape at the end of the
    transaction; every row of ``changes[table]`` follows its columns (rows written before a
    schema change inside the same transaction are re-shaped by column name, added columns None).
    """

    xid: int  # 32-bit, as pgoutput sends it (widen with visible_in_snapshot's rule)
    commit_lsn: int
    end_lsn: int  # pass this to CdcReader.advance() once the transaction is applied
    commit_ts: datetime
    changes: dict[str, DiffBatch] = field(default_factory=dict)
    truncated: set[str] = field(default_factory=set)
    relations: dict[str, Relation] = field(default_factory=dict)
    # a huge transaction's diffs beyond the buffering bound, on disk (read with iter_changes)
    spilled: SpilledChanges | None = None

    @property
    def change_count(self) -> int:
        held = sum(len(b) for b in self.changes.values())
        return held + (self.spilled.change_count() if self.spilled is not None else 0)

    def iter_changes(self) -> Iterator[tuple[str, DiffBatch]]:
        """``(table, batch)`` for all the transaction's diffs: the spilled chunks first (one
        batch each, read from disk as they are consumed), then what ``changes`` holds. Several
        batches may name the same table; their sum is the table's change."""
        if self.spilled is not None:
            shapes = {t: rel.column_names for t, rel in self.relations.items()}
            yield from self.spilled.read(shapes)
        yield from self.changes.items()
