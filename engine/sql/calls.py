"""Aggregate and window function calls, recognized from sqlglot nodes into small descriptors.

``aggregate_call`` understands count(*), count(x), count(DISTINCT x), sum, avg, min, max,
bool_and/every, bool_or, string_agg(x, sep [ORDER BY ...]), array_agg(x [ORDER BY ...]),
stddev/stddev_samp/stddev_pop,
variance/var_samp/var_pop and FILTER (WHERE ...);
``window_call`` understands row_number, rank, dense_rank, lag, lead and sum/count/avg/min/max
OVER (PARTITION BY ... ORDER BY ...) with the default frame. Anything else raises
``UnsupportedSQL`` with its position. Shared by the plan builder and the physical planner; this
module must not build plans.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sqlglot import exp

from engine.dataflow.window_functions import FRAMED, Frame
from engine.sql.logical_plan import SortKey
from engine.sql.parse import unsupported

# one-argument aggregates: sqlglot's node -> incview's kind
SIMPLE_AGGREGATES = {
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
    exp.StddevPop: "stddev_pop",
    exp.Variance: "var_samp",
    exp.VariancePop: "var_pop",
}
AGGREGATE_NODES = (exp.Count, exp.GroupConcat, exp.ArrayAgg, *SIMPLE_AGGREGATES)
AGGREGATE_NAMES = {
    "every": "bool_and",
    "bool_and": "bool_and",
    "bool_or": "bool_or",
    "string_agg": "string_agg",
}
_UNSUPPORTED_AGGS = {
    "json_agg": "json results are not supported",
    "jsonb_agg": "json results are not supported",
    "percentile_cont": "ordered-set aggregates are not supported",
    "percentile_disc": "ordered-set aggregates are not supported",
    "mode": "ordered-set aggregates are not supported",
}


def is_aggregate(node: exp.Expression) -> bool:
    if isinstance(node, exp.Filter):
        return is_aggregate(node.this)
    if isinstance(node, AGGREGATE_NODES):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in AGGREGATE_NAMES


def find_aggregates(e: exp.Expression) -> list[exp.Expression]:
    """Aggregate calls in ``e`` (FILTER wrapper included), outside subqueries; inside a window
    only those in its arguments, PARTITION BY and ORDER BY (not the window function itself)."""
    found: list[exp.Expression] = []

    def visit(n: exp.Expression) -> None:
        if isinstance(n, exp.Window):
            # the window function itself runs after grouping, but its arguments, PARTITION BY
            # and ORDER BY may use aggregates: rank() OVER (ORDER BY sum(x))
            for child in n.this.iter_expressions():
                visit(child)
            for p in n.args.get("partition_by") or ():
                visit(p)
            if n.args.get("order") is not None:
                visit(n.args["order"])
            return
        if isinstance(n, (exp.Subquery, exp.Select, exp.Grouping)):
            return  # (GROUPING is answered by the grouping sets: engine.sql.grouping_sets)
        if is_aggregate(n):
            found.append(n)
            return
        if isinstance(n, exp.Anonymous) and n.name.lower() in _UNSUPPORTED_AGGS:
            raise unsupported(n, f"aggregate {n.name.lower()}: {_UNSUPPORTED_AGGS[n.name.lower()]}")
        if isinstance(n, exp.AggFunc):  # a sqlglot aggregate class we do not maintain
            name = n.sql_name().lower()
            why = _UNSUPPORTED_AGGS.get(name, "it is not supported")
            raise unsupported(n, f"aggregate {name}: {why}")
        for child in n.iter_expressions():
            visit(child)

    visit(e)
    return found


@dataclass(frozen=True)
class AggregateCall:
    kind: str  # count_star count count_distinct sum avg min max bool_and bool_or string_agg
    arg: exp.Expression | None = None
    filter: exp.Expression | None = None
    separator: str | None = ","  # None: array_agg
    order_by: tuple[SortKey, ...] = ()


def sort_keys(order: exp.Order | None) -> tuple[SortKey, ...]:
    if order is None:
        return ()
    keys = []
    for o in order.expressions:
        desc = bool(o.args.get("desc"))
        nf = o.args.get("nulls_first")
        keys.append(SortKey(o.this, desc, None if nf is None else bool(nf)))
    return tuple(keys)


def aggregate_call(node: exp.Expression) -> AggregateCall:
    filt = None
    if isinstance(node, exp.Filter):
        filt = node.expression.this if isinstance(node.expression, exp.Where) else node.expression
        node = node.this
    if isinstance(node, exp.Count):
        arg = node.this
        if arg is None or isinstance(arg, exp.Star):
            return AggregateCall("count_star", None, filt)
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise unsupported(node, "count(DISTINCT) of several expressions")
            return AggregateCall("count_distinct", arg.expressions[0], filt)
        return AggregateCall("count", arg, filt)
    for cls, kind in SIMPLE_AGGREGATES.items():
        if type(node) is cls:
            if isinstance(node.this, exp.Distinct):
                raise unsupported(
                    node,
                    f"{kind}(DISTINCT ...) is not supported",
                    f"Use {kind} over a DISTINCT subquery",
                )
            return AggregateCall(kind, node.this, filt)
    if isinstance(node, exp.GroupConcat):
        arg, order = _ordered_argument(node, "string_agg")
        sep = node.args.get("separator")
        if sep is not None and not (isinstance(sep, exp.Literal) and sep.is_string):
            raise unsupported(sep, "string_agg's separator must be a string constant")
        return AggregateCall(
            "string_agg", arg, filt, sep.this if sep is not None else ",", sort_keys(order)
        )
    if isinstance(node, exp.ArrayAgg):
        arg, order = _ordered_argument(node, "array_agg")
        return AggregateCall("array_agg", arg, filt, None, sort_keys(order))
    if isinstance(node, exp.Anonymous) and node.name.lower() in AGGREGATE_NAMES:
        kind = AGGREGATE_NAMES[node.name.lower()]
        if kind == "string_agg":
            raise unsupported(node, "string_agg needs a separator")
        (arg,) = node.expressions
        return AggregateCall(kind, arg, filt)
    raise unsupported(node, "unsupported aggregate")


def _ordered_argument(node: exp.Expression, kind: str) -> tuple[exp.Expression, exp.Order | None]:
    """The argument of string_agg/array_agg and its ORDER BY; DISTINCT refused."""
    arg, order = node.this, None
    if isinstance(arg, exp.Order):
        arg, order = arg.this, arg
    if isinstance(arg, exp.Distinct):
        raise unsupported(node, f"{kind}(DISTINCT ...) is not supported")
    return arg, order


@dataclass(frozen=True)
class WindowCall:
    # row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value
    # nth_value sum count count_star avg min max
    kind: str
    arg: exp.Expression | None
    offset: int = 1
    default: exp.Expression | None = None
    partition_by: tuple[exp.Expression, ...] = ()
    order_by: tuple[SortKey, ...] = ()
    frame: Frame | None = None  # per function: calls of one window may differ

    @property
    def spec(self) -> tuple[str, ...]:
        """Calls with equal specs share one window operator."""
        return (
            tuple(e.sql() for e in self.partition_by)
            + ("|",)
            + tuple(k.sql() for k in self.order_by)
        )


_DEFAULT_FRAME = Frame("groups", "unbounded", 0, "current", 0)


def _bound(spec: exp.WindowSpec, which: str) -> tuple[str, int]:
    value, side = spec.args.get(which), (spec.args.get(f"{which}_side") or "").lower()
    if value is None:  # "ROWS 3 PRECEDING": the end is the current row
        return "current", 0
    if isinstance(value, str):
        if value.upper() == "CURRENT ROW":
            return "current", 0
        if value.upper() == "UNBOUNDED":
            if (which == "start") != (side == "preceding"):
                raise unsupported(spec, f"frame {which} cannot be UNBOUNDED {side.upper()}", None)
            return "unbounded", 0
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return side, int(value.this)
    raise unsupported(spec, "a frame offset must be a non-negative integer constant")


def window_frame(spec: exp.WindowSpec | None, node: exp.Expression) -> Frame | None:
    """The frame clause of a window, or None for the default frame (RANGE UNBOUNDED PRECEDING,
    without ORDER BY the whole partition). ROWS and GROUPS take any bounds; RANGE only
    UNBOUNDED and CURRENT ROW (an offset needs arithmetic on the ORDER BY value)."""
    if spec is None or not spec.args.get("kind"):
        return None
    if spec.args.get("exclude") is not None:
        raise unsupported(spec, "a frame EXCLUDE clause is not supported")
    mode = spec.args["kind"].lower()
    (start, start_n), (end, end_n) = _bound(spec, "start"), _bound(spec, "end")
    if mode == "range":
        if (
            start_n
            or end_n
            or start in ("preceding", "following")
            or end
            in (
                "preceding",
                "following",
            )
        ):
            raise unsupported(
                spec,
                "RANGE frames with an offset are not supported",
                "Use ROWS or GROUPS, or UNBOUNDED/CURRENT ROW bounds",
            )
        mode = "groups"
    order = ("preceding", "current", "following")
    if start in order and end in order and order.index(start) > order.index(end):
        raise unsupported(spec, "the frame cannot end before it starts")
    frame = Frame(mode, start, start_n, end, end_n)
    return None if frame == _DEFAULT_FRAME else frame


def window_call(node: exp.Window) -> WindowCall:
    call = _window_call(node)
    frame = window_frame(node.args.get("spec"), node)
    if frame is None or call.kind not in FRAMED:  # ranking, lag/lead: Postgres ignores it
        return call
    whole = frame.start == "unbounded" and frame.end == "unbounded"
    if frame.mode == "rows" and not call.order_by and not whole:
        raise unsupported(
            node,
            "a ROWS frame without ORDER BY depends on the order rows happen to be read in",
            "Add an ORDER BY that makes the order unique",
        )
    return dataclasses.replace(call, frame=frame)


def _window_call(node: exp.Window) -> WindowCall:
    if node.args.get("alias"):
        raise unsupported(
            node, "named windows (WINDOW w AS ...) are not supported", "Inline the window"
        )
    partition = tuple(node.args.get("partition_by") or ())
    order = sort_keys(node.args.get("order"))
    f = node.this
    ranking = {exp.RowNumber: "row_number"}
    for cls, kind in ranking.items():
        if type(f) is cls:
            return WindowCall(kind, None, partition_by=partition, order_by=order)
    name = type(f).__name__.lower()
    if isinstance(f, exp.Anonymous):
        name = f.name.lower()
    if name in ("rank", "denserank", "dense_rank"):
        return WindowCall(
            "dense_rank" if "dense" in name else "rank",
            None,
            partition_by=partition,
            order_by=order,
        )
    if isinstance(f, (exp.PercentRank, exp.CumeDist)):
        kind = "percent_rank" if isinstance(f, exp.PercentRank) else "cume_dist"
        return WindowCall(kind, None, partition_by=partition, order_by=order)
    if isinstance(f, exp.Ntile):
        return WindowCall(
            "ntile", None, _positive_constant(f.this, "ntile"), None, partition, order
        )
    if isinstance(f, (exp.FirstValue, exp.LastValue, exp.NthValue)):
        kind = {exp.FirstValue: "first_value", exp.LastValue: "last_value"}.get(
            type(f), "nth_value"
        )
        position = _positive_constant(f.args["offset"], kind) if kind == "nth_value" else 1
        return WindowCall(kind, f.this, position, None, partition, order)
    if isinstance(f, (exp.Lag, exp.Lead)):
        off = f.args.get("offset")
        if off is not None and not (isinstance(off, exp.Literal) and not off.is_string):
            raise unsupported(off, "lag/lead offsets must be integer constants")
        return WindowCall(
            "lag" if isinstance(f, exp.Lag) else "lead",
            f.this,
            int(off.this) if off is not None else 1,
            f.args.get("default"),
            partition,
            order,
        )
    if is_aggregate(f) and not isinstance(f, exp.Filter):
        call = aggregate_call(f)
        if call.kind in ("sum", "count", "count_star", "avg", "min", "max"):
            return WindowCall(call.kind, call.arg, partition_by=partition, order_by=order)
    raise unsupported(node, f"window function {f.sql(dialect='postgres')} is not supported")


def _positive_constant(node: exp.Expression | None, function: str) -> int:
    """ntile's bucket count or nth_value's position: a positive integer constant."""
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        if int(node.this) > 0:
            return int(node.this)
        raise unsupported(node, f"argument of {function} must be greater than zero")
    raise unsupported(
        node if node is not None else exp.Null(),
        f"the argument of {function} must be an integer constant",
        "Postgres allows an expression; incview needs it fixed when the view is created",
    )
