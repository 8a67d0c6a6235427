"""Vectorized expressions: a Filter's predicate or a Map's expressions over Arrow columns.

``vectorize_expressions(exprs, columns)`` and ``vectorize_predicate(expr, columns)`` compile
sqlglot expressions over input rows shaped like ``columns`` into a ``VectorProgram``: one call
per batch over the batch's Arrow arrays (numpy and Arrow compute kernels, no Python per row),
giving the output arrays, or a filter's keep-mask (rows whose predicate is TRUE). They return
no program, and name the expressions that run per row instead, when some part of an expression
has no exact kernel (``engine.sql.vector_compiler`` decides; the row compiler's types and
constant folding are reused, never re-derived).

Exactness. A program computes the values the row compiler's function computes on the same
rows (``DiffBatch.rows`` of the columnar batch): Postgres' NaN order, three-valued logic,
integer range errors, numerics as exact scaled integers at the scale Postgres gives them. It
never guesses: when a batch holds a row that would raise in the row path (division by zero,
overflow, a bad cast), a value a kernel cannot hold exactly (a numeric past 64 bits, an integer
past 2**53 beside a float), or an input column of an unexpected Arrow type, the program raises
``NeedsRows`` and the collection evaluates that batch row by row, which gives the exact values
and the exact error diffs. A row-path error inside a CASE branch that is not taken, or after a
false AND, also sends the batch to the rows (the kernels compute every row of every branch).

Output columns: int64, float64, decimal128(38, s) at the values' scale (as ``to_arrow_column``
makes them), bool, string, date32, timestamp[us]; an output that is an input column unchanged
is passed on as it came. This module must not plan; it compiles and runs expressions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from sqlglot import exp

from engine.dataflow.columnar import vector_kernels as K
from engine.dataflow.columnar.vectors import Kind, NeedsRows, to_arrow
from engine.errors import UnsupportedSQL
from engine.sql.expression_compiler import ColumnRef
from engine.sql.vector_casts import kind_of
from engine.sql.vector_compiler import VectorCompiler
from engine.sql.vector_nodes import Inputs, VNode

__all__ = [
    "NeedsRows",
    "ExtendColumns",
    "SelectColumns",
    "VectorProgram",
    "Vectorized",
    "vectorize_expressions",
    "vectorize_predicate",
]

# the Arrow type an input column must have to pass on unchanged as an output of its kind
_PASS = {
    Kind.INT: pa.types.is_int64,
    Kind.FLOAT: lambda t: t == pa.float64(),
    Kind.NUMERIC: pa.types.is_decimal128,
    Kind.BOOL: pa.types.is_boolean,
    Kind.TEXT: lambda t: t == pa.string(),
    Kind.DATE: pa.types.is_date32,
    Kind.TIMESTAMP: lambda t: t == pa.timestamp("us"),
}


class VectorProgram:
    """Compiled vectorized expressions: ``program(columns, n)`` -> output arrays, or
    ``program.mask(columns, n)`` -> the rows to keep (a predicate). Raises ``NeedsRows``."""

    def __init__(
        self, nodes: list[VNode], kinds: dict[int, Kind], passthrough: list[int | None]
    ) -> None:
        self.nodes = nodes
        self.kinds = dict(kinds)
        self.passthrough = passthrough

    def __call__(self, columns: list[pa.Array], n: int) -> list[pa.Array]:
        inp = Inputs(columns, n, self.kinds)
        out = []
        for node, col in zip(self.nodes, self.passthrough, strict=True):
            if col is not None and _PASS[self.kinds[col]](columns[col].type):
                out.append(columns[col])
            else:
                out.append(to_arrow(node.run(inp), n))
        return out

    def mask(self, columns: list[pa.Array], n: int) -> np.ndarray:
        (node,) = self.nodes
        return np.ascontiguousarray(K.true_rows(node.run(Inputs(columns, n, self.kinds)), n))


class SelectColumns:
    """A Map that only picks input columns (a projection): the arrays themselves."""

    def __init__(self, indices: list[int]) -> None:
        self.indices = list(indices)

    def __call__(self, columns: list[pa.Array], n: int) -> list[pa.Array]:
        return [columns[i] for i in self.indices]


class ExtendColumns:
    """A Map appending computed columns to its input's (join keys, top-k keys...)."""

    def __init__(self, program: VectorProgram) -> None:
        self.program = program

    def __call__(self, columns: list[pa.Array], n: int) -> list[pa.Array]:
        return [*columns, *self.program(columns, n)]


@dataclass(frozen=True)
class Vectorized:
    """The vectorized form of some expressions: ``program`` (None when one of them has no
    exact kernel) and the SQL of the expressions that run per row."""

    program: VectorProgram | None
    per_row: tuple[str, ...] = ()

    def __iter__(self):  # (program, per_row): MapCollection(fn, what, *vectorized)
        return iter((self.program, self.per_row))


def _sql(e: exp.Expression) -> str:
    return e.sql(dialect="postgres")


def vectorize_expressions(exprs: list[exp.Expression], columns: list[ColumnRef]) -> Vectorized:
    """A program computing ``exprs`` (a Map's outputs), or the ones that run per row."""
    c = VectorCompiler(columns)
    nodes, per_row, passthrough = [], [], []
    for e in exprs:
        node = c.compile(e)
        if node is not None and not _has_arrow_output(c, e, node):
            node = None
        if node is None:
            per_row.append(_sql(e))
            continue
        nodes.append(node)
        passthrough.append(c.types.typed(e).column)
    if per_row:
        return Vectorized(None, tuple(per_row))
    return Vectorized(VectorProgram(nodes, c.kinds, passthrough))


def vectorize_predicate(expr: exp.Expression, columns: list[ColumnRef]) -> Vectorized:
    """A program whose ``mask`` keeps the rows where ``expr`` is TRUE, or None (per row)."""
    c = VectorCompiler(columns)
    node = c.compile(expr)
    if node is None or node.kind is not Kind.BOOL:
        return Vectorized(None, _per_row_conjuncts(expr, columns))
    return Vectorized(VectorProgram([node], c.kinds, [None]))


def _per_row_conjuncts(expr: exp.Expression, columns: list[ColumnRef]) -> tuple[str, ...]:
    """The conjuncts of ``expr`` without a kernel (the whole of it if each has one)."""
    parts, stack = [], [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, exp.Paren):
            stack.append(e.this)
        elif isinstance(e, exp.And):
            stack += [e.expression, e.this]
        else:
            parts.append(e)
    lacking = [p for p in parts if VectorCompiler(columns).compile(p) is None]
    return tuple(_sql(p) for p in lacking) or (_sql(expr),)


def _has_arrow_output(c: VectorCompiler, e: exp.Expression, node: VNode) -> bool:
    """The output's kind is its SQL type's, and that type has an Arrow column type."""
    try:
        t = c.types.typed(e).type
    except UnsupportedSQL:
        return False
    return kind_of(t) is node.kind and node.kind is not None
