"""Compile SQL scalar expressions (sqlglot trees) into batch Python functions with Postgres semantics.

``compile_expressions(exprs, columns)`` infers each expression's Postgres result type, generates
the Python source of ONE list comprehension over a batch of row tuples (NULL checks, integer range
checks and three-valued logic inlined; everything else calls ``engine.sql.functions``), compiles
it once and returns the function, the output types and the source (for EXPLAIN). Columns declared
``nullable=False`` get no NULL checks. Constructs the compiler cannot reproduce exactly, and
non-deterministic functions, raise ``UnsupportedSQL`` naming the construct and its position. This
module must not plan, touch Postgres or evaluate rows itself; runtime errors are raised by the
generated code as ``EvalError`` and become error diffs in ``engine.dataflow.errs``. The
compiler's parts by construct are the modules ``expression_casts``, ``expression_predicates``,
``expression_arithmetic``, ``expression_functions`` and ``expression_temporal_json``; their
building blocks are in ``expression_basics``.

Example::

    >>> c = compile_predicate(parse_expression("b > 30"), [ColumnRef("b", None, INTEGER)])
    >>> c[0]([(10,), (None,), (31,)])
    [False, None, True]
"""

from __future__ import annotations

import decimal
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp

from engine.dataflow.errs import EvalError
from engine.dataflow.nan import NAN, NUMERIC_NAN, canonical_value
from engine.errors import UnsupportedSQL
from engine.sql import functions as F
from engine.sql.expression_arithmetic import ArithmeticCompiling
from engine.sql.expression_basics import (
    _COLUMN_CODE,
    _E,
    _NONDETERMINISTIC,
    _NONDETERMINISTIC_NAMES,
    _NOVALUE,
    _hashable,
    _unsupported,
    _where,
    flatten_connective,
)
from engine.sql.expression_casts import CastCompiling
from engine.sql.expression_functions import FunctionCompiling
from engine.sql.expression_predicates import PredicateCompiling
from engine.sql.expression_temporal_json import TemporalJsonCompiling
from engine.sql.parse import DIALECT
from engine.sql.time_zone import current_time_zone
from engine.sql.types import (
    BIGINT,
    BOOLEAN,
    INTEGER,
    INTERVAL,
    NUMERIC,
    TEXT,
    UNKNOWN,
    SqlType,
    TypeKind,
)

__all__ = [
    "ColumnRef",
    "CompiledExpressions",
    "DIALECT",
    "ExpressionTypes",
    "Typed",
    "compile_expressions",
    "compile_predicate",
    "flatten_connective",
    "parse_expression",
]


# --- public API -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnRef:
    """One column of the input rows, by position: name, qualifier, SQL type, nullability."""

    name: str
    table: str | None
    type: SqlType
    nullable: bool = True


@dataclass(frozen=True)
class CompiledExpressions:
    fn: Callable[[list[tuple]], list[tuple]]
    types: list[SqlType]
    source: str
    nullable: list[bool] = field(default_factory=list)


def parse_expression(sql: str) -> exp.Expression:
    """Parse one scalar expression with incview's Postgres dialect (positions kept in ``meta``)."""
    return sqlglot.parse_one(sql, dialect=DIALECT)


def compile_expressions(
    exprs: list[exp.Expression], columns: list[ColumnRef]
) -> CompiledExpressions:
    """Compile ``exprs`` over rows shaped like ``columns`` into ``rows -> [tuple per row]``."""
    c = _Compiler(columns)
    parts = [c.output(c.compile(e)) for e in exprs]
    codes = [p.code for p in parts]
    body = "(" + ", ".join(codes) + ("," if len(codes) == 1 else "") + ")"
    fn, source = c.finish(body)
    return CompiledExpressions(fn, [p.type for p in parts], source, [p.nullable for p in parts])


def compile_predicate(
    expr: exp.Expression, columns: list[ColumnRef]
) -> tuple[Callable[[list[tuple]], list[bool | None]], str]:
    """Compile a WHERE/ON condition into ``rows -> [bool|None]`` (keep a row iff True).

    A NULL result may come back as False: a filter treats both alike.
    """
    c = _Compiler(columns)
    code = c.truth(expr)
    if code is None:
        e = c.compile(expr)
        if e.type.kind not in (TypeKind.BOOLEAN, TypeKind.UNKNOWN):
            raise UnsupportedSQL(
                f"argument of WHERE must be type boolean, not type {e.type} {_where(expr)}"
            )
        code = e.code
    return c.finish(code)


class Typed:
    """An expression as the row compiler types it, for another back end of the same semantics
    (``engine.sql.vector_expressions``): its SQL type, its value when the compiler folded it to
    a constant, the input column it is (a bare column reference), and, for an operand returned
    by one of ``ExpressionTypes``' coercions, whether a value conversion was applied (False: the
    value is used as it is, possibly under another type's name, e.g. an int compared with a
    numeric)."""

    __slots__ = ("type", "const", "value", "column", "converted")

    def __init__(self, e: _E, before: _E | None = None) -> None:
        self.type: SqlType = e.type
        self.const: bool = e.is_const
        self.value: Any = e.value if e.is_const else None
        self.column: int | None = int(e.code[1:]) if _COLUMN_CODE.fullmatch(e.code) else None
        self.converted: bool = before is not None and e.code != before.code

    def __repr__(self) -> str:
        what = f"const {self.value!r}" if self.const else f"column {self.column}"
        return f"Typed({self.type}, {what}, converted={self.converted})"


class ExpressionTypes:
    """The row compiler's typing decisions over ``columns``, without generating code to run:
    the type of an expression (constants folded) and the implicit conversions Postgres applies
    to the operands of comparisons, arithmetic, IN lists and CASE/COALESCE/NULLIF. Raises
    ``UnsupportedSQL`` exactly where ``compile_expressions`` does."""

    def __init__(self, columns: list[ColumnRef]) -> None:
        self._c = _Compiler(columns)

    def typed(self, node: exp.Expression) -> Typed:
        return Typed(self._c.compile(node))

    def boolean(self, node: exp.Expression) -> Typed:
        """``node`` as an argument of AND/OR/NOT/CASE WHEN (an untyped literal read as boolean)."""
        before = self._c.compile(node)
        return Typed(self._c._bool(node), before)

    def comparison(self, node: exp.Expression) -> tuple[Typed, Typed]:
        """The operands of a comparison (``=``, ``<``, IS DISTINCT FROM...) as they are compared."""
        a, b = self._c.compile(node.this), self._c.compile(node.expression)
        a2, b2 = self._c._compare_operands(a, b, node)
        return Typed(a2, a), Typed(b2, b)

    def arithmetic(self, node: exp.Expression) -> tuple[Typed, Typed]:
        """The operands of ``+ - * / %`` (an untyped literal takes the other side's type)."""
        a, b = self._c.compile(node.this), self._c.compile(node.expression)
        a2, b2 = self._c._arith_types(a, b, node)
        return Typed(a2, a), Typed(b2, b)

    def unified(
        self, nodes: list[exp.Expression], node: exp.Expression, what: str, free: bool = False
    ) -> tuple[list[Typed], SqlType]:
        """``nodes`` converted to their common type (IN lists, CASE results, COALESCE...)."""
        es = [self._c.compile(n) for n in nodes]
        out, t = self._c.unify(es, node, what, free)
        return [Typed(e2, e) for e2, e in zip(out, es, strict=True)], t


class _Compiler(
    CastCompiling,
    PredicateCompiling,
    ArithmeticCompiling,
    FunctionCompiling,
    TemporalJsonCompiling,
):
    """Compiles sqlglot expressions over ``columns`` to Python code (``compile``), one
    sub-expression at a time; its parts by construct are the mixins it is made of."""

    def __init__(self, columns: list[ColumnRef]) -> None:
        self.columns = list(columns)
        self.ns: dict[str, Any] = {
            "_F": F,
            "_D": Decimal,
            "_err": F.raise_error,
            "_localcontext": decimal.localcontext,
            "_NUMCTX": F.NUMERIC_CONTEXT,
            "_INF": float("inf"),
            "_NAN": NAN,
            "_NUMERIC_NAN": NUMERIC_NAN,
        }
        self._consts: dict[tuple[type, Any], str] = {}
        self._tmp = itertools.count()
        self.used: set[int] = set()
        self.numeric_ctx = False
        self.time_zone = current_time_zone()  # the Postgres TimeZone of this planning

    # -- plumbing ------------------------------------------------------------------------------
    def tmp(self) -> str:
        return f"_t{next(self._tmp)}"

    def const_name(self, value: Any) -> str:
        key = (type(value), value) if _hashable(value) else (type(value), id(value))
        name = self._consts.get(key)
        if name is None:
            name = f"_k{len(self._consts)}"
            self._consts[key] = name
            self.ns[name] = value
        return name

    def literal(self, value: Any, type_: SqlType) -> _E:
        value = canonical_value(value)  # a NaN constant is the shared NaN (engine.dataflow.nan)
        if value is None:
            code = "None"
        elif (
            isinstance(value, bool)
            or (isinstance(value, int) and abs(value) < 2**62)
            or isinstance(value, str)
            and len(value) < 200
        ):
            code = repr(value)
        else:
            code = self.const_name(value)
        return _E(code, type_, value is None, False, value, True)

    def finish(self, body: str) -> tuple[Callable, str]:
        names = []
        for i in range(len(self.columns)):
            names.append(f"c{i}" if i in self.used else "_")
        if not self.columns:
            loop = "for _row in rows"
        elif len(names) == 1:
            loop = f"for ({names[0]},) in rows"
        else:
            loop = f"for ({', '.join(names)}) in rows"
        comp = f"[{body} {loop}]"
        if self.numeric_ctx:
            src = f"def _batch(rows):\n    with _localcontext(_NUMCTX):\n        return {comp}\n"
        else:
            src = f"def _batch(rows):\n    return {comp}\n"
        ns = dict(self.ns)
        exec(compile(src, "<incview-expression>", "exec"), ns)
        return ns["_batch"], src

    def output(self, e: _E) -> _E:
        if e.type.kind is TypeKind.UNKNOWN:
            e = _E(e.code, TEXT, e.nullable, e.raises, e.value, e.simple)
        if not e.simple and (e.type.is_float or e.type.kind is TypeKind.NUMERIC):
            # arithmetic makes a new NaN object each time ('Infinity' - 'Infinity', NaN * 2):
            # results carry the shared one, so rows holding NaN equal each other (and retract)
            t = self.tmp()
            shared = "_NAN" if e.type.is_float else "_NUMERIC_NAN"
            code = f"({shared} if ({t} := {e.code}) != {t} else {t})"
            e = _E(code, e.type, e.nullable, e.raises, e.value, e.simple)
        if isinstance(e.value, F.Interval):
            raise UnsupportedSQL(
                f"an interval with months ({e.code}) cannot be a result value; "
                "use it only in date/timestamp arithmetic"
            )
        return e

    def strict(self, args: list[_E], build: Callable[[list[str]], str]) -> tuple[str, bool]:
        """Code applying ``build`` to the args' values, NULL if any arg is NULL (strict function).

        Every argument is evaluated (in order) before the NULL test when one of them may raise,
        so errors surface exactly as in Postgres.
        """
        if not any(a.nullable for a in args):
            return build([a.code for a in args]), False
        if any(a.is_const and a.value is None for a in args) and not any(a.raises for a in args):
            return "None", True
        # Postgres evaluates every argument before testing for NULL: keep that order whenever a
        # later argument (or a non-nullable first one) may raise.
        risky = any(a.raises for a in args[1:]) or (args[0].raises and not args[0].nullable)
        names: list[str] = []
        tests: list[str] = []
        for a in args:
            if a.simple:
                names.append(a.code)
                if a.nullable:
                    tests.append(a.code if risky else f"{a.code} is None")
            elif a.nullable or risky:
                t = self.tmp()
                names.append(t)
                tests.append(f"({t} := {a.code})" if risky else f"({t} := {a.code}) is None")
            else:
                names.append(a.code)
        cond = f"None in ({', '.join(tests)},)" if risky else " or ".join(tests)
        return f"(None if {cond} else {build(names)})", True

    def call(
        self, fn: Any, args: list[_E], type_: SqlType, raises: bool = True, extra: str = ""
    ) -> _E:
        """A strict call of a runtime helper; constant-folded when every argument is constant."""
        name = self.helper(fn)
        if all(a.is_const for a in args):
            if any(a.value is None for a in args):
                return self.literal(None, type_)
            try:
                value = eval(f"{name}({', '.join(a.code for a in args)}{extra})", self.ns)
            except EvalError:
                pass  # leave it to run time: Postgres raises when the row is evaluated too
            else:
                return self.literal(value, type_)
        code, nullable = self.strict(args, lambda xs: f"{name}({', '.join(xs)}{extra})")
        return _E(code, type_, nullable, raises or any(a.raises for a in args))

    def helper(self, fn: Any) -> str:
        if getattr(fn, "__module__", None) == F.__name__ and hasattr(F, fn.__name__):
            return f"_F.{fn.__name__}"
        return self.const_name(fn)

    def session_zone(self, node: exp.Expression, what: str):
        """The ``ZoneInfo`` of the session's TimeZone, which ``what`` depends on (refused
        when this planning has none: ``engine.sql.time_zone``)."""
        return self.time_zone.zone(what, _where(node))

    def zone_call(self, fn: Any, args: list[_E], type_: SqlType, zone, raises: bool = True) -> _E:
        """A strict call ``fn(*args, zone)`` of a ``engine.sql.zoned_time`` helper."""
        return self.call(fn, args, type_, raises=raises, extra=f", {self.const_name(zone)}")

    # -- dispatch ------------------------------------------------------------------------------
    def compile(self, node: exp.Expression) -> _E:
        for cls, what in _NONDETERMINISTIC.items():
            if isinstance(node, cls):
                raise UnsupportedSQL(
                    f"{what} is non-deterministic and cannot appear in a view {_where(node)}: a view "
                    "must be a deterministic function of its input tables; store the value in a "
                    "column of a source table instead"
                )
        method = getattr(self, f"c_{type(node).__name__}", None)
        if method is None:
            raise self._unknown(node)
        return method(node)

    def _unknown(self, node: exp.Expression) -> UnsupportedSQL:
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name in _NONDETERMINISTIC_NAMES:
                return UnsupportedSQL(
                    f"{name}() is non-deterministic and cannot appear in a view {_where(node)}: a "
                    "view must be a deterministic function of its input tables"
                )
            return _unsupported(node, f"function {name}()")
        if isinstance(node, exp.AggFunc):
            return _unsupported(
                node, f"aggregate {node.sql(dialect='postgres')} inside a scalar expression"
            )
        if isinstance(node, (exp.Select, exp.Subquery, exp.Exists)):
            return _unsupported(node, "a subquery inside a scalar expression")
        name = getattr(node, "key", type(node).__name__)
        return _unsupported(node, f"{name.upper()} ({node.sql(dialect='postgres')[:60]})")

    # -- leaves --------------------------------------------------------------------------------
    def c_Paren(self, node: exp.Paren) -> _E:
        return self.compile(node.this)

    def c_Column(self, node: exp.Column) -> _E:
        name = node.name
        table = node.table or None
        matches = [
            i
            for i, col in enumerate(self.columns)
            if col.name == name and (table is None or col.table == table)
        ]
        if not matches:
            low = name.lower()
            matches = [
                i
                for i, col in enumerate(self.columns)
                if col.name.lower() == low
                and (table is None or (col.table or "").lower() == table.lower())
            ]
        if not matches:
            raise UnsupportedSQL(
                f'column "{node.sql(dialect="postgres")}" does not exist {_where(node)}'
            )
        if len(matches) > 1:
            raise UnsupportedSQL(f'column reference "{name}" is ambiguous {_where(node)}')
        i = matches[0]
        self.used.add(i)
        col = self.columns[i]
        if col.type.kind is TypeKind.UNSUPPORTED:
            raise UnsupportedSQL(
                f"column {name} has type {col.type.name}, which incview cannot maintain yet "
                f"{_where(node)}; leave it out of the view or cast it in a source view"
            )
        return _E(f"c{i}", col.type, col.nullable, False, _NOVALUE, True)

    def c_Literal(self, node: exp.Literal) -> _E:
        if node.is_string:
            return self.literal(node.this, UNKNOWN)
        text = node.this
        if all(ch.isdigit() for ch in text):
            v = int(text)
            if v <= 2**31 - 1:
                return self.literal(v, INTEGER)
            if v <= 2**63 - 1:
                return self.literal(v, BIGINT)
            return self.literal(Decimal(v), NUMERIC)
        return self.literal(F.text_to_numeric(text), NUMERIC)

    def c_Null(self, node: exp.Null) -> _E:
        return self.literal(None, UNKNOWN)

    def c_Boolean(self, node: exp.Boolean) -> _E:
        return self.literal(bool(node.this), BOOLEAN)

    def c_Interval(self, node: exp.Interval) -> _E:
        text = node.this.name if isinstance(node.this, exp.Literal) else None
        if text is None:
            raise _unsupported(node, "a non-constant INTERVAL")
        unit = node.args.get("unit")
        if unit is not None:
            text = f"{text} {unit.name}"
        return self.interval_literal(text, node)

    def interval_literal(self, text: str, node: exp.Expression) -> _E:
        try:
            e = self.literal(F.parse_interval(text), INTERVAL)
            e.interval = F.interval_parts(text)
        except EvalError as err:
            raise UnsupportedSQL(f"{err} {_where(node)}") from None
        return e
