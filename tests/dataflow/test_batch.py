"""Z-set batch algebra and Arrow round trips."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from engine.dataflow.batch import DiffBatch


def test_consolidate_sums_weights_and_drops_zeros():
    b = DiffBatch([(1, "a"), (2, None), (1, "a"), (2, None), (3, "c")], [1, 1, 2, -1, -1])
    assert b.consolidate().counts() == {(1, "a"): 3, (3, "c"): -1}
    assert sorted(b.consolidate().rows) == [(1, "a"), (3, "c")]


def test_consolidate_treats_sql_equal_values_as_one_row():
    b = DiffBatch([(Decimal("1.0"),), (Decimal("1.00"),), (None,), (None,)], [1, -1, 1, -1])
    assert not b.consolidate()


def test_negate_and_concat_cancel():
    b = DiffBatch.inserts([(1,), (2,), (2,)])
    assert not DiffBatch.concat([b, b.negate()]).consolidate()


def test_filter_mask_keeps_only_true():
    b = DiffBatch.inserts([(1,), (2,), (3,)])
    assert b.filter_mask([True, None, False]).rows == [(1,)]


def test_expand_refuses_negative_multiplicity():
    assert sorted(DiffBatch([(1,), (2,)], [2, 1]).expand()) == [(1,), (1,), (2,)]
    with pytest.raises(ValueError, match="negative multiplicity"):
        DiffBatch([(1,)], [-1]).expand()


def test_arrow_round_trip_keeps_rows_and_weights():
    b = DiffBatch([(1, "x", None), (2, None, 1.5)], [1, -3])
    table = b.to_arrow(["a", "b", "c"])
    assert table.schema.names == ["a", "b", "c", "__weight"]
    assert table.column("__weight").type == pa.int64()
    back = DiffBatch.from_arrow(table)
    assert back.rows == b.rows and back.weights == b.weights


def test_from_arrow_without_weight_column_names_the_problem():
    with pytest.raises(ValueError, match="no weight column"):
        DiffBatch.from_arrow(pa.table({"a": [1]}))


def test_extend_a_columnar_batch_leaves_no_stale_columns():
    import numpy as np

    b = DiffBatch.from_columns([pa.array([1, 2])], np.array([1, -1], dtype=np.int64))
    b.extend(DiffBatch([(3,)], [1]))
    assert b.columns is None
    assert list(b) == [((1,), 1), ((2,), -1), ((3,), 1)]


def test_a_pickled_slice_carries_only_its_own_values():
    import pickle

    import numpy as np

    big = pa.array(np.arange(1_000_000))
    b = DiffBatch.from_columns([big.slice(10, 3)], np.ones(3, dtype=np.int64))
    raw = pickle.dumps(b)
    assert len(raw) < 2_000  # not the parent's 8 MB
    back = pickle.loads(raw)
    assert back.rows == [(10,), (11,), (12,)] and back.weights == [1, 1, 1]
    assert back.columns is not None
