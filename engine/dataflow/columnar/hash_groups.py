"""Grouping many-column rows by a 64-bit row hash, verified by value (``kernels.group_index``'s
fast path for wide rows).

``kernels.exact_group_index`` dictionary-encodes every column (one hash table per column) and
combines the codes; for a wide row (the output of a join: ten columns and more) that is most of
a columnar time's consolidation. ``hash_group_index`` instead turns every column into exact
uint64 words (fixed-width values as they are, floats normalized so NaN = NaN and -0.0 = 0.0,
NULL as 0 plus a validity word; text by its dictionary code), folds each row's words into one
64-bit hash, numbers the distinct hashes with one Arrow hash table in first-appearance order, and
then checks that every row's words equal its group's first row's. A collision (or a column type
without exact words) returns None and the caller takes the exact path. Same contract as
``group_index``: a group id per row, numbered by first appearance, and each group's first row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar import kernels as K

_P = np.uint64(0x100000001B3)


def _words(column: pa.Array) -> list[np.ndarray] | None:
    """The column's values as exact uint64 words (equal words <=> equal under GROUP BY), or None
    for a type handled only by the exact path."""
    t = column.type
    if isinstance(t, pa.ExtensionType):
        column, t = column.storage, column.storage.type
    valid = [np.asarray(column.is_valid(), dtype=np.uint64)] if column.null_count else []
    if pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t):
        if t.bit_width == 64:
            v = column.view(pa.int64())
        else:
            v = (column.view(pa.int32()) if pa.types.is_date32(t) else column).cast(pa.int64())
        return [np.asarray(pc.fill_null(v, 0), dtype=np.int64).view(np.uint64), *valid]
    if pa.types.is_floating(t):
        v = pc.fill_null(K.normalize_floats(column), 0.0)
        return [np.asarray(v, dtype=np.float64).view(np.uint64), *valid]
    if pa.types.is_boolean(t):
        return [np.asarray(pc.fill_null(column, False), dtype=bool).astype(np.uint64), *valid]
    if pa.types.is_decimal(t) and t.bit_width == 128:
        buf = column.buffers()[1]
        words = np.frombuffer(buf, np.uint64, 2 * len(column), 16 * column.offset).reshape(-1, 2)
        if valid:
            words = words * valid[0][:, None]  # NULL slots may hold anything
        return [words[:, 0], words[:, 1], *valid]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        codes = pc.dictionary_encode(column, null_encoding="encode").indices
        return [np.asarray(codes, dtype=np.int64).view(np.uint64)]
    return None


def hash_group_index(columns: list[pa.Array]) -> tuple[np.ndarray, np.ndarray] | None:
    """(group id of each row, first row of each group) as ``group_index`` gives them, or None."""
    words: list[np.ndarray] = []
    for column in columns:
        w = _words(column)
        if w is None:
            return None
        words.extend(w)
    h = words[0].copy()
    for w in words[1:]:
        h *= _P
        h += w
    ids, first = K.first_appearance_groups(pa.array(K.mix64(h)))
    members = np.flatnonzero(first[ids] != np.arange(len(ids)))
    if len(members):
        reps = first[ids[members]]
        if any(not np.array_equal(w[members], w[reps]) for w in words):
            return None  # two different rows share a hash: the exact path decides
    return ids, first
