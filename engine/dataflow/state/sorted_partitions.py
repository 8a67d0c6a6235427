"""Rows kept sorted per partition in a StateTable: the arrangement behind TopK and Window.

One entry per distinct row of a partition, in ORDER BY order::

    key   = u32 len(P) | P | S | E
            P = encode_key(partition values)   SQL equality, NULL = NULL
            S = encode_sortable(order values)  byte order = ORDER BY order (NULLS as asked)
            E = encode_key(row)                the row's identity; breaks ties deterministically
    value = pickle((row, count, len(S)))

The length before P makes partition prefixes prefix-free (partition ('a',) never scans into
('a', 'b')), S is prefix-free by construction, so one prefix scan yields a partition's rows in
order and its first n rows are a bounded scan; rows with equal S are peers. E is ``encode_key``
rather than ``encode_exact`` on purpose: ``DiffBatch`` consolidates Python-equal rows
(Decimal('1.5') == Decimal('1.50')), so a retraction may arrive in another representation than its
insert; keying the multiset by equality class keeps every count exact (the stored row is one
representative). A time's delta is applied by merging its sorted changes into the committed scan
(``merged``), never by writing first: reads see committed state, ``stage`` writes. This module must
not know what is computed over the rows and never emits output; rows are decoded from values only
(with ``engine.dataflow.nan.loads``: a NaN comes back as the shared NaN object).
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.nan import loads
from engine.dataflow.state.keycodec import encode_key, encode_sortable
from engine.dataflow.state.store import StateTable

#: (key, row, count, peer): ``peer`` is S, equal for rows that tie on every ORDER BY column
Entry = tuple[bytes, Row, int, bytes]

_loads = loads  # NaN values come back as the shared NaN objects (engine.dataflow.nan)
_dumps = pickle.dumps
_first = itemgetter(0)


def _tuple_getter(indices: Sequence[int]):
    """row -> tuple of ``row[i] for i in indices`` (itemgetter returns a bare value for one index)."""
    idx = tuple(indices)
    if not idx:
        return lambda row: ()
    if len(idx) == 1:
        (i,) = idx
        return lambda row: (row[i],)
    return itemgetter(*idx)


def order_description(
    order_by: Sequence[int], descending: Sequence[bool], nulls_first: Sequence[bool | None]
) -> str:
    """``[2 DESC, 0 ASC NULLS FIRST]``: NULLS shown only where it differs from Postgres' default."""
    parts = []
    for i, d, nf in zip(order_by, descending, nulls_first, strict=True):
        s = f"{i} {'DESC' if d else 'ASC'}"
        if nf is not None and bool(nf) != bool(d):
            s += " NULLS FIRST" if nf else " NULLS LAST"
        parts.append(s)
    return "[" + ", ".join(parts) + "]"


class SortedPartitions:
    """A multiset of rows per partition, ordered by ``order_by``, in one StateTable."""

    def __init__(
        self,
        table: StateTable,
        partition_key: Sequence[int],
        order_by: Sequence[int],
        descending: Sequence[bool],
        nulls_first: Sequence[bool | None] | None = None,
    ) -> None:
        if len(descending) != len(order_by):
            raise ValueError(
                f"order_by {list(order_by)} and descending {list(descending)} differ in length"
            )
        if nulls_first is not None and len(nulls_first) != len(order_by):
            raise ValueError(
                f"order_by {list(order_by)} and nulls_first {list(nulls_first)} differ in length"
            )
        self.table = table
        self._partition_of = _tuple_getter(partition_key)
        self._order_of = _tuple_getter(order_by)
        self._descending = [bool(d) for d in descending]
        self._nulls_first = list(nulls_first) if nulls_first is not None else None
        #: entries decoded from committed state since creation (observability and tests)
        self.entries_read = 0

    # -- keys -----------------------------------------------------------------------------------
    def partition_prefix(self, row: Row) -> bytes:
        """The scan prefix of ``row``'s partition: ``u32 len(P) | P``."""
        p = encode_key(self._partition_of(row))
        return len(p).to_bytes(4, "big") + p

    def sort_bytes(self, row: Row) -> bytes:
        return encode_sortable(self._order_of(row), self._descending, self._nulls_first)

    # -- reads ----------------------------------------------------------------------------------
    def changes(self, delta: DiffBatch) -> dict[bytes, list[Entry]]:
        """The consolidated ``delta`` as new entries, per partition prefix, each list in key order.

        Each change carries the row's *new* count (committed count + weight; 0 means the row
        leaves the partition). The committed counts are read with one ``get_many`` for the batch.
        """
        prefixes: list[bytes] = []
        sorts: list[bytes] = []
        keys: list[bytes] = []
        cache: dict[tuple, bytes] = {}
        partition_of, order_of = self._partition_of, self._order_of
        descending, nulls_first = self._descending, self._nulls_first
        for row in delta.rows:
            pv = partition_of(row)
            prefix = cache.get(pv)
            if prefix is None:
                p = encode_key(pv)
                prefix = cache[pv] = len(p).to_bytes(4, "big") + p
            s = encode_sortable(order_of(row), descending, nulls_first)
            prefixes.append(prefix)
            sorts.append(s)
            keys.append(prefix + s + encode_key(row))
        rows, weights = delta.rows, delta.weights
        if len(set(keys)) != len(keys):
            # SQL-equal rows that Python equality keeps apart (a NaN other than the shared one,
            # engine.dataflow.nan): one change per entry, its weights summed
            merged: dict[bytes, list] = {}
            for prefix, s, key, row, w in zip(prefixes, sorts, keys, rows, weights, strict=True):
                e = merged.get(key)
                if e is None:
                    merged[key] = [prefix, s, row, w]
                else:
                    e[3] += w
            keys = list(merged)
            prefixes, sorts, rows, weights = (list(c) for c in zip(*merged.values(), strict=True))
        olds = self.table.get_many(keys)
        out: dict[bytes, list[Entry]] = defaultdict(list)
        for prefix, s, key, row, w, old in zip(
            prefixes, sorts, keys, rows, weights, olds, strict=True
        ):
            if old is not None:
                old_row, old_count, _ = _loads(old)
                out[prefix].append((key, old_row, old_count + w, s))
            else:
                out[prefix].append((key, row, w, s))
        for entries in out.values():
            entries.sort(key=_first)
        return out

    def committed(self, prefix: bytes) -> Iterator[Entry]:
        """The committed rows of one partition in order (rows with count <= 0 left out)."""
        start = len(prefix)
        for k, v in self.table.scan_prefix(prefix):
            row, count, slen = _loads(v)
            self.entries_read += 1
            if count > 0:
                yield k, row, count, k[start : start + slen]

    @staticmethod
    def merged(committed: Iterable[Entry], changes: list[Entry]) -> Iterator[Entry]:
        """The partition after ``changes``: ``committed`` (in order) with the changed rows replaced."""
        changed = {c[0] for c in changes}
        live = [c for c in changes if c[2] > 0]
        i, n = 0, len(live)
        for e in committed:
            k = e[0]
            while i < n and live[i][0] < k:
                yield live[i]
                i += 1
            if k not in changed:
                yield e
        while i < n:
            yield live[i]
            i += 1

    # -- writes ---------------------------------------------------------------------------------
    def stage(self, changes: Iterable[Entry]) -> None:
        """Stage the new counts of ``changes`` (committed by the dataflow after the sink)."""
        put = self.table.put
        delete = self.table.delete
        for key, row, count, peer in changes:
            if count:
                put(key, _dumps((row, count, len(peer)), protocol=5))
            else:
                delete(key)


def order_spec(
    what: str,
    order_by: Sequence[int],
    descending: Sequence[bool],
    nulls_first: Sequence[bool | None] | None,
) -> tuple[tuple[int, ...], tuple[bool, ...], tuple[bool | None, ...]]:
    """Checked ORDER BY columns of a TopK/Window: (columns, descending, nulls_first per column)."""
    if len(descending) != len(order_by):
        raise ValueError(
            f"{what} order_by {list(order_by)} and descending {list(descending)} differ in length"
        )
    if nulls_first is not None and len(nulls_first) != len(order_by):
        raise ValueError(
            f"{what} order_by {list(order_by)} and nulls_first {list(nulls_first)} differ in length"
        )
    return (
        tuple(order_by),
        tuple(bool(d) for d in descending),
        tuple(nulls_first) if nulls_first is not None else (None,) * len(order_by),
    )
