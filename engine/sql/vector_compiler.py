"""Translate a sqlglot expression into a tree of vectorized kernels, or refuse it.

``VectorCompiler(columns).compile(node)`` returns a ``VNode`` (``engine.sql.vector_nodes``): a
function of one batch's input columns giving a ``Vec``, and the SQL type of its values; or None
when some part of the expression has no exact kernel (the expression then runs per row). Every
typing decision is the row compiler's (``ExpressionTypes``: result types, folded constants, the
implicit conversions of operands); this module only picks the kernel (``vector_kernels``,
``vector_casts``) that computes the same values: here leaves, logic, comparisons, IN, CASE,
COALESCE and NULLIF; operators and casts in ``vector_operators``. It must not evaluate rows.
"""

from __future__ import annotations

from sqlglot import exp

from engine.dataflow.columnar import number_kernels as N
from engine.dataflow.columnar import vector_kernels as K
from engine.dataflow.columnar.vectors import Kind, NeedsRows, Vec, constant, python_constant
from engine.errors import UnsupportedSQL
from engine.sql.expression_compiler import (
    ColumnRef,
    ExpressionTypes,
    Typed,
    flatten_connective,
)
from engine.sql.types import BOOLEAN as BOOL
from engine.sql.types import SqlType as T
from engine.sql.types import TypeKind
from engine.sql.vector_casts import cast_kernel, kind_of
from engine.sql.vector_nodes import Inputs, VNode
from engine.sql.vector_operators import OperatorRules

_CMP = {exp.EQ: "==", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}


def _numbers(a: Vec, b: Vec) -> tuple[Vec, Vec]:
    """Two values of the numeric category made comparable exactly (int/numeric at one scale, or
    as the sign of their difference where one scale does not fit 64 bits; an int beside a float
    as a float where exact), as Python compares them in the row path."""
    if a.kind is b.kind and a.kind is not Kind.NUMERIC:
        return a, b
    kinds = {a.kind, b.kind}
    if kinds <= {Kind.INT, Kind.NUMERIC}:
        try:
            return N.align_numeric(a, b)
        except NeedsRows:  # a value past 64 bits at the common scale
            return N.order_signs(a, b)
    if kinds == {Kind.INT, Kind.FLOAT}:
        a = N.int_to_float(a, exact=True) if a.kind is Kind.INT else a
        b = N.int_to_float(b, exact=True) if b.kind is Kind.INT else b
        return a, b
    raise TypeError(f"cannot compare {a.kind} with {b.kind}")


def _comparable(a: Kind | None, b: Kind | None) -> bool:
    if a is None or b is None:
        return False
    numbers = {Kind.INT, Kind.NUMERIC, Kind.FLOAT}
    return a is b or ({a, b} <= numbers and {a, b} != {Kind.NUMERIC, Kind.FLOAT})


class VectorCompiler(OperatorRules):
    """Compiles expressions over input rows shaped like ``columns`` (``ColumnRef``s)."""

    def __init__(self, columns: list[ColumnRef]) -> None:
        self.columns = columns
        self.types = ExpressionTypes(columns)
        self.kinds: dict[int, Kind] = {}  # input column -> the kind it is read as

    def compile(self, node: exp.Expression) -> VNode | None:
        try:
            return self._compile(node)
        except UnsupportedSQL:  # a part the row compiler refuses on its own: per row
            return None

    def _compile(self, node: exp.Expression) -> VNode | None:
        t = self.types.typed(node)
        if t.const:
            return self.const(t.value, t.type)
        if t.column is not None:
            return self.column(t.column, t.type)
        method = getattr(self, f"v_{type(node).__name__}", None)
        return None if method is None else method(node, t.type)

    # -- leaves and operands --------------------------------------------------------------------
    def const(self, value, t: T) -> VNode | None:
        kind = kind_of(t)
        v = python_constant(kind, value) if kind is not None else None
        return None if v is None else VNode(lambda inp: v, t)

    def column(self, i: int, t: T) -> VNode | None:
        kind = kind_of(self.columns[i].type)
        if kind is None or kind is not kind_of(t) or self.kinds.get(i, kind) is not kind:
            return None
        self.kinds[i] = kind
        return VNode(lambda inp: inp.column(i), t)

    def operand(self, node: exp.Expression, t: Typed) -> VNode | None:
        """``node`` as the row compiler uses it after an implicit conversion to ``t.type``."""
        if t.const:
            return self.const(t.value, t.type)
        v = self.compile(node)
        if v is None or not t.converted:
            return v  # the value itself (perhaps named by another type of its category)
        if v.type.is_string and t.type.is_string:
            return None  # a conversion between strings is bpchar's rstrip: per row
        return self.cast(v, t.type)

    def cast(self, v: VNode, to: T) -> VNode | None:
        kernel = cast_kernel(v.type, to)
        if kernel is None or kind_of(to) is None:
            return None
        run = v.run
        return VNode(lambda inp: kernel(run(inp), inp.n), to)

    def boolean(self, node: exp.Expression) -> VNode | None:
        t = self.types.boolean(node)
        v = self.operand(node, t)
        return v if v is not None and v.kind is Kind.BOOL else None

    # -- logic ----------------------------------------------------------------------------------
    def _logic(self, node: exp.Expression, t: T) -> VNode | None:
        args = [self.boolean(n) for n in flatten_connective(node, type(node))]
        if any(a is None for a in args):
            return None
        op = K.and_ if isinstance(node, exp.And) else K.or_
        runs = [a.run for a in args]

        def run(inp: Inputs) -> Vec:
            acc = runs[0](inp)
            for r in runs[1:]:
                acc = op(acc, r(inp))
            return acc

        return VNode(run, t)

    v_And = v_Or = _logic

    def v_Not(self, node: exp.Not, t: T) -> VNode | None:
        a = self.boolean(node.this)
        return None if a is None else VNode(lambda inp: K.not_(a.run(inp)), t)

    def v_Paren(self, node: exp.Paren, t: T) -> VNode | None:
        return self.compile(node.this)

    def v_Is(self, node: exp.Is, t: T) -> VNode | None:
        rhs, neg = node.expression, bool(node.args.get("negate"))
        a = self.compile(node.this)
        if a is None:
            return None
        if isinstance(rhs, exp.Null):
            return VNode(lambda inp: K.is_null(a.run(inp), neg), t)
        if isinstance(rhs, exp.Boolean) and a.kind is Kind.BOOL:
            value = bool(rhs.this)
            return VNode(lambda inp: K.is_bool(a.run(inp), value, neg), t)
        return None

    # -- comparisons ----------------------------------------------------------------------------
    def _operands(self, node: exp.Expression) -> tuple[VNode, VNode] | None:
        """The two sides of a comparison, converted as the row compiler converts them."""
        sides = (node.this, node.expression)
        if any(self.types.typed(s).type.kind is TypeKind.CHAR for s in sides):
            return None  # bpchar comparison: trailing blanks do not count
        ta, tb = self.types.comparison(node)
        a, b = self.operand(node.this, ta), self.operand(node.expression, tb)
        if a is None or b is None or not _comparable(a.kind, b.kind):
            return None
        return a, b

    def _comparison(self, node: exp.Expression, t: T) -> VNode | None:
        ab = self._operands(node)
        if ab is None:
            return None
        op, (a, b) = _CMP[type(node)], ab
        return VNode(lambda inp: K.compare(op, *_numbers(a.run(inp), b.run(inp))), t)

    v_EQ = v_NEQ = v_LT = v_LTE = v_GT = v_GTE = _comparison

    def _distinct(self, node: exp.Expression, t: T) -> VNode | None:
        ab = self._operands(node)
        if ab is None:
            return None
        a, b = ab
        neg = isinstance(node, exp.NullSafeNEQ)

        def run(inp: Inputs) -> Vec:
            same = K.not_distinct(*_numbers(a.run(inp), b.run(inp)))
            return K.not_(same) if neg else same

        return VNode(run, t)

    v_NullSafeEQ = v_NullSafeNEQ = _distinct

    def v_Between(self, node: exp.Between, t: T) -> VNode | None:
        if node.args.get("symmetric"):
            return None
        x = node.this
        return self.compile(
            exp.and_(
                exp.GTE(this=x.copy(), expression=node.args["low"].copy()),
                exp.LTE(this=x.copy(), expression=node.args["high"].copy()),
            )
        )

    def v_In(self, node: exp.In, t: T) -> VNode | None:
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            return None
        nodes = [node.this, *node.expressions]
        if any(self.types.typed(n).type.kind is TypeKind.CHAR for n in nodes):
            return None
        unified, _ = self.types.unified(nodes, node, "IN", free=True)
        if not all(u.const and u.value == u.value for u in unified[1:]):
            ors = [exp.EQ(this=node.this.copy(), expression=i.copy()) for i in node.expressions]
            return self.compile(exp.or_(*ors) if len(ors) > 1 else ors[0])
        x = self.operand(node.this, unified[0])
        items = [self.const(u.value, u.type) for u in unified[1:]]
        if x is None or any(i is None or not _comparable(x.kind, i.kind) for i in items):
            return None
        runs = [i.run for i in items]

        def run(inp: Inputs) -> Vec:  # membership = OR of equalities, NULL items included
            xv = x.run(inp)
            acc = K.compare("==", *_numbers(xv, runs[0](inp)))
            for r in runs[1:]:
                acc = K.or_(acc, K.compare("==", *_numbers(xv, r(inp))))
            return acc

        return VNode(run, t)

    # -- conditionals ---------------------------------------------------------------------------
    def _results(self, nodes: list[exp.Expression], node: exp.Expression, what: str):
        typed, t = self.types.unified(nodes, node, what)
        out = [self.operand(n, u) for n, u in zip(nodes, typed, strict=True)]
        if any(v is None or v.kind is not kind_of(t) for v in out):
            return None
        return out

    def v_Case(self, node: exp.Case, t: T) -> VNode | None:
        if t.kind is TypeKind.CHAR:  # character results drop trailing blanks: the row path's
            return None
        ifs = node.args.get("ifs") or []
        default = node.args.get("default") or exp.Null()
        results = self._results([i.args["true"] for i in ifs] + [default], node, "CASE")
        if results is None:
            return None
        subject = node.this
        if subject is None:
            conds = [self.boolean(i.this) for i in ifs]
        else:
            conds = self._simple_case(subject, [i.this for i in ifs], node)
        if conds is None or any(c is None for c in conds):
            return None
        pairs = [(c.run, r.run) for c, r in zip(conds, results[:-1], strict=True)]
        last = results[-1].run

        def run(inp: Inputs) -> Vec:
            # evaluate every WHEN and THEN first (in order), then pick per row
            picks = [(K.true_rows(c(inp), inp.n), r(inp)) for c, r in pairs]
            acc = last(inp)
            for mask, value in reversed(picks):
                acc = K.select(mask, value, acc, inp.n)
            return acc

        return VNode(run, t)

    def _simple_case(self, subject, whens, node) -> list[VNode | None] | None:
        """CASE x WHEN v ...: each WHEN is ``x = v`` (NULL if either is NULL, NaN = NaN)."""
        typed, _ = self.types.unified([subject, *whens], node, "CASE/WHEN", free=True)
        x = self.operand(subject, typed[0])
        if x is None or x.type.kind is TypeKind.CHAR:
            return None
        conds = []
        for w, u in zip(whens, typed[1:], strict=True):
            v = self.operand(w, u)
            if v is None or not _comparable(x.kind, v.kind):
                return None
            xr, vr = x.run, v.run
            conds.append(
                VNode(lambda inp, xr=xr, vr=vr: K.compare("==", *_numbers(xr(inp), vr(inp))), BOOL)
            )
        return conds

    def v_Coalesce(self, node: exp.Coalesce, t: T) -> VNode | None:
        if t.kind is TypeKind.CHAR:  # as in CASE
            return None
        results = self._results([node.this, *node.expressions], node, "COALESCE")
        if results is None:
            return None
        runs = [r.run for r in results]

        def run(inp: Inputs) -> Vec:
            values = [r(inp) for r in runs]
            acc = values[-1]
            for v in reversed(values[:-1]):
                acc = K.select(v.valid_mask(inp.n), v, acc, inp.n)
            return acc

        return VNode(run, t)

    def v_Nullif(self, node: exp.Nullif, t: T) -> VNode | None:
        _, common = self.types.unified([node.this, node.expression], node, "NULLIF")
        if common.kind is not t.kind:  # the first argument keeps its type (nullif(d, ts) is a
            return None  # date): the row path's
        results = self._results([node.this, node.expression], node, "NULLIF")
        if results is None:
            return None
        a, b = results

        def run(inp: Inputs) -> Vec:
            av, bv = a.run(inp), b.run(inp)
            same = K.true_rows(K.compare("==", *_numbers(av, bv)), inp.n)  # NaN = NaN
            return K.select(same, constant(av.kind, None), av, inp.n)

        return VNode(run, t)
