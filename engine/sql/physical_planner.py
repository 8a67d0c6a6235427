"""Physical planning: turns an optimized logical plan into a dataflow of collections.

Each logical node becomes one or a few collections: Filter -> FilterCollection, Project ->
MapCollection (compiled expressions), Join -> the inner/outer/semi/anti/cross join collections
(equi-conjuncts of the ON condition become key columns, the rest a compiled residual; key
expressions that are not plain columns are computed into extra columns first), Aggregate ->
a Map computing group keys and aggregate arguments, then ReduceCollection; TopK and Window ->
a Map computing their keys, the collection (the columnar top-k where its ``supports`` allows),
and a Map dropping the helper columns; set operations -> union/distinct/set-operation
collections. A logical node reached twice (a CTE used
twice) becomes ONE dataflow node. Every source table becomes one dataflow input (named
``schema.table``) that receives the table's columns listed in ``PhysicalPlan.inputs``.
This module must not optimize; it plans exactly what it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from sqlglot import exp

from engine.dataflow.collections.anti_join import AntiJoinCollection
from engine.dataflow.collections.columnar_distinct import ColumnarDistinctCollection
from engine.dataflow.collections.columnar_distinct import supports as supports_columnar_distinct
from engine.dataflow.collections.columnar_join import ColumnarInnerJoinCollection
from engine.dataflow.collections.columnar_join import supports as supports_columnar_join
from engine.dataflow.collections.columnar_outer_join import ColumnarOuterJoinCollection
from engine.dataflow.collections.columnar_reduce import ColumnarReduceCollection
from engine.dataflow.collections.columnar_semi_join import ColumnarSemiJoinCollection
from engine.dataflow.collections.columnar_top_k import ColumnarTopKCollection
from engine.dataflow.collections.columnar_top_k import supports as supports_columnar_top_k
from engine.dataflow.collections.constant import ConstantCollection
from engine.dataflow.collections.cross_join import CrossJoinCollection
from engine.dataflow.collections.distinct import DistinctCollection
from engine.dataflow.collections.filter import FilterCollection
from engine.dataflow.collections.join import InnerJoinCollection
from engine.dataflow.collections.map import MapCollection
from engine.dataflow.collections.outer_join import OuterJoinCollection
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.collections.semi_join import SemiJoinCollection
from engine.dataflow.collections.set_operation import SetOperationCollection
from engine.dataflow.collections.top_k import TopKCollection
from engine.dataflow.collections.union import UnionCollection
from engine.dataflow.collections.window import WindowCollection
from engine.dataflow.columnar.arrow_types import arrow_type
from engine.dataflow.errs import BatchFn
from engine.dataflow.graph import Dataflow, Node
from engine.dataflow.state.store import StateStore
from engine.dataflow.window_functions import WindowFunction
from engine.errors import UnsupportedSQL
from engine.sql import logical_plan as lp
from engine.sql.aggregate_value_types import aggregate_arrow_types
from engine.sql.calls import window_call
from engine.sql.expression_compiler import compile_expressions, compile_predicate
from engine.sql.logical_plan import Field, LogicalPlan, column_index
from engine.sql.numeric_scale import value_scale
from engine.sql.parse import unsupported
from engine.sql.plan_expressions import and_all, conjuncts
from engine.sql.population_aggregate import aggregate_query
from engine.sql.reduce_inputs import column_refs, field_type, reduce_inputs
from engine.sql.types import SqlType, TypeKind
from engine.sql.unique_rows import keys_relied_on, unique_rows
from engine.sql.vector_expressions import (
    ExtendColumns,
    SelectColumns,
    vectorize_expressions,
    vectorize_predicate,
)


@dataclass
class PhysicalPlan:
    dataflow: Dataflow
    #: dataflow input name ("schema.table") -> the table's column names each input row carries
    inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    output_fields: tuple[Field, ...] = ()
    #: the Postgres TimeZone an expression of the plan depends on (None: none does)
    time_zone: str | None = None
    #: "schema.table" -> the unique keys (column names) a collection's plan relies on
    #: (``engine.sql.unique_rows``): the view must stop if one is dropped
    unique_keys: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)

    def explain(self) -> str:
        """The dataflow, after a ``TimeZone:`` line when an expression depends on the zone (the
        view's state fingerprint covers this text: ``engine.plan_lock``)."""
        text = self.dataflow.explain()
        return f"TimeZone: {self.time_zone}\n{text}" if self.time_zone else text


def plan_physical(plan: LogicalPlan, store: StateStore | None) -> PhysicalPlan:
    """Build (and open on ``store``) the dataflow computing ``plan``."""
    planner = _PhysicalPlanner(store)
    planner.collect_inputs(plan)
    out = planner.node(plan)
    planner.df.build(out)
    return PhysicalPlan(
        planner.df,
        {k: tuple(v) for k, v in planner.input_columns.items()},
        plan.fields,
        unique_keys=planner.unique_keys,
    )


def value_arrow_types(plan: LogicalPlan) -> list[pa.DataType | None]:
    """Per output column of ``plan``, the Arrow type holding its values exactly and in the one
    representation each value has (``arrow_type``), None where there is none. A numeric needs
    its scale fixed: a declared numeric(p, s) column, or a projected expression whose scale
    ``value_scale`` derives (a projected numeric of any other scale gets None)."""
    fields = plan.fields
    if isinstance(plan, lp.Aggregate):
        return aggregate_arrow_types(plan, value_arrow_types(plan.input))
    if isinstance(plan, (lp.Filter, lp.SubqueryAlias, lp.Distinct)):
        return value_arrow_types(plan.input)
    if isinstance(plan, lp.Join):
        left = value_arrow_types(plan.left)
        if plan.kind in lp.SEMI_KINDS:
            return left
        return left + value_arrow_types(plan.right)
    if not isinstance(plan, lp.Project):
        return [arrow_type(f.type) if isinstance(f.type, SqlType) else None for f in fields]
    inner = plan.input.fields
    inner_types = value_arrow_types(plan.input)
    out: list[pa.DataType | None] = []
    for e, f in zip(plan.exprs, fields, strict=True):
        t = f.type
        if not isinstance(t, SqlType):
            out.append(None)
            continue
        i = column_index(e, inner)
        if i is not None and inner[i].type == t and inner_types[i] is not None:
            out.append(inner_types[i])  # a column passed through: its values' type
            continue
        if t.kind is not TypeKind.NUMERIC:
            out.append(arrow_type(t))
            continue
        scale = value_scale(e, lambda c: field_type(c, inner))
        declared = (t.scale or 0) if t.precision is not None else scale
        out.append(arrow_type(t, scale) if scale is not None and scale == declared else None)
    return out


def _same_arrow_type(a: pa.DataType | None, b: pa.DataType | None) -> pa.DataType | None:
    """The Arrow type of a UNION column whose branches have types ``a`` and ``b`` (None unless
    every value of both has one representation in it: equal types, or numerics of one scale)."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    if pa.types.is_decimal(a) and pa.types.is_decimal(b) and a.scale == b.scale:
        return pa.decimal128(max(a.precision, b.precision), a.scale)
    return None


def _computed_arrow_types(
    exprs: list[exp.Expression], fields: tuple[Field, ...]
) -> list[pa.DataType | None]:
    """The Arrow types of the expressions ``with_columns`` appends as columns (those that are
    not plain columns), in its order: a numeric needs a scale ``value_scale`` derives."""
    extra = [e for e in exprs if column_index(e, fields) is None]
    if not extra:
        return []
    types = compile_expressions(extra, column_refs(fields)).types
    return [
        arrow_type(t, value_scale(e, lambda c: field_type(c, fields)))
        if isinstance(t, SqlType)
        else None
        for e, t in zip(extra, types, strict=True)
    ]


def _distinct(types: list[pa.DataType | None]) -> DistinctCollection | ColumnarDistinctCollection:
    """The columnar distinct where every column has an exact Arrow type, else the row one."""
    if supports_columnar_distinct(types):
        return ColumnarDistinctCollection(types)
    return DistinctCollection()


def _inner_join(
    plan: lp.Join,
    lpos: list[int],
    rpos: list[int],
    computed_keys: int,
    residual: BatchFn | None,
    desc: str,
) -> InnerJoinCollection | ColumnarInnerJoinCollection:
    """The columnar inner join where both inputs' columns have exact Arrow types and the key
    columns are plain columns of comparable types, else the row one."""
    if not computed_keys:
        lt, rt = value_arrow_types(plan.left), value_arrow_types(plan.right)
        if supports_columnar_join(lt, rt, lpos, rpos):
            return ColumnarInnerJoinCollection(lpos, rpos, lt, rt, residual, desc)
    return InnerJoinCollection(lpos, rpos, residual, desc)


def _outer_join(
    plan: lp.Join,
    lpos: list[int],
    rpos: list[int],
    widths: tuple[int, int],
    computed_keys: int,
    residual: BatchFn | None,
    desc: str,
) -> OuterJoinCollection | ColumnarOuterJoinCollection:
    """The columnar outer join where the inner one would be columnar and no residual makes a
    match depend on the pair, else the row one."""
    if not computed_keys and residual is None:
        lt, rt = value_arrow_types(plan.left), value_arrow_types(plan.right)
        if supports_columnar_join(lt, rt, lpos, rpos):
            return ColumnarOuterJoinCollection(plan.kind, lpos, rpos, lt, rt, desc)
    return OuterJoinCollection(plan.kind, lpos, rpos, *widths, residual, desc)


class _PhysicalPlanner:
    def __init__(self, store: StateStore | None) -> None:
        self.df = Dataflow(store)
        self.input_columns: dict[str, list[str]] = {}
        self.memo: dict[int, Node] = {}
        self.unique_keys: dict[str, list[tuple[str, ...]]] = {}

    def rely_on_unique_rows(self, plan: LogicalPlan) -> bool:
        """Whether ``plan`` never holds a row twice; if so, its tables' keys are recorded as
        relied on (``PhysicalPlan.unique_keys``)."""
        if not unique_rows(plan):
            return False
        for table, keys in keys_relied_on(plan).items():
            known = self.unique_keys.setdefault(table, [])
            known += [k for k in keys if k not in known]
        return True

    # -- sources --------------------------------------------------------------------------------
    def collect_inputs(self, plan: LogicalPlan) -> None:
        for node in plan.walk():
            if isinstance(node, lp.Scan):
                cols = self.input_columns.setdefault(f"{node.schema}.{node.table}", [])
                for f in node.fields:
                    if f.name not in cols:
                        cols.append(f.name)
        for name, cols in self.input_columns.items():  # keep the table's column order
            schema, _, table = name.partition(".")
            for node in plan.walk():
                if isinstance(node, lp.Scan) and (node.schema, node.table) == (schema, table):
                    order = [f.name for f in node.table_fields]
                    cols.sort(key=order.index)
                    break

    # -- dispatch -------------------------------------------------------------------------------
    def node(self, plan: LogicalPlan) -> Node:
        key = id(plan)
        if key not in self.memo:
            method = getattr(self, "p_" + type(plan).__name__)
            self.memo[key] = method(plan)
        return self.memo[key]

    def map(
        self, up: Node, exprs: list[exp.Expression], fields: tuple[Field, ...], what: str
    ) -> Node:
        refs = column_refs(fields)
        compiled = compile_expressions(exprs, refs)
        vector = vectorize_expressions(exprs, refs)
        return self.df.add(MapCollection(compiled.fn, what, *vector), up)

    def keep(self, up: Node, n: int, what: str = "drop helper columns") -> Node:
        vector = SelectColumns(range(n))
        if n == 1:
            fn = lambda rows: [(r[0],) for r in rows]  # noqa: E731
        else:
            fn = lambda rows: [r[:n] for r in rows]  # noqa: E731
        return self.df.add(MapCollection(fn, what, vector), up)

    @staticmethod
    def require_order(fields: tuple[Field, ...], keys, what: str) -> None:
        """Refuse ORDER BY keys whose type incview cannot order as Postgres does (jsonb, inet,
        enums, arrays: ``SqlType.ordered``)."""
        if not keys:
            return
        exprs = [k.expr for k in keys]
        for e, t in zip(exprs, compile_expressions(exprs, column_refs(fields)).types, strict=True):
            if not t.ordered:
                raise UnsupportedSQL(
                    f"ORDER BY {e.sql(dialect='postgres')} in {what}: incview cannot order "
                    f"{t} values as Postgres does (order by a column of another type, or by "
                    f"its text if that order is meant: {e.sql(dialect='postgres')}::text)"
                )

    def with_columns(
        self, up: Node, fields: tuple[Field, ...], exprs: list[exp.Expression], what: str
    ):
        """Positions of ``exprs`` in the rows of ``up``, appending computed columns where needed.

        Returns (node, positions, number of appended columns)."""
        positions: list[int] = []
        extra: list[exp.Expression] = []
        for e in exprs:
            i = column_index(e, fields)
            if i is None:
                positions.append(len(fields) + len(extra))
                extra.append(e)
            else:
                positions.append(i)
        if not extra:
            return up, positions, 0
        extra_fn = compile_expressions(extra, column_refs(fields)).fn
        fn = lambda rows: [r + x for r, x in zip(rows, extra_fn(rows), strict=True)]  # noqa: E731
        program, per_row = vectorize_expressions(extra, column_refs(fields))
        vector = ExtendColumns(program) if program is not None else None
        return self.df.add(MapCollection(fn, what, vector, per_row), up), positions, len(extra)

    # -- leaves ---------------------------------------------------------------------------------
    def p_Scan(self, plan: lp.Scan) -> Node:
        name = f"{plan.schema}.{plan.table}"
        node = self.df.input(name)
        cols = self.input_columns[name]
        wanted = [f.name for f in plan.fields]
        if wanted == cols:
            return node
        idx = [cols.index(c) for c in wanted]
        if len(idx) == 1:
            (i,) = idx
            fn = lambda rows: [(r[i],) for r in rows]  # noqa: E731
        else:
            fn = lambda rows: [tuple(r[j] for j in idx) for r in rows]  # noqa: E731
        what = f"columns {wanted} of {name}"
        return self.df.add(MapCollection(fn, what, SelectColumns(idx)), node)

    def p_Values(self, plan: lp.Values) -> Node:
        return self.df.add(ConstantCollection(list(plan.rows)))

    def p_SubqueryAlias(self, plan: lp.SubqueryAlias) -> Node:
        return self.node(plan.input)

    # -- stateless ------------------------------------------------------------------------------
    def p_Filter(self, plan: lp.Filter) -> Node:
        up = self.node(plan.input)
        refs = column_refs(plan.input.fields)
        fn, _ = compile_predicate(plan.predicate, refs)
        vector = vectorize_predicate(plan.predicate, refs)
        what = plan.predicate.sql(dialect="postgres")
        return self.df.add(FilterCollection(fn, what, *vector), up)

    def p_Project(self, plan: lp.Project) -> Node:
        up = self.node(plan.input)
        if all(column_index(e, plan.input.fields) == i for i, e in enumerate(plan.exprs)) and len(
            plan.exprs
        ) == len(plan.input.fields):
            return up  # identity projection
        desc = ", ".join(e.sql(dialect="postgres") for e in plan.exprs)
        return self.map(up, list(plan.exprs), plan.input.fields, desc)

    # -- joins ----------------------------------------------------------------------------------
    def p_Join(self, plan: lp.Join) -> Node:
        lf, rf = plan.left.fields, plan.right.fields
        left, right = self.node(plan.left), self.node(plan.right)
        lkeys, rkeys, rest = [], [], []
        for c in conjuncts(plan.condition):
            pair = _equi_pair(c, lf, rf)
            if pair is None:
                rest.append(c)
            else:
                lkeys.append(pair[0])
                rkeys.append(pair[1])
        if plan.kind == "anti_null_aware" and len(lkeys) != 1:
            raise unsupported(
                plan.condition, "NOT IN needs a single-column equality with the subquery"
            )
        left, lpos, lext = self.with_columns(left, lf, lkeys, "join keys")
        right, rpos, rext = self.with_columns(right, rf, rkeys, "join keys")
        lwidth = len(lf) + lext  # only keys that are not plain columns were appended
        rwidth = len(rf) + rext
        # residual over the concatenated row (with helper columns, if any, at each side's end)
        residual = None
        if rest:
            fields = (
                lf
                + _helper_fields(lwidth - len(lf), "__lk")
                + rf
                + _helper_fields(rwidth - len(rf), "__rk")
            )
            residual, _ = compile_predicate(and_all(rest), column_refs(fields))
        desc = plan.label()
        kind = plan.kind
        if kind == "inner":
            node = self.df.add(
                (
                    _inner_join(plan, lpos, rpos, lext or rext, residual, desc)
                    if lpos
                    else CrossJoinCollection(residual, desc)
                ),
                left,
                right,
            )
        elif kind == "cross":
            node = self.df.add(CrossJoinCollection(residual, desc), left, right)
        elif kind in ("left", "right", "full"):
            node = self.df.add(
                _outer_join(plan, lpos, rpos, (lwidth, rwidth), lext or rext, residual, desc),
                left,
                right,
            )
        elif kind == "semi":
            node = self._semi_join(plan, left, right, lpos, rpos, lext or rext, residual, desc)
        elif kind == "anti":
            node = self.df.add(AntiJoinCollection(lpos, rpos, residual, False, desc), left, right)
        else:  # anti_null_aware
            node = self.df.add(AntiJoinCollection(lpos, rpos, None, True, desc), left, right)
        if kind in lp.SEMI_KINDS:
            return self.keep(node, len(lf)) if lext else node
        if not lext and not rext:
            return node
        keep = list(range(len(lf))) + [lwidth + i for i in range(len(rf))]
        fn = lambda rows: [tuple(r[i] for i in keep) for r in rows]  # noqa: E731
        return self.df.add(MapCollection(fn, "drop join keys", SelectColumns(keep)), node)

    def _semi_join(
        self,
        plan: lp.Join,
        left: Node,
        right: Node,
        lpos: list[int],
        rpos: list[int],
        computed_keys: int,
        residual: BatchFn | None,
        desc: str,
    ) -> Node:
        """The columnar semi join over the right's key columns where the types allow and no
        residual makes a match depend on the pair, else the row one."""
        if lpos and not computed_keys and residual is None:
            lt, rt = value_arrow_types(plan.left), value_arrow_types(plan.right)
            keys = [rt[i] for i in rpos]
            own = list(range(len(rpos)))
            if supports_columnar_join(lt, keys, lpos, own):
                vector = SelectColumns(rpos)
                fn = lambda rows: [tuple(r[i] for i in rpos) for r in rows]  # noqa: E731
                right = self.df.add(MapCollection(fn, "semi join keys", vector), right)
                join = ColumnarSemiJoinCollection(lpos, own, lt, keys, None, desc)
                return self.df.add(join, left, right)
        return self.df.add(SemiJoinCollection(lpos, rpos, residual, desc), left, right)

    # -- aggregation ----------------------------------------------------------------------------
    def p_Aggregate(self, plan: lp.Aggregate) -> Node:
        fields = plan.input.fields
        up = self.node(plan.input)
        inputs = reduce_inputs(plan)
        for call in inputs.calls:
            self.require_order(fields, call.order_by, f"aggregate {call.kind}")
        group = list(range(inputs.groups))
        if not inputs.columns:
            return self.df.add(ReduceCollection(group, inputs.specs), up)
        vector = vectorize_expressions(inputs.columns, column_refs(fields))
        what = "group keys and aggregate arguments"
        up = self.df.add(MapCollection(inputs.compiled.fn, what, *vector), up)
        if inputs.columnar:
            reduce = ColumnarReduceCollection(group, inputs.specs, inputs.arrow)
            reduce.population_query = aggregate_query(
                plan, inputs.columns, inputs.specs, inputs.groups
            )
            return self.df.add(reduce, up)
        return self.df.add(ReduceCollection(group, inputs.specs), up)

    def p_Distinct(self, plan: lp.Distinct) -> Node:
        if self.rely_on_unique_rows(plan.input):  # no row twice: DISTINCT changes nothing
            return self.node(plan.input)
        return self.df.add(_distinct(value_arrow_types(plan.input)), self.node(plan.input))

    def p_SetOperation(self, plan: lp.SetOperation) -> Node:
        left, right = self.node(plan.left), self.node(plan.right)
        if plan.kind == "union_all":
            return self.df.add(UnionCollection(2), left, right)
        if plan.kind == "union":
            types = [
                _same_arrow_type(lt, rt)
                for lt, rt in zip(
                    value_arrow_types(plan.left), value_arrow_types(plan.right), strict=True
                )
            ]
            return self.df.add(_distinct(types), self.df.add(UnionCollection(2), left, right))
        return self.df.add(SetOperationCollection(plan.kind), left, right)

    # -- ordering -------------------------------------------------------------------------------
    def p_TopK(self, plan: lp.TopK) -> Node:
        fields = plan.input.fields
        up = self.node(plan.input)
        self.require_order(fields, plan.order_by, "ORDER BY ... LIMIT")
        exprs = list(plan.partition_by) + [k.expr for k in plan.order_by]
        types = value_arrow_types(plan.input) + _computed_arrow_types(exprs, fields)
        up, pos, ext = self.with_columns(up, fields, exprs, "top-k keys")
        np_ = len(plan.partition_by)
        spec = (
            pos[:np_],
            pos[np_:],
            [k.descending for k in plan.order_by],
            [k.nulls_first for k in plan.order_by],
        )
        emit_rank = plan.rank_field is not None
        if supports_columnar_top_k(types, plan.rank_kind, plan.limit):
            assert plan.limit is not None
            top: TopKCollection | ColumnarTopKCollection = ColumnarTopKCollection(
                types,
                *spec,
                limit=plan.limit,
                offset=plan.offset,
                emit_rank=emit_rank,
                unique_rows=self.rely_on_unique_rows(plan.input),
            )
        else:
            top = TopKCollection(*spec, plan.limit, plan.offset, plan.rank_kind, emit_rank)
        node = self.df.add(top, up)
        if not ext:
            return node
        n = len(fields)
        if plan.rank_field is None:
            return self.keep(node, n)
        fn = lambda rows: [r[:n] + (r[-1],) for r in rows]  # noqa: E731
        vector = SelectColumns([*range(n), -1])
        return self.df.add(MapCollection(fn, "drop top-k keys", vector), node)

    def p_Window(self, plan: lp.Window) -> Node:
        fields = plan.input.fields
        up = self.node(plan.input)
        calls = [window_call(w) for w in plan.functions]
        self.require_order(fields, plan.order_by, "a window")
        exprs = list(plan.partition_by) + [k.expr for k in plan.order_by]
        exprs += [c.arg for c in calls if c.arg is not None]
        up, pos, ext = self.with_columns(up, fields, exprs, "window keys and arguments")
        np_, no = len(plan.partition_by), len(plan.order_by)
        funcs = []
        arg_pos = iter(pos[np_ + no :])
        for c in calls:
            default = None
            if c.default is not None:
                if not isinstance(c.default, (exp.Literal, exp.Null, exp.Neg)):
                    raise unsupported(c.default, "lag/lead defaults must be constants")
                # Postgres coerces the default to the argument's type: lead(amount, 1, 0) is numeric
                arg_type = compile_expressions([c.arg], column_refs(fields)).types[0]
                typed = exp.Cast(this=c.default.copy(), to=exp.DataType.build(arg_type.sql()))
                default = compile_expressions([typed], []).fn([()])[0][0]
            funcs.append(
                WindowFunction(
                    c.kind, next(arg_pos) if c.arg is not None else None, c.offset, default, c.frame
                )
            )
        node = self.df.add(
            WindowCollection(
                pos[:np_],
                pos[np_ : np_ + no],
                [k.descending for k in plan.order_by],
                [k.nulls_first for k in plan.order_by],
                funcs,
            ),
            up,
        )
        if not ext:
            return node
        n, nf = len(fields), len(funcs)
        fn = lambda rows: [r[:n] + r[len(r) - nf :] for r in rows]  # noqa: E731
        vector = SelectColumns([*range(n), *range(-nf, 0)])
        return self.df.add(MapCollection(fn, "drop window keys", vector), node)


def _helper_fields(n: int, qualifier: str) -> tuple[Field, ...]:
    from engine.sql.types import UNKNOWN

    return tuple(Field(qualifier, f"k{i}", UNKNOWN) for i in range(n))


def _side(e: exp.Expression, fields: tuple[Field, ...]) -> bool:
    """True if every column ``e`` references is one of ``fields`` (and it references one)."""
    cols = list(e.find_all(exp.Column))
    if not cols:
        return False
    names = {(f.qualifier, f.name) for f in fields}
    return all((c.table or None, c.name) in names for c in cols)


def _equi_pair(c: exp.Expression, lf, rf) -> tuple[exp.Expression, exp.Expression] | None:
    if not isinstance(c, exp.EQ):
        return None
    a, b = c.left, c.right
    if _side(a, lf) and _side(b, rf):
        return _bpchar_keys(a, lf, b, rf)
    if _side(b, lf) and _side(a, rf):
        return _bpchar_keys(b, lf, a, rf)
    return None


def _column_kind(e: exp.Expression, fields: tuple[Field, ...]):
    if isinstance(e, exp.Column):
        for f in fields:
            if (f.qualifier, f.name) == (e.table or None, e.name):
                return getattr(f.type, "kind", None)
    return None


def _bpchar_keys(a, af, b, bf) -> tuple[exp.Expression, exp.Expression]:
    """character(n) = varchar compares without trailing blanks (Postgres' bpchar operator):
    character(n) values arrive unpadded, so the varchar key loses its trailing blanks."""
    from engine.sql.types import TypeKind

    kinds = (_column_kind(a, af), _column_kind(b, bf))
    if kinds == (TypeKind.CHAR, TypeKind.VARCHAR):
        return a, exp.func("rtrim", b.copy())
    if kinds == (TypeKind.VARCHAR, TypeKind.CHAR):
        return exp.func("rtrim", a.copy()), b
    return a, b
