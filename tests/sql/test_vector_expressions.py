"""Vectorized expressions against Postgres 15: the expression compiler's oracle, on Arrow columns.

Every expression of ``test_expression_compiler.EXPRESSIONS`` that the vectorizer accepts runs
over that corpus' rows converted to Arrow columns, once over the whole batch and once per row
(one-row batches). A batch the program refuses (``NeedsRows``) is evaluated by the row path, as
the Filter and Map collections do. The results must equal Postgres' (values, numeric scale,
error messages) and, row by row, the row path's values in representation (Decimal scale, the
shared NaN object, the sign of a float zero). A second corpus holds NaN, infinities, -0.0, float
overflow and underflow, integer extremes and numerics past 2**53. Postgres' table holds the rows
as the Arrow columns give them back (an unconstrained numeric column gets one scale).
"""

from __future__ import annotations

import datetime
import itertools
import math
import random
from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest
from sqlglot import exp

from engine.dataflow.columnar.arrow_types import arrow_type, to_arrow_column, to_python
from engine.dataflow.errs import EvalError
from engine.dataflow.nan import NAN
from engine.sql.expression_compiler import (
    ColumnRef,
    compile_expressions,
    compile_predicate,
    parse_expression,
)
from engine.sql.time_zone import planning_time_zone
from engine.sql.types import TypeKind, from_pg_name
from engine.sql.vector_expressions import (
    NeedsRows,
    vectorize_expressions,
    vectorize_predicate,
)
from tests.sql import test_expression_compiler as corpus


def arrow_columns(rows: list[tuple], refs: list[ColumnRef]) -> list[pa.Array]:
    """The rows as Arrow columns; an unconstrained numeric column at its values' largest scale;
    a column of a type without an Arrow type (timestamptz, interval) as NULLs (``NO_ARROW``:
    expressions reading it are not run here)."""
    cols = []
    for i, ref in enumerate(refs):
        values = [r[i] for r in rows]
        scale = None
        if ref.type.kind is TypeKind.NUMERIC and ref.type.precision is None:
            scale = max((-v.as_tuple().exponent for v in values if v is not None), default=0)
        typ = arrow_type(ref.type, max(scale or 0, 0))
        cols.append(pa.nulls(len(rows)) if typ is None else to_arrow_column(values, typ))
    return cols


def round_trip(rows: list[tuple], refs: list[ColumnRef]) -> tuple[list[pa.Array], list[tuple]]:
    """The Arrow columns and the rows as they give them back (a column without an Arrow type
    keeps its values)."""
    cols = arrow_columns(rows, refs)
    back = [
        [r[i] for r in rows] if pa.types.is_null(c.type) else to_python(c)
        for i, c in enumerate(cols)
    ]
    return cols, list(zip(*back, strict=True))


def row_results(fn, rows: list[tuple]) -> list[tuple[str, object]]:
    """The row path as ``errs.evaluate`` runs it: the batch, else row by row with errors."""
    try:
        return [("ok", r[0]) for r in fn(rows)]
    except EvalError:
        pass
    out = []
    for row in rows:
        try:
            out.append(("ok", fn([row])[0][0]))
        except EvalError as e:
            out.append(("error", str(e)))
    return out


def vector_results(program, cols, rows, fn) -> tuple[list[tuple[str, object]], bool]:
    """The program over ``cols``, or the row path when it needs rows; and whether it ran."""
    try:
        (out,) = program(cols, len(rows))
    except NeedsRows:
        return row_results(fn, rows), False
    assert len(out) == len(rows)
    return [("ok", v) for v in to_python(out)], True


def postgres_results(conn, sql: str, n: int) -> list[tuple[str, object]]:
    """Per row of ``t`` (ids 0..n-1): ('ok', value) or ('error', Postgres' message)."""
    try:
        values = conn.execute(f"SELECT ({sql}) FROM t ORDER BY id").fetchall()
        return [("ok", v) for (v,) in values]
    except psycopg.Error:
        pass
    out = []
    for i in range(n):
        try:
            query = f"SELECT ({sql.replace('%', '%%')}) FROM t WHERE id = %s"
            (v,) = conn.execute(query, (i,)).fetchone()
            out.append(("ok", v))
        except psycopg.Error as e:
            out.append(("error", e.diag.message_primary))
    return out


def identical(ours, theirs) -> bool:
    """Equal in representation: type, a Decimal's scale, the shared NaN, a float zero's sign."""
    if type(ours) is not type(theirs):
        return False
    if isinstance(ours, float):
        if theirs != theirs:
            return ours is NAN and theirs is NAN
        return ours == theirs and math.copysign(1, ours) == math.copysign(1, theirs)
    if isinstance(ours, Decimal):
        return ours == theirs and ours.as_tuple().exponent == theirs.as_tuple().exponent
    return ours == theirs


def check_expression(conn, sql: str, refs, cols, rows) -> tuple[int, int]:
    """Compare the vectorized results of ``sql`` with Postgres and the row path; returns (rows
    run vectorized one at a time, rows Postgres evaluates without an error)."""
    with planning_time_zone(corpus.TIME_ZONE):
        compiled = compile_expressions([parse_expression(sql)], refs)
        program = vectorize_expressions([parse_expression(sql)], refs).program
    assert program is not None
    theirs = postgres_results(conn, sql, len(rows))
    rowwise = row_results(compiled.fn, rows)
    whole, _ = vector_results(program, cols, rows, compiled.fn)
    single, ran = [], 0
    for i in range(len(rows)):
        one = [c.slice(i, 1) for c in cols]
        (r,), did = vector_results(program, one, rows[i : i + 1], compiled.fn)
        single.append(r)
        ran += did
    for name, ours in (("whole batch", whole), ("one row", single)):
        bad = [
            (rows[i], o, t)
            for i, (o, t) in enumerate(zip(ours, theirs, strict=True))
            if o[0] != t[0]
            or (o[0] == "ok" and not corpus._same(o[1], t[1]))
            or (o[0] == "error" and o[1] != t[1])
        ]
        assert not bad, f"{sql} ({name}) first mismatches (row, ours, postgres): {bad[:3]}"
        differ = [
            (rows[i], o, r)
            for i, (o, r) in enumerate(zip(ours, rowwise, strict=True))
            if o[0] == "ok" and not identical(o[1], r[1])
        ]
        assert not differ, f"{sql} ({name}) differs from the row path: {differ[:3]}"
    return ran, sum(status == "ok" for status, _ in theirs)


# --- the expression compiler's corpus ----------------------------------------------------------

CORPUS_COLS, CORPUS_ROWS = round_trip(corpus.ROWS, corpus.REFS)
NO_ARROW = {r.name for r in corpus.REFS if arrow_type(r.type, 0) is None}


def _vectorized(sql: str) -> bool:
    """Whether the vectorizer takes ``sql`` (planned as the corpus is, under its TimeZone) and
    it reads only columns Arrow holds."""
    node = parse_expression(sql)
    if any(c.name in NO_ARROW for c in node.find_all(exp.Column)):
        return False
    with planning_time_zone(corpus.TIME_ZONE):
        return vectorize_expressions([node], corpus.REFS).program is not None


ACCEPTED = [s for s in corpus.EXPRESSIONS if _vectorized(s)]

# at least one expression of each family the vectorizer covers (a regression to "everything
# runs per row" fails here)
FAMILIES = [
    "a > b", "s < t", "d < ts", "ts >= '2020-01-01'", "f < n", "n > a", "n in (1.5, 0)",
    "x and y", "not (x and y) or a = 1", "a is null", "a is distinct from b", "x is not false",
    "a between -5 and 5", "a in (0, null, 5)", "s in ('abc', 'xx', '')", "a in (b, 1, c)",
    "a + b", "a * b", "c * a", "2147483647 + a", "a / b", "a % b", "c / b", "-a", "-c",
    "a + n", "n * m", "m - n", "f * a", "f / b", "f + n", "a * 1.5 + b", "d + (a % 1000)",
    "d - e", "d - 7", "7 + d", "ts > d + 1",
    "case when a > 0 then 'pos' when a < 0 then 'neg' else 'zero' end",
    "case a when 1 then 'one' when 2 then 'two' end", "case when b <> 0 then a / b else -1 end",
    "coalesce(a, b, 0)", "coalesce(n, f)", "nullif(a, 0)", "nullif(a, 1.5)",
    "s::int", "a::text", "n::text", "x::text", "n::int", "f::int", "c::int", "a::smallint",
    "a::numeric(6,2)", "n::numeric(5,1)", "a::float8", "m::float8", "d::timestamp", "ts::date",
    "x::int", "a::boolean", "s || a", "lower(s)", "length(s)", "substring(s from 2 for 3)",
    "s like 'a%'", "s like '%b%'",
    "s not ilike '%B'", "t like 'x%y' escape 'x'", "s like '%'",
]  # fmt: skip


# Where the vectorized path falls short on the corpus (each an xfail(strict) of
# test_vectorized_matches_postgres, so that a fix shows), found when the corpus grew to every
# operator over every pair of operand types (issue 13). (Reals, character results of CASE and
# COALESCE, and a NULLIF whose type is not the common one now run per row: the row path's
# Postgres semantics for them have no kernel.)
_BIGINT_NUMERIC = (
    "bigint beside numeric: the corpus' bigint extremes give sums, differences and products past "
    "64 bits at the numeric's scale, which go per row; fewer than 80% of the rows run vectorized "
    "(48 of 70); the values are right (comparisons of them run vectorized: order_signs)"
)
VECTOR_DIFFERENCES = dict.fromkeys(
    ["c + n", "n + c", "c - n", "n - c", "c * n", "n * c"],
    _BIGINT_NUMERIC,
)  # fmt: skip


@pytest.fixture(scope="module")
def oracle(pg_server):
    with pg_server.database_with_table("vexprs", corpus.COLUMNS, CORPUS_ROWS) as conn:
        conn.execute(f"SET TimeZone = '{corpus.TIME_ZONE}'")
        corpus.engine_loaders(conn)  # results as the engine reads them (character(n) unpadded)
        yield conn


def test_the_vectorizer_covers_the_families():
    missing = [s for s in FAMILIES if s not in ACCEPTED]
    assert not missing, missing
    assert len(ACCEPTED) >= 105, len(ACCEPTED)


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param(sql, marks=pytest.mark.xfail(strict=True, reason=VECTOR_DIFFERENCES[sql]))
        if sql in VECTOR_DIFFERENCES
        else sql
        for sql in ACCEPTED
    ],
)
def test_vectorized_matches_postgres(oracle, sql):
    ran, ok = check_expression(oracle, sql, corpus.REFS, CORPUS_COLS, CORPUS_ROWS)
    # the rows Postgres evaluates mostly run vectorized (an untaken CASE branch that would
    # raise, an integer past 2**53 beside a float... send a row to the row path)
    assert ran >= ok * 0.8, (ran, ok)


@pytest.mark.parametrize("sql", [s for s in ACCEPTED if s in FAMILIES[:16]])
def test_vectorized_predicate_keeps_true_rows(oracle, sql):
    refs, cols, rows = corpus.REFS, CORPUS_COLS, CORPUS_ROWS
    program = vectorize_predicate(parse_expression(sql), refs).program
    keep = program.mask(cols, len(rows))
    fn, _ = compile_predicate(parse_expression(sql), refs)
    assert keep.tolist() == [v is True for v in fn(rows)]


# --- NaN, infinities, -0.0, extremes -----------------------------------------------------------

EDGE_COLUMNS = [
    ("f", "double precision"),
    ("g", "double precision"),
    ("i", "integer"),
    ("c", "bigint"),
    ("n", "numeric(20,4)"),
]
EDGE_REFS = [ColumnRef(name, "t", from_pg_name(typ)) for name, typ in EDGE_COLUMNS]
_FLOATS = [float("nan"), math.inf, -math.inf, 0.0, -0.0, 1.5, -2.0, 1e308, 5e-324, None]
_INTS = [0, 1, -1, 2**31 - 1, -(2**31), None, 7]
_BIGS = [0, 2**53 + 1, -(2**63), 2**63 - 1, -(2**53), None, 3]
_NUMS = [Decimal("0.0000"), Decimal("1.5000"), Decimal("-2.2500"), None]
_NUMS += [Decimal("9007199254740993.0000"), Decimal("123456789012.3456")]
EDGE_ROWS = [
    (f, g, _INTS[k % len(_INTS)], _BIGS[k % len(_BIGS)], _NUMS[k % len(_NUMS)])
    for k, (f, g) in enumerate(itertools.product(_FLOATS, _FLOATS))
]
EDGE_EXPRESSIONS = [
    "f = g", "f <> g", "f < g", "f <= g", "f > g", "f >= g", "f is distinct from g",
    "f is not distinct from g", "f between g and 10", "f in (1.5, 'NaN')", "f in (g, 0)",
    "not (f < g)", "f > 1", "f = 'NaN'", "nullif(f, g)", "coalesce(f, g)", "f - g", "f + g",
    "f * g", "f / g", "-f", "f * 0", "f::int", "f::bigint", "c < f", "i < f", "c = f",
    "i in (1.5::float8, 7)", "n < f", "n::float8", "n * n", "n + c",
    "-c", "c * 2", "c / -1", "c % -1", "i * i", "-i", "c::int", "n::int", "n::numeric(6,2)",
    "n::bigint", "i / 0", "case when f > g then f else g end", "case f when 1.5 then 1 end",
    "f::text", "i::float8 / 3", "n > c", "c + n * 2", "case f when 'NaN' then 1 else 0 end",
    "c in (9007199254740992.0::float8, 1.5::float8)", "case i when null then 1 else 0 end",
    "case c when 9007199254740992::float8 then 'rounded' end",
]  # fmt: skip
EDGE_COLS, EDGE_ROWS_RT = round_trip(EDGE_ROWS, EDGE_REFS)
EDGE_ACCEPTED = [
    s
    for s in EDGE_EXPRESSIONS
    if vectorize_expressions([parse_expression(s)], EDGE_REFS).program is not None
]


@pytest.fixture(scope="module")
def edge_oracle(pg_server):
    with pg_server.database_with_table("vedges", EDGE_COLUMNS, EDGE_ROWS_RT) as conn:
        yield conn


def test_edge_expressions_are_vectorized():
    assert len(EDGE_ACCEPTED) >= 44, sorted(set(EDGE_EXPRESSIONS) - set(EDGE_ACCEPTED))


@pytest.mark.parametrize("sql", EDGE_ACCEPTED)
def test_edge_values_match_postgres(edge_oracle, sql):
    check_expression(edge_oracle, sql, EDGE_REFS, EDGE_COLS, EDGE_ROWS_RT)


# --- input columns of other Arrow types --------------------------------------------------------


def test_an_unexpected_arrow_type_needs_rows():
    refs = [ColumnRef("a", None, from_pg_name("integer"))]
    program = vectorize_expressions([parse_expression("a + 1")], refs).program
    (out,) = program([pa.array([1, None], pa.int32())], 2)  # int32 holds integers too
    assert out.to_pylist() == [2, None] and out.type == pa.int64()
    with pytest.raises(NeedsRows):
        program([pa.array(["1", "2"])], 2)
    with pytest.raises(NeedsRows):
        program([pa.array([1.0, 2.0])], 2)


def test_a_passed_through_column_is_the_input_array():
    refs = [
        ColumnRef("a", None, from_pg_name("integer")),
        ColumnRef("d", None, from_pg_name("date")),
    ]
    program = vectorize_expressions([parse_expression(s) for s in ("d", "a")], refs).program
    a, d = pa.array([1, 2], pa.int64()), pa.array([datetime.date(2020, 1, 1), None])
    out = program([a, d], 2)
    assert out[0] is d and out[1] is a


def test_like_patterns_match_the_row_path():
    """Every LIKE pattern vectorizes (tests of equality, prefix, suffix, substring, or an RE2
    match of the whole text) and agrees with the row path's matcher on random patterns (escapes,
    '_', several '%') over random texts (newlines, non-ASCII, regex metacharacters)."""
    from engine.dataflow.columnar import vector_kernels as K
    from engine.sql import functions as F
    from engine.sql.vector_operators import _like_kernel

    rng = random.Random(5)
    chars = ["a", "b", "\n", "é", "😀", ".", "*", "(", "[", "$", "^", " ", "\t", "%", "_", "\\"]
    chars += ["-", "{", "}", "|", "?", "+"]
    texts = ["".join(rng.choice(chars) for _ in range(rng.randrange(6))) for _ in range(2000)]
    column = pa.array(texts)
    kinds = set()
    for _ in range(1500):
        pattern = "".join(
            rng.choice([*chars, "\\%", "\\_", "\\\\"]) for _ in range(rng.randrange(6))
        )
        try:
            tokens = F.like_tokens(pattern, "\\")
        except EvalError:
            continue
        test, literal = _like_kernel(tokens)
        kinds.add(test)
        got = K._TEXT_TESTS[test](column, literal).to_pylist()
        matcher = F.like_regex(pattern, "\\").fullmatch
        assert got == [matcher(t) is not None for t in texts], (pattern, test)
    assert kinds == {"equals", "starts_with", "ends_with", "contains", "regex"}
