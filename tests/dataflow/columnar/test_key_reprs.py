"""encoded_keys gives, column-wise, exactly the bytes encode_key gives each row."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from engine.dataflow.columnar.codec_columns import python_rows
from engine.dataflow.columnar.key_reprs import encoded_keys
from engine.dataflow.state.keycodec import encode_key

TEXTS = [
    "",
    "plain text",
    "it's",
    'say "hi"',
    "both ' and \"",
    "back\\slash",
    "tab\there",
    "new\nline",
    "nul\x00byte",
    "caf\u00e9",
    "\u4e2d\u6587",
    "\u200b zero width",
    "emoji \U0001f600",
    "del\x7f",
    "~!@#$%^&*()_+`-=[]{}|;:,.<>/?",
]


def _decimal(rng: random.Random, precision: int, scale: int) -> Decimal:
    digits = rng.choice([0, 1, 2, precision])
    unscaled = rng.randrange(10**digits) if digits else 0
    if rng.random() < 0.3:
        unscaled -= unscaled % (10 ** min(scale, digits))  # whole or trailing zeros
    sign = -1 if rng.random() < 0.4 else 1
    return Decimal(sign * unscaled).scaleb(-scale)


def _column(rng: random.Random, kind: str, n: int) -> tuple[pa.Array, np.ndarray | None]:
    nulls = [rng.random() < 0.15 for _ in range(n)]
    nan = None
    if kind == "int":
        values = [rng.choice([0, -1, 7, 2**62, -(2**63), rng.randrange(-999, 999)]) for _ in nulls]
        typ = pa.int64()
    elif kind == "int32":
        values = [rng.randrange(-(2**31), 2**31) for _ in nulls]
        typ = pa.int32()
    elif kind == "bool":
        values = [rng.random() < 0.5 for _ in nulls]
        typ = pa.bool_()
    elif kind == "date":
        values = [dt.date.fromordinal(rng.randrange(1, 3_652_059)) for _ in nulls]
        typ = pa.date32()
    elif kind == "text":
        values = [rng.choice(TEXTS) for _ in nulls]
        typ = pa.string()
    elif kind == "float":
        choices = [0.0, -0.0, 1.5, 3.0, 1e20, 1e-5, float("inf"), float("nan"), 0.1]
        values = [rng.choice(choices) for _ in nulls]
        typ = pa.float64()
    elif kind == "timestamp":
        values = [
            dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rng.randrange(10**15))
            for _ in nulls
        ]
        typ = pa.timestamp("us")
    else:  # "decimal(p,s)"
        precision, scale = (int(x) for x in kind[8:-1].split(","))
        values = [_decimal(rng, precision, scale) for _ in nulls]
        typ = pa.decimal128(precision, scale)
        nan = np.array([rng.random() < 0.1 and not z for z in nulls])
        nulls = [z or bool(m) for z, m in zip(nulls, nan, strict=True)]
    array = pa.array([None if z else v for v, z in zip(values, nulls, strict=True)], typ)
    return array, nan


KINDS = [
    "int",
    "int32",
    "bool",
    "date",
    "text",
    "float",
    "timestamp",
    "decimal(15,2)",
    "decimal(12,0)",
    "decimal(28,6)",
    "decimal(10,8)",
    "decimal(38,4)",
]


@pytest.mark.parametrize("seed", range(12))
def test_encoded_keys_equal_encode_key_of_each_row(seed):
    rng = random.Random(seed)
    n = rng.choice([1, 5, 300])
    kinds = [rng.choice(KINDS) for _ in range(rng.choice([1, 2, 4, 7]))]
    columns, nans = [], {}
    for i, kind in enumerate(kinds):
        array, nan = _column(rng, kind, n)
        columns.append(array)
        if nan is not None:
            nans[i] = nan
    expected = [encode_key(row) for row in python_rows(columns, dict(nans))]
    assert encoded_keys(columns, nans) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_each_type_alone(kind):
    rng = random.Random(kind)
    array, nan = _column(rng, kind, 400)
    nans = {} if nan is None else {0: nan}
    assert encoded_keys([array], nans) == [encode_key(r) for r in python_rows([array], dict(nans))]


def test_the_spellings_a_decimal_normalizes_from():
    values = ["0.00", "-0.00", "1.50", "-1.50", "2.00", "-2.00", "0.05", "-0.10", "100.00", "10.10"]
    array = pa.array([Decimal(v) for v in values], pa.decimal128(12, 2))
    assert encoded_keys([array], {}) == [
        b"(0,)", b"(0,)", b"(Decimal('1.5'),)", b"(Decimal('-1.5'),)", b"(2,)", b"(-2,)",
        b"(Decimal('0.05'),)", b"(Decimal('-0.1'),)", b"(100,)", b"(Decimal('10.1'),)",
    ]  # fmt: skip
