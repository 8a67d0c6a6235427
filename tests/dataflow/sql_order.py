"""Reference ORDER BY for the ordered-collection tests: plain Python sorting, Postgres NULL rules.

Ties: SQL leaves the order of rows with equal sort keys unspecified (which of them LIMIT keeps,
which row_number each gets, what lag/lead see among peers). The collections break them by the
row's ``encode_key`` bytes and ``sorted_partitions`` breaks them the same way, so the tests may
freely repeat sort keys and whole rows.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cmp_to_key

from engine.dataflow.state.keycodec import encode_key


def order_cmp(order_by, descending, nulls_first=None):
    """Compare rows on the ORDER BY columns only, NULLs placed as Postgres does."""
    nfs = nulls_first or [None] * len(order_by)

    def cmp(a, b):
        for i, d, nf in zip(order_by, descending, nfs, strict=True):
            x, y = a[i], b[i]
            if x is None and y is None:
                continue
            first = d if nf is None else nf  # Postgres: NULLS FIRST for DESC, LAST for ASC
            if x is None:
                return -1 if first else 1
            if y is None:
                return 1 if first else -1
            if x != y:
                c = -1 if x < y else 1
                return -c if d else c
        return 0

    return cmp


def sorted_partitions(rows, partition_key, order_by, descending, nulls_first=None):
    """(partitions, cmp): rows grouped by partition (NULL = NULL), each list sorted."""
    cmp = order_cmp(order_by, descending, nulls_first)
    parts = defaultdict(list)
    for r in rows:
        parts[tuple(r[i] for i in partition_key)].append(r)
    for rs in parts.values():
        rs.sort(key=encode_key)  # the tie-break; the stable sort below keeps it among peers
        rs.sort(key=cmp_to_key(cmp))
    return list(parts.values()), cmp
