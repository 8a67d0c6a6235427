"""The Arrow types of an Aggregate's outputs whose values have one known scale.

Postgres types ``sum(numeric(15,2))`` as plain ``numeric``, so the output column has no declared
scale and no Arrow type of its own; but every value of it has scale 2 (numeric addition keeps the
larger scale), and ``min``/``max`` return one of their argument's values. Knowing that lets the
collections above an aggregate (ORDER BY ... LIMIT over a GROUP BY, joins with a grouped derived
table) take their columnar forms. Only where the values fit ``decimal128(38, s)`` as far as the
rows they are summed from can tell:

* ``sum`` of an integer column (scale 0) or of a ``numeric(p, s)`` column with p <= 28 (a sum past
  38 digits would need 10^10 rows at the largest values);
* ``sum`` of any argument of a known scale s (a column, or an expression such as TPC-H's
  ``l_extendedprice * (1 - l_discount)``) when ``ColumnarReduceCollection`` computes the
  aggregate: its sums are 128-bit integers, output as ``decimal128(38, s)`` columns whatever
  the type says (a sum past 128 bits fails the time there; one of 39 digits, below 2^127, is
  not caught);
* ``min``/``max`` of a column whose own values have an Arrow type;
* a group key that is a bare column: that column's type.

``FILTER (WHERE ...)`` changes nothing: the same values, fewer rows. Anything else: None.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from sqlglot import exp

from engine.dataflow.collections.columnar_reduce import sum_arrow_type
from engine.dataflow.columnar.arrow_types import arrow_type
from engine.errors import UnsupportedSQL
from engine.sql import logical_plan as lp
from engine.sql.calls import aggregate_call
from engine.sql.reduce_inputs import reduce_inputs
from engine.sql.rules.scope import is_bare_column, resolve
from engine.sql.types import SqlType, TypeKind

#: the widest numeric argument a sum keeps as decimal128(38, s)
_SUM_PRECISION = 28


def aggregate_arrow_types(
    plan: lp.Aggregate, input_types: Sequence[pa.DataType | None]
) -> list[pa.DataType | None]:
    """Per output field of ``plan``, an Arrow type holding its values exactly, or None;
    ``input_types``: the same for the aggregate's input fields."""
    inner = plan.input.fields
    sums = _columnar_sum_types(plan)
    out: list[pa.DataType | None] = []
    for i, f in enumerate(plan.fields):
        declared = arrow_type(f.type) if isinstance(f.type, SqlType) else None
        if declared is not None:
            out.append(declared)
            continue
        if i < len(plan.group_by):
            out.append(_column_arrow_type(plan.group_by[i], inner, input_types))
        else:
            k = i - len(plan.group_by)
            out.append(sums[k] or _aggregate_arrow_type(plan.aggregates[k], f, inner, input_types))
    return out


def _columnar_sum_types(plan: lp.Aggregate) -> list[pa.DataType | None]:
    """Per aggregate of ``plan``, the Arrow type of its values if it is a sum that
    ``ColumnarReduceCollection`` computes over a numeric of one scale (``sum_arrow_type``), else
    None."""
    try:
        inputs = reduce_inputs(plan)
    except UnsupportedSQL:  # the planner reports it where it builds the aggregate
        return [None] * len(plan.aggregates)
    if not inputs.columnar:
        return [None] * len(plan.aggregates)
    return [
        sum_arrow_type(inputs.arrow[spec.arg])
        if spec.kind == "sum" and spec.arg is not None
        else None
        for spec in inputs.specs
    ]


def _column_arrow_type(e: exp.Expression, inner, input_types) -> pa.DataType | None:
    if not is_bare_column(e):
        return None
    j = resolve(e, inner)
    return input_types[j] if j is not None else None


def _aggregate_arrow_type(
    e: exp.Expression, out: lp.Field, inner, input_types
) -> pa.DataType | None:
    if not (isinstance(out.type, SqlType) and out.type.kind is TypeKind.NUMERIC):
        return None
    try:
        call = aggregate_call(e)
    except UnsupportedSQL:  # the planner reports it where it builds the aggregate
        return None
    if call.kind in ("min", "max"):
        return _column_arrow_type(call.arg, inner, input_types)
    if call.kind != "sum" or not is_bare_column(call.arg):
        return None
    j = resolve(call.arg, inner)
    if j is None:
        return None
    t = inner[j].type
    if not isinstance(t, SqlType):
        return None
    if t.is_integer:
        return pa.decimal128(38, 0)
    if t.kind is TypeKind.NUMERIC and t.precision is not None and t.precision <= _SUM_PRECISION:
        return pa.decimal128(38, t.scale or 0)
    return None
