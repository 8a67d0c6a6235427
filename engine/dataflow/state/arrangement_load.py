"""Loading rows into a join arrangement under keys it holds nothing for, without a delta join.

``HotKeys.promote`` moves the rows of join keys that just became hot into the row join's
arrangement (``state.arrangement``): those keys hold nothing there yet (a key stays hot once it
was), the time's pairs were already emitted by the columnar step, and an inner join tracks no
matches. ``load_new_keys`` writes such keys straight in the arrangement's layout: per key the
entry with each side's part (its ``(row, weight)`` list, or the number of its rows for a side of
more than ``HOT_ROWS`` rows, whose rows then get entries of their own). Running
``DeltaJoin.step`` over the empty keys instead builds a ``RowState`` per row and looks for pairs
it then drops (TPC-H Q10 at SF 1: 150,000 customers under 25 nation keys, promoted while the
view is populated).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from itertools import chain

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.state.arrangement import (
    HOT_ROWS,
    LEFT,
    RIGHT,
    group_deltas,
    key_entry,
    side_prefix,
)
from engine.dataflow.state.keycodec import merge_by_key
from engine.dataflow.state.store import StateTable

_PROTOCOL = 5


def load_new_keys(
    table: StateTable,
    left_key: Sequence[int],
    right_key: Sequence[int],
    d_left: DiffBatch,
    d_right: DiffBatch,
    row_keys: tuple[list[bytes], list[bytes]] | None = None,
) -> bool:
    """Stage the rows of ``d_left`` and ``d_right`` (weights after the time) under their join
    keys, as ``DeltaJoin(table, left_key, right_key, pairs=False).step`` would. Returns False,
    staging nothing, when the table already holds one of the keys (the caller then runs the
    delta join). Rows with a NULL in a key column never match and are not stored. ``row_keys``:
    each row's ``encode_key`` bytes, in the batches' order, when the caller has them
    (``columnar.key_reprs``)."""
    gl, _, _ = group_deltas(d_left, left_key)
    gr, _, _ = group_deltas(d_right, right_key)
    kbs = sorted(gl.keys() | gr.keys())
    heads = [key_entry(kb) for kb in kbs]
    if any(v is not None for v in table.get_many(heads)):
        return False
    # a row's key bytes found by the row itself (its object: the batches hold every row)
    known = None
    if row_keys is not None:
        rows = chain(d_left.rows, d_right.rows)
        known = dict(zip(map(id, rows), chain.from_iterable(row_keys), strict=True))
    entry_keys: list[bytes] = []
    entry_values: list[bytes] = []
    for kb, head in zip(kbs, heads, strict=True):
        left = _side(table, kb, LEFT, gl.get(kb), known)
        right = _side(table, kb, RIGHT, gr.get(kb), known)
        if left or right:
            entry_keys.append(head)
            entry_values.append(pickle.dumps((left, right), _PROTOCOL))
    table.put_many(entry_keys, entry_values)
    return True


def _side(
    table: StateTable,
    kb: bytes,
    side: bytes,
    delta: list[tuple[Row, int]] | None,
    known: dict[int, bytes] | None,
) -> list[tuple[Row, int]] | int:
    """One side's part of a key entry, its row entries staged when it holds more than
    ``HOT_ROWS`` rows. Rows equal under SQL equality add up; the first spelling is kept.
    ``known``: the rows' ``encode_key`` bytes by ``id(row)``."""
    if not delta:
        return []
    rows, weights = zip(*delta, strict=True)
    keys = None if known is None else [known[id(r)] for r in rows]
    merged = merge_by_key(rows, weights, keys)
    live = [(eb, row, w) for eb, (row, w) in merged.items() if w]
    if len(live) <= HOT_ROWS:
        return [(row, w) for _, row, w in live]
    prefix = side_prefix(kb, side)
    dumps = pickle.dumps
    table.put_many(
        [prefix + eb for eb, _, _ in live], [dumps((row, w), _PROTOCOL) for _, row, w in live]
    )
    return len(live)
