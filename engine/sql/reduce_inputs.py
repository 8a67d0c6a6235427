"""What a GROUP BY's reduce reads: its group keys and aggregate arguments as columns of one Map.

``reduce_inputs(plan)`` gives those expressions (each once), the aggregates as the reduce's
specs over their positions, the compiled Map, every column's Arrow type (a group key needs a
declared type; an argument's numeric may take the scale ``value_scale`` derives) and whether
``ColumnarReduceCollection`` takes them. The physical planner builds the Map and the reduce from
it; ``aggregate_value_types`` reads from it the Arrow types of a columnar reduce's sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from engine.dataflow.aggregates import Aggregate as AggregateSpec
from engine.dataflow.collections.columnar_reduce import supports as supports_columnar_reduce
from engine.dataflow.columnar.arrow_types import arrow_type
from engine.sql import logical_plan as lp
from engine.sql.calls import AggregateCall, aggregate_call
from engine.sql.expression_compiler import ColumnRef, CompiledExpressions, compile_expressions
from engine.sql.logical_plan import Field
from engine.sql.numeric_scale import value_scale
from engine.sql.rules.scope import resolve


@dataclass(frozen=True)
class ReduceInputs:
    #: group keys first (``groups`` of them), then the aggregates' arguments, filters, orders
    columns: list[exp.Expression]
    groups: int
    #: the aggregates as parsed, and as the reduce's specs over ``columns``
    calls: list[AggregateCall]
    specs: list[AggregateSpec]
    compiled: CompiledExpressions
    #: per column, the Arrow type holding its values exactly (None: none)
    arrow: list[pa.DataType | None]

    @property
    def columnar(self) -> bool:
        """Whether ``ColumnarReduceCollection`` computes this reduce."""
        return supports_columnar_reduce(self.arrow[: self.groups], self.specs, self.arrow)


def column_refs(fields: tuple[Field, ...]) -> list[ColumnRef]:
    """The fields as the expression compiler's column references."""
    return [ColumnRef(f.name, f.qualifier, f.type, f.nullable) for f in fields]


def field_type(e: exp.Column, fields: tuple[Field, ...]):
    """The type of the field a column reference names (None: none or several)."""
    i = resolve(e, fields)
    return fields[i].type if i is not None else None


def reduce_inputs(plan: lp.Aggregate) -> ReduceInputs:
    """The Map's columns and the reduce's specs of ``plan`` (see the module docstring)."""
    fields = plan.input.fields
    columns: list[exp.Expression] = list(plan.group_by)

    def slot(e: exp.Expression) -> int:
        key = e.sql()
        for i, c in enumerate(columns):
            if c.sql() == key:
                return i
        columns.append(e)
        return len(columns) - 1

    calls = [aggregate_call(a) for a in plan.aggregates]
    specs: list[AggregateSpec] = []
    for call in calls:
        specs.append(
            AggregateSpec(
                call.kind,
                slot(call.arg) if call.arg is not None else None,
                slot(call.filter) if call.filter is not None else None,
                call.separator,
                tuple(slot(k.expr) for k in call.order_by),
                tuple(k.descending for k in call.order_by),
                tuple(k.nulls_first for k in call.order_by),
            )
        )
    groups = len(plan.group_by)
    compiled = compile_expressions(columns, column_refs(fields))
    arrow = [  # group keys need one representation per value: numerics of a declared type
        arrow_type(t, None if i < groups else value_scale(e, lambda c: field_type(c, fields)))
        for i, (e, t) in enumerate(zip(columns, compiled.types, strict=True))
    ]
    return ReduceInputs(columns, groups, calls, specs, compiled, arrow)
