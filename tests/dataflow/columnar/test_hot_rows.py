"""The row entries of the columnar inner join's hot keys (``columnar.hot_rows``), on RocksDB."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from engine.dataflow.columnar import hot_rows as H
from engine.dataflow.columnar.row_block import RowCodec
from engine.dataflow.state.arrangement import KEYS
from engine.dataflow.state.store import StateStore

TYPES = [pa.int64(), pa.float64(), pa.string(), pa.decimal128(12, 2)]
HEADS = [KEYS + b"\x00\x00\x00\x01" + b"a", KEYS + b"\x00\x00\x00\x01" + b"b"]


def _rows(codec: RowCodec, rows: list[tuple], weights: list[int]):
    cols = [pa.array([r[i] for r in rows], t) for i, t in enumerate(TYPES)]
    return codec.encode(cols, [None] * len(TYPES), np.asarray(weights, np.int64))


def _read(hot: H.HotRows, codec: RowCodec, side: int, kids: list[int]) -> Counter:
    rows, kid = hot.read(HEADS, side, np.asarray(kids, np.int64))
    cols, _ = codec.arrays(rows)
    values = [c.to_pylist() for c in cols]
    out = Counter()
    for j, (k, w) in enumerate(zip(kid.tolist(), rows.rec["w"].tolist(), strict=True)):
        row = tuple(v[j] for v in values)
        out[(k, tuple("nan" if isinstance(x, float) and math.isnan(x) else x for x in row))] += w
    return out


def test_rows_are_found_by_their_values_under_sql_equality(tmp_path):
    """-0.0 = 0.0 and NaN = NaN find one entry; NULL text and '' stay apart; weights add up,
    an entry whose weight reaches 0 is gone; the two sides and two keys never mix."""
    codec = RowCodec(TYPES)
    with StateStore(tmp_path / "s") as store:
        hot = H.HotRows(store.table("j.hot"), (codec, codec))
        first = [(1, 0.0, "x", 1), (1, float("nan"), None, 2), (1, 1.5, "", 3), (2, 2.0, "y", 4)]
        hot.load(HEADS, 0, _rows(codec, first, [1, 1, 1, 1]), np.array([0, 0, 0, 1]),
                 np.array([1, 2, 1, 1]))  # fmt: skip
        hot.stage(HEADS, 1, _rows(codec, [(9, 9.0, "r", 9)], [1]), np.array([0]))
        store.commit(1)
        assert _read(hot, codec, 0, [0, 1]) == Counter({
            (0, (1, 0.0, "x", 1)): 1, (0, (1, "nan", None, 2)): 2, (0, (1, 1.5, "", 3)): 1,
            (1, (2, 2.0, "y", 4)): 1,
        })  # fmt: skip
        change = [
            (1, -0.0, "x", 1),
            (1, float("nan"), None, 2),
            (1, 1.5, None, 3),
            (2, 2.0, "y", 4),
        ]
        hot.stage(HEADS, 0, _rows(codec, change, [2, -2, 1, -1]), np.array([0, 0, 0, 1]))
        store.commit(2)
        assert _read(hot, codec, 0, [0, 1]) == Counter({
            (0, (1, 0.0, "x", 1)): 3, (0, (1, 1.5, "", 3)): 1, (0, (1, 1.5, None, 3)): 1,
        })  # fmt: skip
        assert _read(hot, codec, 1, [0, 1]) == Counter({(0, (9, 9.0, "r", 9)): 1})
        names = [k for k, _ in store.table("j.hot").scan_all()]
        assert len(names) == 4  # the emptied entries were deleted


def test_a_hash_collision_groups_by_the_names(monkeypatch):
    names = pa.array([b"p1", b"p2", b"p1", b"p3"], pa.large_binary())
    kid = np.zeros(4, np.int64)
    h = np.zeros(4, np.uint64)  # every row collides
    ids, first = H._groups(names, kid, h)
    assert ids.tolist() == [0, 1, 0, 2] and first.tolist() == [0, 1, 3]
    ids, first = H._groups(names.take(pa.array([0, 2])), kid[:2], h[:2])
    assert ids.tolist() == [0, 0] and first.tolist() == [0]


def test_side_prefix_needs_a_join_key_entry():
    assert H.side_prefix(HEADS[0], 1).startswith(b"\x06\x00\x00\x00\x01a")
    with pytest.raises(ValueError, match="not a join key entry"):
        H.side_prefix(b"\x01abc", 0)


def test_markers_are_shorter_than_any_packed_entry():
    """The join tells a hot key's marker from a packed entry by its length."""
    from engine.dataflow.columnar.hot_join_keys import HOT
    from engine.dataflow.columnar.row_block import ENTRY_HEADER

    assert len(H.ROW_ENTRIES) < ENTRY_HEADER and len(HOT) < ENTRY_HEADER
