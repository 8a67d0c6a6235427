"""The columnar top-k's key kernels against the row path's ``keycodec`` (the reference).

``identity_bytes`` must equal ``encode_key(row)`` byte for byte (ties among peers break alike),
``sortable_bytes`` must order rows as ``encode_sortable`` does and call the same rows peers, and
``partition_bytes`` must put together exactly the rows ``encode_key`` of the partition values does.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.columnar.codec_columns import codec_columns
from engine.dataflow.columnar.sort_keys import identity_bytes, partition_bytes, sortable_bytes
from engine.dataflow.nan import NAN, NUMERIC_NAN
from engine.dataflow.state.keycodec import encode_key, encode_sortable

COLUMNS = {
    "int": (pa.int64(), [0, 1, -1, 7, 10, -10, 2**62, -(2**63), 123456789]),
    "num2": (
        pa.decimal128(12, 2),
        [Decimal(x) for x in ["0.00", "1.50", "-0.50", "10.00", "100.05", "-7.25", "0.01"]]
        + [NUMERIC_NAN],
    ),
    "num8": (
        pa.decimal128(20, 8),
        [Decimal(x) for x in ["0.00000010", "0.00000100", "-0.00000005", "12.34500000"]]
        + [Decimal("1.00000000"), NUMERIC_NAN],
    ),
    "num38": (
        pa.decimal128(38, 2),
        [Decimal("123456789012345678901234567890.12"), Decimal("-99999999999999999999.99")]
        + [Decimal("5.00"), Decimal("0.10")],
    ),
    "float": (
        pa.float64(),
        [0.0, -0.0, NAN, math.inf, -math.inf, 1.5, -2.25, 3.0, 1e16, 1e-5, 1e300, 0.1, -1e-300],
    ),
    "date": (
        pa.date32(),
        [dt.date(2024, 1, 5), dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1969, 12, 31)],
    ),
    "ts": (
        pa.timestamp("us"),
        [
            dt.datetime(2024, 1, 5),
            dt.datetime(2024, 1, 5, 10, 30),
            dt.datetime(2024, 1, 5, 10, 30, 5),
            dt.datetime(2024, 1, 5, 0, 0, 0, 7),
            dt.datetime(1960, 3, 1, 23, 59, 59, 999999),
            dt.datetime(1, 1, 1, 0, 0, 1),
        ],
    ),
    "text": (
        pa.string(),
        ["", "a", "ab", "b", "it's", 'say "hi"', "both ' \"", "back\\slash", "é", "日本"]
        + ["tab\t", "nul\x00x", "nul", "\x7f", "z" * 40, "Ä"],
    ),
    "bool": (pa.bool_(), [True, False]),
}


def _rows(rng, names, n, null_ratio=0.15):
    rows = []
    for _ in range(n):
        rows.append(
            tuple(None if rng.random() < null_ratio else rng.choice(COLUMNS[c][1]) for c in names)
        )
    return rows


def _arrow(rows, names):
    types = [COLUMNS[c][0] for c in names]
    return codec_columns(DiffBatch(rows, [1] * len(rows)), types)


@pytest.mark.parametrize("name", list(COLUMNS))
def test_identity_bytes_equal_encode_key(name):
    rng = random.Random(hash(name) % 1000)
    names = [name, "int"] if name != "int" else ["int"]
    rows = _rows(rng, names, 300)
    cols, nans = _arrow(rows, names)
    got = identity_bytes(cols, nans).to_pylist()
    assert got == [encode_key(r) for r in rows]


def test_identity_bytes_of_wide_rows():
    rng = random.Random(3)
    names = list(COLUMNS)
    rows = _rows(rng, names, 500)
    cols, nans = _arrow(rows, names)
    assert identity_bytes(cols, nans).to_pylist() == [encode_key(r) for r in rows]


def _sign(x):
    return (x > 0) - (x < 0)


@pytest.mark.parametrize("name", list(COLUMNS))
@pytest.mark.parametrize(
    ("desc", "nulls_first"), [(False, None), (True, None), (False, True), (True, False)]
)
def test_sortable_bytes_order_as_encode_sortable(name, desc, nulls_first):
    rng = random.Random(7)
    names = [name, "int"]
    rows = _rows(rng, names, 200, null_ratio=0.2)
    cols, nans = _arrow(rows, names)
    descending, nf = [desc, False], [nulls_first, None]
    got = sortable_bytes(cols, nans, descending, nf).to_pylist()
    want = [encode_sortable(r, descending, nf) for r in rows]
    for i in range(len(rows)):
        for j in range(0, len(rows), 7):
            a = _sign((got[i] > got[j]) - (got[i] < got[j]))
            b = _sign((want[i] > want[j]) - (want[i] < want[j]))
            assert a == b, (rows[i], rows[j])


def test_sortable_bytes_sort_many_columns_like_encode_sortable():
    rng = random.Random(11)
    names = ["text", "num2", "float", "ts", "bool", "date"]
    descending = [True, False, True, False, True, False]
    nf = [None, True, False, None, True, None]
    rows = _rows(rng, names, 800, null_ratio=0.25)
    cols, nans = _arrow(rows, names)
    got = sortable_bytes(cols, nans, descending, nf).to_pylist()
    want = [encode_sortable(r, descending, nf) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: (got[i], i))
    assert [want[i] for i in order] == sorted(want)
    peers = {}
    for g, w in zip(got, want, strict=True):
        assert peers.setdefault(g, w) == w  # equal bytes only for peers


@pytest.mark.parametrize(
    "names", [["int"], ["text", "num2"], ["float", "bool", "date"], ["num38", "ts"], []]
)
def test_partition_bytes_group_as_encode_key(names):
    rng = random.Random(5)
    rows = _rows(rng, names, 300) if names else [()] * 20
    cols, nans = _arrow(rows, names) if names else ([], [])
    got = partition_bytes(cols, nans, len(rows)).to_pylist()
    want = [encode_key(r) for r in rows]
    by_got, by_want = {}, {}
    for g, w in zip(got, want, strict=True):
        assert by_got.setdefault(g, w) == w
        assert by_want.setdefault(w, g) == g
    assert all(int.from_bytes(g[:4], "big") == len(g) - 4 for g in got)


def test_float_peers_and_nan_order():
    rows = [(-0.0,), (0.0,), (NAN,), (float("nan"),), (math.inf,), (None,)]
    cols, nans = _arrow(rows, ["float"])
    got = sortable_bytes(cols, nans, [False], [None]).to_pylist()
    assert got[0] == got[1] and got[2] == got[3]
    assert got[4] < got[2] < got[5]


@pytest.mark.parametrize("seed", range(4))
def test_identity_of_the_other_columns_orders_peers_as_encode_key(seed):
    """Among rows with equal partition and ORDER BY values, the identity bytes of the remaining
    columns order them as ``encode_key`` of the whole rows (the row TopK's tie order)."""
    rng = random.Random(seed)
    names = list(COLUMNS)
    rows = _rows(rng, names, 3000, null_ratio=0.2)
    keyed = rng.sample(range(len(names)), rng.randint(1, 2))  # partition and ORDER BY columns
    rest = [i for i in range(len(names)) if i not in keyed]
    cols, nans = _arrow(rows, names)
    got = identity_bytes([cols[i] for i in rest], [nans[i] for i in rest], len(rows)).to_pylist()
    peers: dict = {}
    for r, g in zip(rows, got, strict=True):
        peer = encode_key(tuple(r[i] for i in keyed))
        peers.setdefault(peer, []).append((encode_key(r), g))
    compared = 0
    for members in peers.values():
        by_row = [g for _, g in sorted(members)]
        assert by_row == sorted(by_row)
        assert len({g for _, g in members}) == len({k for k, _ in members})  # same identities
        compared += len(members) if len(members) > 1 else 0
    assert compared > 1000
