"""Properties of the state key encodings: determinism, SQL equality, memcomparable order."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from functools import cmp_to_key

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.dataflow.state.keycodec import (
    encode_exact,
    encode_key,
    encode_sortable,
    encode_sortable_value,
)

ints = st.integers(min_value=-(2**62), max_value=2**62)
decimals = st.decimals(
    allow_nan=False, allow_infinity=False, places=4, max_value=10**12, min_value=-(10**12)
)
floats = st.floats(allow_nan=False, width=64)
texts = st.text(max_size=8)
dates = st.dates()
datetimes = st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1))


def test_encodings_ignore_object_identity():
    s = "".join(["a", "b"])  # equal to, but not the same object as, "ab"
    assert encode_exact(("ab", "ab")) == encode_exact((s, "ab"))
    assert encode_key(("ab", "ab")) == encode_key((s, "ab"))


def test_exact_distinguishes_what_key_equates():
    assert encode_exact((Decimal("1.0"),)) != encode_exact((Decimal("1.00"),))
    assert encode_key((Decimal("1.0"),)) == encode_key((Decimal("1.00"),)) == encode_key((1,))
    assert encode_key((-0.0,)) == encode_key((0.0,))
    assert encode_key((None, 1)) == encode_key((None, 1))
    assert encode_key((1,)) != encode_key(("1",))


def sql_cmp(a, b):
    if a is None or b is None:
        return 0 if a is b else (1 if a is None else -1)  # NULLS LAST
    return (a > b) - (a < b)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.lists(st.one_of(st.none(), ints), min_size=2, max_size=6),
        st.lists(st.one_of(st.none(), decimals, ints), min_size=2, max_size=6),
        st.lists(st.one_of(st.none(), floats), min_size=2, max_size=6),
        st.lists(st.one_of(st.none(), texts), min_size=2, max_size=6),
        st.lists(st.one_of(st.none(), dates), min_size=2, max_size=6),
        st.lists(st.one_of(st.none(), datetimes), min_size=2, max_size=6),
    )
)
def test_sortable_order_is_sql_order(values):
    by_bytes = sorted(values, key=lambda v: encode_sortable((v,)))
    by_sql = sorted(values, key=cmp_to_key(sql_cmp))
    assert [encode_sortable((v,)) for v in by_bytes] == [encode_sortable((v,)) for v in by_sql]
    for a, b in zip(by_bytes, by_bytes[1:], strict=False):
        assert sql_cmp(a, b) <= 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), ints), st.one_of(st.none(), texts)), min_size=2, max_size=8
    )
)
def test_sortable_composite_desc_and_nulls_first(rows):
    desc, nulls_first = [True, False], [False, True]
    by_bytes = sorted(rows, key=lambda r: encode_sortable(r, desc, nulls_first))

    def cmp(a, b):
        # column 0: DESC NULLS LAST; column 1: ASC NULLS FIRST
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x is None or y is None:
                c = (
                    0
                    if x is y
                    else ((1 if x is None else -1) if i == 0 else (-1 if x is None else 1))
                )
            else:
                c = (y > x) - (y < x) if i == 0 else (x > y) - (x < y)
            if c:
                return c
        return 0

    for a, b in zip(by_bytes, by_bytes[1:], strict=False):
        assert cmp(a, b) <= 0


def test_sortable_is_prefix_free_across_columns():
    assert encode_sortable(("a", "b")) != encode_sortable(("ab", ""))
    assert encode_sortable(("a",)) < encode_sortable(("a", None)) < encode_sortable(("a\x00",))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), ints, decimals, floats, texts, dates, datetimes, st.booleans()))
def test_single_value_encoding_is_the_tuple_encoding(v):
    assert encode_sortable_value(v) == encode_sortable((v,))
