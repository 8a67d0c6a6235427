"""The columnar kernels, each against a row-at-a-time reference on random columns."""

from __future__ import annotations

import datetime
import math
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from engine.dataflow.columnar import kernels as K
from engine.dataflow.columnar.arrow_types import (
    ColumnConversionError,
    to_arrow_column,
    to_python,
    unscaled_int64,
)
from engine.dataflow.state.keycodec import encode_key

FLOATS = [0.0, -0.0, 1.5, float("nan"), -float("nan"), float("inf"), None]
TEXTS = ["", "a", "ab", "a\x00", "é", None]
INTS = [0, 1, -1, 2**40, -(2**62), None]
DECIMALS = [Decimal("1.50"), Decimal("-2.25"), Decimal("0.00"), Decimal("99999.99"), None]
DATES = [datetime.date(2024, 1, 1), datetime.date(1999, 12, 31), datetime.date(1970, 1, 1), None]
STAMPS = [datetime.datetime(2024, 1, 1, 12, 0), datetime.datetime(1960, 5, 1), None]


def _random_columns(rng: random.Random, n: int) -> tuple[list[list], list[pa.Array]]:
    pools = [
        (FLOATS, pa.float64()),
        (TEXTS, pa.string()),
        (INTS, pa.int64()),
        (DECIMALS, pa.decimal128(10, 2)),
        ([True, False, None], pa.bool_()),
        (DATES, pa.date32()),
        (STAMPS, pa.timestamp("us")),
    ]
    chosen = rng.sample(pools, rng.randint(1, len(pools)))
    values = [[rng.choice(pool) for _ in range(n)] for pool, _ in chosen]
    arrays = [to_arrow_column(v, t) for v, (_, t) in zip(values, chosen, strict=True)]
    return values, arrays


def _sql_key(row: tuple) -> bytes:
    """The reference: keycodec's SQL-equality encoding (NaN = NaN, -0.0 = 0.0, NULL = NULL)."""
    return encode_key(tuple(None if v is None else v for v in row))


@pytest.mark.parametrize("seed", range(30))
def test_group_index_and_key_bytes_agree_with_sql_equality(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 60)
    values, arrays = _random_columns(rng, n)
    rows = list(zip(*values, strict=True)) if n else []
    ids, first = K.group_index(arrays, n)
    ref_ids: dict[bytes, int] = {}
    expected = [ref_ids.setdefault(_sql_key(r), len(ref_ids)) for r in rows]
    assert ids.tolist() == expected
    assert first.tolist() == [expected.index(g) for g in range(len(ref_ids))]
    keys = K.key_bytes(arrays) if n else []
    by_key: dict[bytes, int] = {}
    assert [by_key.setdefault(k, len(by_key)) for k in keys] == expected


def test_key_bytes_are_prefix_free_across_columns():
    a = K.key_bytes([pa.array(["ab", "a"]), pa.array(["c", "bc"])])
    assert a[0] != a[1]


@pytest.mark.parametrize("seed", range(10))
def test_int128_sums_are_exact(seed):
    rng = random.Random(seed)
    n = 50
    start = [rng.randint(-(2**100), 2**100) for _ in range(n)]
    lo, hi = K.ints_to_int128(start)
    deltas = [rng.randint(-(2**63), 2**63 - 1) for _ in range(n)]
    lo2, hi2 = K.add_int128(lo, hi, np.array(deltas, dtype=np.int64))
    assert K.int128_to_ints(lo2, hi2) == [a + b for a, b in zip(start, deltas, strict=True)]
    big = [rng.randint(-(2**90), 2**90) for _ in range(n)]
    lo3, hi3 = K.add_int128_ints(lo2, hi2, big)
    assert K.int128_to_ints(lo3, hi3) == [
        a + b + c for a, b, c in zip(start, deltas, big, strict=True)
    ]


def test_group_sums_refuse_what_could_overflow():
    ids = np.zeros(3, dtype=np.int64)
    assert K.group_sums(ids, 1, np.array([1, 2, -5])).tolist() == [-2]
    with pytest.raises(OverflowError):
        K.group_sums(ids, 1, np.array([2**62, 2**62, 1]))
    assert K.group_sums_exact(ids, 1, [2**62, 2**62, 1]) == [2**63 + 1]


def test_decimal_columns_keep_scale_and_refuse_data_loss():
    col = to_arrow_column([Decimal("1.5"), None, Decimal("-0.25")], pa.decimal128(10, 2))
    assert to_python(col) == [Decimal("1.50"), None, Decimal("-0.25")]
    assert [str(v) for v in to_python(col) if v is not None] == ["1.50", "-0.25"]
    assert unscaled_int64(col).tolist() == [150, 0, -25]
    with pytest.raises(ColumnConversionError):
        to_arrow_column([Decimal("1.505")], pa.decimal128(10, 2))
    with pytest.raises(ColumnConversionError):
        to_arrow_column([Decimal("NaN")], pa.decimal128(10, 2))


def test_float_columns_come_back_with_the_shared_nan():
    from engine.dataflow.nan import NAN

    out = to_python(pa.array([1.0, float("nan")]))
    assert out[0] == 1.0 and out[1] is NAN and math.isnan(out[1])


def test_length_prefixed_entries_are_the_arrangement_key_entries():
    import datetime as dt

    from engine.dataflow.state.arrangement import KEYS, key_entry

    cols = [
        pa.array([1, None, -5, 1], pa.int64()),
        pa.array(["a", "", None, "é" * 300]),
        pa.array([dt.date(2020, 1, 1)] * 4),
    ]
    got = K.length_prefixed(KEYS, K.key_bytes_array(cols)).to_pylist()
    assert got == [key_entry(kb) for kb in K.key_bytes(cols)]
    one = [pa.array([3, 4], pa.int64())]
    assert K.length_prefixed(KEYS, K.key_bytes_array(one)).to_pylist() == [
        key_entry(kb) for kb in K.key_bytes(one)
    ]


def _wide_columns(rng: random.Random, n: int) -> list[pa.Array]:
    def col(values, typ):
        return pa.array([rng.choice(values) for _ in range(n)], typ)

    nan = float("nan")
    return [
        col([1, 2, None, -(2**63)], pa.int64()),
        col([0.0, -0.0, nan, None, 1.5], pa.float64()),
        col([Decimal("1.50"), Decimal("-0.25"), None], pa.decimal128(12, 2)),
        col(["a", "", None, "é"], pa.string()),
        col([datetime.date(2020, 2, 29), None], pa.date32()),
        col([datetime.datetime(2020, 1, 1, 0, 0, 0, 5), None], pa.timestamp("us")),
        col([True, False, None], pa.bool_()),
        col([7, None], pa.int32()),
    ]


@pytest.mark.parametrize("seed", range(4))
def test_hashed_group_index_equals_the_exact_one(seed, monkeypatch):
    """Wide rows go through the verified row hash; with NULLs, NaN/-0.0, numerics, text and
    dates it numbers groups exactly as the dictionary-code path, and a hash that collides for
    every row falls back to the exact path with the same answer."""
    rng = random.Random(seed)
    cols = _wide_columns(rng, 500)
    ids, first = K.group_index(cols)
    want_ids, want_first = K.exact_group_index(cols)
    assert ids.tolist() == want_ids.tolist() and first.tolist() == want_first.tolist()
    keys = [tuple(encode_key([c[i].as_py()]) for c in cols) for i in range(500)]
    assert len(set(keys)) == len(first)  # SQL equality: as many groups as distinct keys
    from engine.dataflow.columnar import hash_groups

    assert hash_groups.hash_group_index(cols) is not None
    monkeypatch.setattr(K, "mix64", lambda h: h * np.uint64(0))
    assert hash_groups.hash_group_index(cols) is None  # every row "collides"
    ids2, first2 = K.group_index(cols)
    assert ids2.tolist() == want_ids.tolist() and first2.tolist() == want_first.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_integer_runs_are_numbered_as_the_dictionary_numbers_them(seed):
    """An integer, date or timestamp column of a few ascending runs (a table read in key order
    by several readers) gets the codes and count of ``dictionary_encode`` by sorting: keys
    repeated across runs, one run, and columns that are not mostly ascending (hashed)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2_000, 6_000))
    values = np.sort(rng.integers(0, [5, 300, 10**7][seed % 3], n))
    runs = np.array_split(values, int(rng.integers(1, 30)))
    rng.shuffle(runs)
    storage, typ = [
        (np.int64, pa.int64()),
        (np.int32, pa.int32()),
        (np.int32, pa.date32()),
        (np.int64, pa.timestamp("us")),
        (np.int16, pa.int16()),
        (np.int64, pa.int64()),
    ][seed]
    columns = {
        "runs": pa.array(np.concatenate(runs).astype(storage)).view(typ),
        "random": pa.array(rng.permutation(values)),
    }
    for kind, column in columns.items():
        encoded = pa.compute.dictionary_encode(column)
        want = np.asarray(encoded.indices).tolist(), len(encoded.dictionary)
        codes, count = K._codes(column)
        assert (codes.tolist(), count) == want
        by_runs = K._sorted_run_codes(column)
        if kind == "runs":
            assert by_runs is not None and (by_runs[0].tolist(), by_runs[1]) == want
        elif seed % 3:  # shuffled distinct-enough values descend far too often
            assert by_runs is None
    with_null = pa.array([1, 1, None] * 500)
    assert K._sorted_run_codes(with_null) is None
    assert K._codes(with_null)[1] == 2
    intervals = pa.array([pa.MonthDayNano([1, 2, 3])] * 1500)  # 128 bits: hashed
    assert K._sorted_run_codes(intervals) is None and K._codes(intervals)[1] == 1


@pytest.mark.parametrize("seed", range(3))
def test_string_hashes_in_blocks_equal_one_pass(seed, monkeypatch):
    """Hashing a long string column a block of rows at a time (bounded temporaries) gives the
    very hashes of one pass over all its bytes: strings shorter and longer than a block, empty
    strings, and a column sliced (offsets not starting at 0)."""
    rng = random.Random(seed)
    texts = [
        "".join(rng.choice("abcé\x00") for _ in range(rng.choice([0, 1, 5, 40, 300])))
        for _ in range(3000)
    ]
    arr = pa.array(texts, pa.large_string()).slice(7)
    offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8)
    whole = K.string_hashes(data, offsets)
    monkeypatch.setattr(K, "_HASH_BLOCK_BYTES", 100)  # many blocks, some strings longer
    blocked = K.string_hashes(data, offsets)
    assert blocked.tolist() == whole.tolist()
    assert len(set(whole.tolist())) == len(set(texts[7:]))  # distinct strings, distinct hashes


@pytest.mark.parametrize("bound", [1, 3, 1 << 16, (1 << 16) + 1, 1 << 20, 1 << 32, 1 << 40])
def test_stable_order_sorts_stably_at_every_width(bound):
    """Radix passes of 16 bits (one below 2**16, two below 2**32), the wide fallback past them:
    the same order as a stable comparison sort, equal ids keeping their positions."""
    rng = np.random.default_rng(bound)
    for n in (0, 1, 2, 1000):
        ids = rng.integers(0, bound, n, dtype=np.int64)
        if n:  # the extremes, and runs of equal ids
            ids[: min(n, 4)] = [0, bound - 1, 0, bound - 1][: min(n, 4)]
        order = K.stable_order(ids, bound)
        assert order.tolist() == sorted(range(n), key=lambda i: (int(ids[i]), i))
