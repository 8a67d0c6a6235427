"""Filter -> Map chains on columnar batches, vectorized beside the row path.

Random columnar batches (NULLs, zeros, int4/int8 extremes, NaN, infinities, -0.0, numerics of
two scales, dates near the ends of the range, text) go through the same compiled Filter -> Map
chain twice, fused as the dataflow builds it: once with the vectorized programs, once on the
row path only. After every time the output diffs must be equal in representation (Decimal scale,
the shared NaN object, the sign of a float zero) and the errs equal; the vectorized run must
have taken both ways (programs, and the row path for batches holding an error row).
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.filter import FilterCollection
from engine.dataflow.collections.fused_chain import FusedChainCollection
from engine.dataflow.collections.map import MapCollection
from engine.dataflow.columnar.arrow_types import arrow_type, to_arrow_column
from engine.dataflow.graph import Dataflow
from engine.dataflow.nan import NAN
from engine.dataflow.state.store import StateStore
from engine.sql.expression_compiler import (
    ColumnRef,
    compile_expressions,
    compile_predicate,
    parse_expression,
)
from engine.sql.types import from_pg_name
from engine.sql.vector_expressions import vectorize_expressions, vectorize_predicate

COLUMNS = [
    ("a", "integer"),
    ("b", "bigint"),
    ("n", "numeric(12,2)"),
    ("f", "double precision"),
    ("s", "text"),
    ("d", "date"),
    ("x", "boolean"),
]
REFS = [ColumnRef(name, "t", from_pg_name(typ)) for name, typ in COLUMNS]
VALUES = [  # per column: common values, and rare ones (extremes that make some rows raise)
    ([0, 1, -1, 7, -7, 100], [2**31 - 1, -(2**31)]),
    ([2, -3, 10, 1], [0, 2**62, -(2**63), 2**63 - 1]),
    ([Decimal("0.00"), Decimal("1.50"), Decimal("-2.25"), Decimal("99999.99")], []),
    ([0.0, -0.0, NAN, 1.5, -2.5], [math.inf, -math.inf, 1e308]),
    (["", "a", "b", "abc", "é", "B"], []),
    ([dt.date(2020, 1, 1), dt.date(1970, 1, 1), dt.date(2024, 2, 29)], [dt.date(9999, 12, 30)]),
    ([True, False], []),
]
PIPELINES = [
    (
        "f >= 0 or x",
        ["a + 1", "n * 2", "f / b", "-f", "s || 'x'", "d + a % 100", "nullif(f, 0)",
         "case when a > 0 then n else 0.00 end"],
    ),
    ("a / b > 0 or s < 'b'", ["a * b", "coalesce(n, a)", "b - a", "f * f", "x is not true"]),
    (
        "s < 'b' and d between '2020-01-01' and '9999-01-01'",
        ["a::text", "n::int", "f::int", "n::text", "d - 1", "a in (0, 1, null)"],
    ),
    ("not (f < 1.5) and a is not null", ["f", "a", "n", "s", "d", "x"]),
]  # fmt: skip


def random_rows(rng: random.Random, k: int) -> list[tuple]:
    def value(common, rare):
        r = rng.random()
        return None if r < 0.12 else rng.choice(rare) if rare and r < 0.14 else rng.choice(common)

    return [tuple(value(*vs) for vs in VALUES) for _ in range(k)]


def columnar(rows: list[tuple], weights: list[int]) -> DiffBatch:
    cols = [
        to_arrow_column([r[i] for r in rows], arrow_type(ref.type)) for i, ref in enumerate(REFS)
    ]
    return DiffBatch.from_columns(cols, pa.array(weights, pa.int64()).to_numpy())


def exact(row: tuple) -> tuple:
    """A row's values in representation: a Decimal's exponent, a float's sign, the shared NaN."""
    out = []
    for v in row:
        if isinstance(v, float):
            out.append(("nan", v is NAN) if v != v else ("float", v, math.copysign(1, v)))
        elif isinstance(v, Decimal):
            out.append(("decimal", v, v.as_tuple().exponent))
        else:
            out.append((type(v).__name__, v))
    return tuple(out)


def build(df: Dataflow, predicate: str, exprs: list[str], vectorized: bool):
    fn, _ = compile_predicate(parse_expression(predicate), REFS)
    compiled = compile_expressions([parse_expression(e) for e in exprs], REFS)
    filt, mapped = FilterCollection(fn, predicate), MapCollection(compiled.fn, ", ".join(exprs))
    if vectorized:
        filt.vector = vectorize_predicate(parse_expression(predicate), REFS).program
        mapped.vector = vectorize_expressions([parse_expression(e) for e in exprs], REFS).program
        assert filt.vector is not None and mapped.vector is not None
    a = df.input("a")
    df.build(df.add(mapped, df.add(filt, a)))
    return filt, mapped


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("pipeline", range(len(PIPELINES)))
def test_vectorized_chain_equals_row_path(tmp_path, pipeline, seed):
    predicate, exprs = PIPELINES[pipeline]
    rng = random.Random(seed * 100 + pipeline)
    stores = {k: StateStore(tmp_path / k) for k in ("row", "vec")}
    flows = {k: Dataflow(stores[k]) for k in stores}
    build(flows["row"], predicate, exprs, vectorized=False)
    filt, mapped = build(flows["vec"], predicate, exprs, vectorized=True)
    assert any(isinstance(n.collection, FusedChainCollection) for n in flows["vec"]._nodes)
    try:
        for t in range(1, 41):
            rows = random_rows(rng, rng.choice([1, 2, 5, 20, 100]))
            weights = [rng.choice([1, 1, 2, -1]) for _ in rows]
            outs = {}
            for kind, df in flows.items():
                batch = columnar(rows, weights)
                if kind == "row":
                    batch = DiffBatch(list(batch.rows), list(batch.weights))
                df.push("a", batch)
                outs[kind] = df.time_end(t)
                df.commit(t)
            got = Counter({exact(r): w for r, w in outs["vec"].diffs.counts().items()})
            want = Counter({exact(r): w for r, w in outs["row"].diffs.counts().items()})
            assert got == want, f"time {t}: vectorized {got - want} vs rows {want - got}"
            assert outs["vec"].errs.counts() == outs["row"].errs.counts(), f"time {t}"
    finally:
        for store in stores.values():
            store.close()
    assert filt.vector_batches > 0 and mapped.vector_batches > 0
    if pipeline < 3:  # expressions that raise on some rows: those batches took the row path
        assert filt.row_batches + mapped.row_batches > 0


def test_columnar_output_stays_columnar():
    refs = REFS
    fn, _ = compile_predicate(parse_expression("a > 0"), refs)
    filt = FilterCollection(
        fn, "a > 0", vectorize_predicate(parse_expression("a > 0"), refs).program
    )
    exprs = [parse_expression(e) for e in ("a + 1", "n")]
    compiled = compile_expressions(exprs, refs)
    mapped = MapCollection(compiled.fn, "", *vectorize_expressions(exprs, refs))
    batch = columnar([(1, 0, Decimal("1.50"), 0.0, "", None, True)] * 3, [1, 2, -1])
    out = mapped.on_diffs(0, filt.on_diffs(0, batch))
    assert out.columnar and out.columns[0].type == pa.int64()
    assert out.counts() == {(2, Decimal("1.50")): 2}
    assert "Map (vectorized)" in mapped.describe() and "Filter (vectorized)" in filt.describe()
    per_row = MapCollection(compiled.fn, "x", None, ["lower(s)"])
    assert per_row.describe() == "Map (per row: lower(s)): x"
