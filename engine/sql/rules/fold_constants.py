"""Constant folding: evaluate column-free sub-expressions once, at planning time, and simplify
boolean logic with constants, in Filter predicates, Project expressions and Join conditions.

Constants are evaluated with ``engine.sql.expression_compiler`` (compiled over zero columns and
run once), so folded values are exactly what the dataflow (and Postgres) would compute. A folded
value is written back as a literal only if the literal compiles to the same type and value
(``CAST('ab' AS TEXT)`` for text, a cast for bigint/constrained numerics, ``-5`` as a negation);
anything else (floats, dates, intervals, expressions that raise such as ``1 / 0``) is left as it
is. Boolean simplification follows three-valued logic: ``TRUE AND x -> x``, ``x AND FALSE ->
FALSE``, ``x OR TRUE -> TRUE``, ``FALSE OR x -> x``, ``NOT NOT x -> x``. A Filter whose predicate
becomes TRUE disappears; one that becomes FALSE or NULL stays (an empty result is legal); an
inner join ON TRUE becomes a cross join. This rule must not touch column-dependent expressions.

Example::

    Filter: "t"."a" > 1 + 2 AND (TRUE OR "t"."b" = 1)       Filter: "t"."a" > 3
      TableScan: t                                     ->     TableScan: t
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.expression_compiler import compile_expressions
from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.scope import transform_up

_SKIP = (
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Star,
    exp.Identifier,
    exp.DataType,
    exp.Var,
    exp.Ordered,
    exp.Interval,
)
_OPAQUE = (exp.AggFunc, exp.Window, exp.Subquery, exp.Select, exp.Column, exp.Star)


def fold_constants(plan: LogicalPlan) -> LogicalPlan:
    """Fold constants in every node's expressions; drop Filters that became TRUE."""
    return transform_up(plan, _fold_node)


def _fold_node(node: LogicalPlan) -> LogicalPlan:
    if isinstance(node, lp.Filter):
        pred = fold_expression(node.predicate)
        if isinstance(pred, exp.Boolean) and pred.this is True:
            return node.input
        return replace(node, predicate=pred) if pred is not node.predicate else node
    if isinstance(node, lp.Project):
        exprs = tuple(fold_expression(e) for e in node.exprs)
        if any(a is not b for a, b in zip(exprs, node.exprs, strict=True)):
            return replace(node, exprs=exprs)
        return node
    if isinstance(node, lp.Join) and node.condition is not None:
        cond = fold_expression(node.condition)
        if isinstance(cond, exp.Boolean) and cond.this is True and node.kind in ("inner", "cross"):
            return replace(node, kind="cross", condition=None)
        return replace(node, condition=cond) if cond is not node.condition else node
    return node


def fold_expression(e: exp.Expression) -> exp.Expression:
    """``e`` with constant sub-expressions evaluated and boolean constants simplified (the same
    object when nothing changed)."""
    if not any(_foldable(n) for n in e.walk()) and not any(
        isinstance(n, (exp.And, exp.Or, exp.Not)) for n in e.walk()
    ):
        return e
    before = e.sql(dialect="postgres")
    out = e.copy().transform(_fold_subtree)
    out = _simplify(out)
    while isinstance(out, exp.Paren):
        out = out.this
    return e if out.sql(dialect="postgres") == before else out


def _foldable(n: exp.Expression) -> bool:
    if isinstance(n, _SKIP) or isinstance(n.parent, (exp.Interval, exp.DataType)):
        return False
    if isinstance(n, exp.Neg) and isinstance(n.this, exp.Literal):
        return False
    return not any(isinstance(d, _OPAQUE) for d in n.walk())


def _fold_subtree(n: exp.Expression) -> exp.Expression:
    if not _foldable(n):
        return n
    value, type_ = _evaluate(n)
    if type_ is None:
        return n
    lit = _literal(value, type_)
    return lit if lit is not None else n


_FAILED = (None, None)


def _evaluate(e: exp.Expression) -> tuple[Any, Any]:
    try:
        compiled = compile_expressions([e], [])
        return compiled.fn([()])[0][0], compiled.types[0]
    except Exception:  # unsupported, or raises at runtime: keep the expression as written
        return _FAILED


def _literal(value: Any, type_: Any) -> exp.Expression | None:
    """A literal expression compiling to exactly ``value`` of ``type_``, or None."""
    candidates: list[exp.Expression] = []
    if value is None:
        candidates = [exp.Null(), _cast(exp.Null(), type_)]
    elif isinstance(value, bool):
        candidates = [exp.Boolean(this=value)]
    elif isinstance(value, int):
        base = exp.Literal.number(abs(value))
        lit = exp.Neg(this=base) if value < 0 else base
        candidates = [lit, _cast(lit, type_)]
    elif isinstance(value, Decimal):
        if not value.is_finite():
            return None
        text = format(abs(value), "f")
        base = exp.Literal.number(text)
        lit = exp.Neg(this=base) if value < 0 else base
        candidates = [lit, _cast(lit, type_)]
    elif isinstance(value, str):
        candidates = [_cast(exp.Literal.string(value), type_)]
    for c in candidates:
        got, got_type = _evaluate(c)
        if got_type == type_ and type(got) is type(value) and got == value:
            if isinstance(value, Decimal) and str(got) != str(value):
                continue  # keep the scale (1.50 stays 1.50)
            return c
    return None


def _cast(e: exp.Expression, type_: Any) -> exp.Expression:
    return exp.Cast(this=e, to=exp.DataType.build(type_.sql(), dialect="postgres"))


def _is_bool(e: exp.Expression, value: bool) -> bool:
    while isinstance(e, exp.Paren):
        e = e.this
    return isinstance(e, exp.Boolean) and e.this is value


def _strip(e: exp.Expression) -> exp.Expression:
    while isinstance(e, exp.Paren) and isinstance(e.this, (exp.Paren, exp.Boolean, exp.Column)):
        e = e.this
    return e


def _simplify(e: exp.Expression) -> exp.Expression:
    """Three-valued-logic-safe simplification of AND/OR/NOT around boolean constants."""
    for key, child in list(e.args.items()):
        if isinstance(child, exp.Expression):
            e.set(key, _simplify(child))
        elif isinstance(child, list):
            e.set(key, [_simplify(c) if isinstance(c, exp.Expression) else c for c in child])
    if isinstance(e, exp.Paren):
        return _strip(e)
    if isinstance(e, exp.And):
        a, b = e.left, e.right
        if _is_bool(a, False) or _is_bool(b, False):
            return exp.false()
        if _is_bool(a, True):
            return _strip(b)
        if _is_bool(b, True):
            return _strip(a)
    if isinstance(e, exp.Or):
        a, b = e.left, e.right
        if _is_bool(a, True) or _is_bool(b, True):
            return exp.true()
        if _is_bool(a, False):
            return _strip(b)
        if _is_bool(b, False):
            return _strip(a)
    if isinstance(e, exp.Not):
        inner = e.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Not):
            return inner.this
        if isinstance(inner, exp.Boolean):
            return exp.Boolean(this=not inner.this)
    return e
