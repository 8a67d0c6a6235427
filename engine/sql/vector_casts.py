"""The conversions between SQL types that the vectorized expressions can make exactly.

``cast_kernel(src, to)`` names the kernel (``engine.dataflow.columnar.vector_kernels``) that
converts values of ``src`` to ``to`` exactly as the row compiler's cast does, or None where no
kernel is exact (float -> numeric keeps 15 significant digits of a shortest text, text ->
numeric/float/date parse with the row path's rules, casts to real round to float4...): the
expression then runs per row. ``kind_of`` maps SQL types onto the kernels' value kinds. This
module must not evaluate anything itself.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.dataflow.columnar import number_kernels as N
from engine.dataflow.columnar import vector_kernels as K
from engine.dataflow.columnar.vectors import Kind, Vec
from engine.sql.types import INT_RANGES, SqlType, TypeKind, numeric_rank

#: a cast kernel: (values, batch length) -> values
CastKernel = Callable[[Vec, int], Vec]

_KINDS = {
    TypeKind.SMALLINT: Kind.INT,
    TypeKind.INTEGER: Kind.INT,
    TypeKind.BIGINT: Kind.INT,
    TypeKind.NUMERIC: Kind.NUMERIC,
    # no real: the row path computes a real from its exact single-precision value and rounds
    # real results back (engine.sql.functions.float4_to_float8, to_float4); a float64 kernel
    # on the carried value would differ (r = 0.1), so real values stay per row
    TypeKind.DOUBLE: Kind.FLOAT,
    TypeKind.TEXT: Kind.TEXT,
    TypeKind.VARCHAR: Kind.TEXT,
    TypeKind.CHAR: Kind.TEXT,
    TypeKind.UNKNOWN: Kind.TEXT,  # an untyped literal: text, as a result value
    TypeKind.BOOLEAN: Kind.BOOL,
    TypeKind.DATE: Kind.DATE,
    TypeKind.TIMESTAMP: Kind.TIMESTAMP,
}


def kind_of(t: SqlType) -> Kind | None:
    """The kernels' kind of ``t``'s values, or None (no kernel reads them)."""
    return _KINDS.get(t.kind)


def _same(v: Vec, n: int) -> Vec:
    return v


def _to_numeric(v: Vec, n: int) -> Vec:
    return N.rescale(v, v.scale)  # an integer is a numeric of scale 0


def cast_kernel(src: SqlType, to: SqlType) -> CastKernel | None:
    """The exact kernel of ``CAST(src AS to)`` as the row compiler casts, or None."""
    s, t = src.kind, to.kind
    if t is TypeKind.NUMERIC and to.precision is not None:
        if not (src.is_integer or s is TypeKind.NUMERIC):
            return None
        p, sc = to.precision, to.scale or 0
        return lambda v, n: N.numeric_typmod(_to_numeric(v, n), p, sc)
    if to.is_string:
        if to.length is not None or t is TypeKind.CHAR:
            return None  # truncation to varchar(n) / bpchar: per row
        if src.is_string or s is TypeKind.UNKNOWN:
            return _same  # character(n) values arrive unpadded: a relabel, as in the row path
        if src.is_integer or s in (TypeKind.NUMERIC, TypeKind.BOOLEAN):
            return K.to_text
        return None
    if s == t:
        return _same
    if src.is_integer and to.is_integer:
        if numeric_rank(to) >= numeric_rank(src):
            return _same
        lo, hi, _ = INT_RANGES[t]
        return lambda v, n: N.int_range(v, lo, hi)
    if src.is_integer:
        if t is TypeKind.NUMERIC:
            return _to_numeric
        if t is TypeKind.DOUBLE:
            return lambda v, n: N.int_to_float(v, exact=False)
        if t is TypeKind.BOOLEAN and s is TypeKind.INTEGER:
            return lambda v, n: N.int_to_bool(v)
        return None
    if s is TypeKind.NUMERIC:
        if to.is_integer:
            lo, hi, _ = INT_RANGES[t]
            return lambda v, n: N.numeric_to_int(v, lo, hi)
        if t is TypeKind.DOUBLE:
            return lambda v, n: N.numeric_to_float(v)
        return None
    if src.is_float:
        if to.is_integer:
            lo, hi, _ = INT_RANGES[t]
            return lambda v, n: N.float_to_int(v, lo, hi)
        if t is TypeKind.DOUBLE:
            return _same
        return None
    if s is TypeKind.BOOLEAN and t is TypeKind.INTEGER:
        return lambda v, n: N.bool_to_int(v)
    if src.is_string and to.is_integer:
        lo, hi, _ = INT_RANGES[t]
        return lambda v, n: K.text_to_int(v, lo, hi)
    if s is TypeKind.DATE and t is TypeKind.TIMESTAMP:
        return lambda v, n: K.date_to_timestamp(v)
    if s is TypeKind.TIMESTAMP and t is TypeKind.DATE:
        return lambda v, n: K.timestamp_to_date(v)
    return None
