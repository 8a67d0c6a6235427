"""Hot keys of the columnar inner join kept column-wise: one state entry per row of a hot key.

The columnar join keeps all rows of a join key (both sides) in one state entry, rewritten whole
whenever the key changes; a key whose entry would hold more than ``hot_rows`` rows must not be
(60,000 customers under one nation key would be rewritten for every change to one of them). Outer
and semi joins hand such keys to the row join's arrangement (``columnar.hot_join_keys``); the inner
join keeps them here, in the same record codec as its entries, so that their rows never become
Python objects: loading the 150,000 customers of TPC-H Q10 (SF 1) under 25 nation keys as row
entries of the row join cost ~1.6 s of its population, pickling tuples of Decimals.

Layout, in the join's ``<name>.hot`` column family beside the row arrangement's entries (whose
tags differ)::

    0x06 | len(key bytes) (4) | key bytes | side (0x01 left, 0x02 right) | row  ->  weight (i64)

where ``row`` is the row's ``row_block`` record with weight 0 (floats with one zero and one NaN)
followed by its text values: equal bytes exactly when the rows are equal under SQL equality (a
numeric is its unscaled integer at the column's scale, text is compared bytewise as in the C
collation), so a row is found by its name, a side's rows under a key are one prefix scan, and the
names are made column-wise (``row_block.pack_rows``). The join's own entry of such a key holds
``ROW_ENTRIES``.

``HotRows.read`` gives the committed rows of one side under some keys (the join reads a side where
the other side changed, then joins as for any key); ``stage`` adds delta rows to their entries
(their stored weights found by point reads; a row whose weight becomes 0 is deleted); ``load``
writes the rows of keys that just became hot (no entries yet).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar.row_block import RowCodec, Rows, pack_rows, unpack_rows
from engine.dataflow.state.arrangement import KEYS, LEFT, RIGHT
from engine.dataflow.state.store import StateTable

#: the columnar entry of a key whose rows are entries of their own here
ROW_ENTRIES = b"hot rows"
_TAG = b"\x06"
_SIDES = (LEFT, RIGHT)


def side_prefix(head: bytes, side: int) -> bytes:
    """The prefix of side ``side``'s row entries under the key whose join entry is ``head``
    (``KEYS | len | key bytes``)."""
    if not head.startswith(KEYS):
        raise ValueError("not a join key entry")
    return _TAG + head[len(KEYS) :] + _SIDES[side]


class HotRows:
    """The row entries of a columnar inner join's hot keys (``table``: its ``.hot`` family)."""

    def __init__(self, table: StateTable, codecs: tuple[RowCodec, RowCodec]) -> None:
        self._table = table
        self.codecs = codecs

    def read(self, heads: Sequence[bytes], side: int, kids: np.ndarray) -> tuple[Rows, np.ndarray]:
        """The committed rows of ``side`` under the keys ``kids`` (indices into ``heads``) and
        the key id of each, key after key."""
        names: list[bytes] = []
        weights: list[bytes] = []
        counts = np.zeros(len(kids), np.int64)
        for j, k in enumerate(kids.tolist()):
            prefix = side_prefix(heads[k], side)
            at = len(prefix)
            before = len(names)
            for name, weight in self._table.items_after(prefix, prefix):
                names.append(name[at:])
                weights.append(weight)
            counts[j] = len(names) - before
        rows = unpack_rows(self.codecs[side], names)
        rows.rec["w"] = np.frombuffer(b"".join(weights), "<i8")
        return rows, np.repeat(kids, counts)

    def stage(
        self,
        heads: Sequence[bytes],
        side: int,
        rows: Rows,
        kid: np.ndarray,
        fresh: bool = False,
    ) -> None:
        """Add ``rows`` (weights in their records) of ``side`` under the keys ``kid`` (indices
        into ``heads``) to their row entries. ``fresh``: the keys hold no rows yet (``load``)."""
        if not len(rows):
            return
        names = self._names(heads, side, rows, kid)
        ids, first = _groups(names, kid, rows.rec["h"])
        ng = len(first)
        weights = np.zeros(ng, np.int64)
        np.add.at(weights, ids, np.ascontiguousarray(rows.rec["w"]))
        keys = names.take(pa.array(first)).to_pylist()
        if fresh:
            old, have = [], np.zeros(ng, bool)
        else:
            old = self._table.get_many(keys)
            have = np.fromiter(map(operator.is_not, old, repeat(None)), bool, ng)
        if have.any():
            stored = [old[i] for i in np.flatnonzero(have).tolist()]
            weights[have] += np.frombuffer(b"".join(stored), "<i8")
        live = np.flatnonzero(weights).tolist()
        if live:
            values = weights.astype("<i8").view("V8").tolist()
            self._table.put_many([keys[i] for i in live], [values[i] for i in live])
        gone = np.flatnonzero((weights == 0) & have).tolist()
        if gone:
            self._table.delete_many([keys[i] for i in gone])

    def load(
        self, heads: Sequence[bytes], side: int, rows: Rows, kid: np.ndarray, weights: np.ndarray
    ) -> None:
        """Write ``rows`` with ``weights`` (after the time) of keys that just became hot."""
        self.stage(heads, side, Rows(_with_weights(rows.rec, weights), rows.strs), kid, fresh=True)

    def _names(self, heads: Sequence[bytes], side: int, rows: Rows, kid: np.ndarray) -> pa.Array:
        """Each row's entry name (large_binary): its key's side prefix and the row's values."""
        codec = self.codecs[side]
        rec = _with_weights(rows.rec, np.zeros(len(rows), np.int64))
        for i, kind in enumerate(codec.kinds):
            if kind == "f8":  # one zero and one NaN, as SQL equality has them
                v = rec[f"c{i}"]
                v[v == 0] = 0.0
                v[np.isnan(v)] = np.nan
        keys, at = np.unique(kid, return_inverse=True)
        prefixes = pa.array([side_prefix(heads[k], side) for k in keys.tolist()], pa.large_binary())
        return pc.binary_join_element_wise(
            prefixes.take(pa.array(at.ravel())),
            pack_rows(codec, Rows(rec, rows.strs)),
            pa.scalar(b"", pa.large_binary()),
        )


def _groups(names: pa.Array, kid: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``group_index([names])``, found by key id and row hash (two integer columns: ~20x faster
    than hashing the names) and checked by comparing the names where rows meet."""
    ids, first = K.group_index([pa.array(kid), pa.array(np.ascontiguousarray(h))])
    member = np.flatnonzero(first[ids] != np.arange(len(ids)))
    if len(member):
        rep = first[ids[member]]
        same = pc.equal(names.take(pa.array(member)), names.take(pa.array(rep)))
        if not pc.all(same).as_py():  # a hash collision: group by the names themselves
            return K.group_index([names])
    return ids, first


def _with_weights(rec: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """A copy of the records ``rec`` with the weights ``weights``."""
    out = rec.copy()
    out["w"] = weights
    return out
