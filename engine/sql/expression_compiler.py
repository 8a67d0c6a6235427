"""Compile SQL scalar expressions (sqlglot trees) into batch Python functions with Postgres semantics.

``compile_expressions(exprs, columns)`` infers each expression's Postgres result type, generates
the Python source of ONE list comprehension over a batch of row tuples (NULL checks, integer range
checks and three-valued logic inlined; everything else calls ``engine.sql.functions``), compiles
it once and returns the function, the output types and the source (for EXPLAIN). Columns declared
``nullable=False`` get no NULL checks. Constructs the compiler cannot reproduce exactly, and
non-deterministic functions, raise ``UnsupportedSQL`` naming the construct and its position. This
module must not plan, touch Postgres or evaluate rows itself; runtime errors are raised by the
generated code as ``EvalError`` and become error diffs in ``engine.dataflow.errs``.

Example::

    >>> c = compile_predicate(parse_expression("b > 30"), [ColumnRef("b", None, INTEGER)])
    >>> c[0]([(10,), (None,), (31,)])
    [False, None, True]
"""

from __future__ import annotations

import decimal
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp

from engine import pg_interval as PI
from engine.dataflow.errs import EvalError
from engine.dataflow.nan import NAN, NUMERIC_NAN, canonical_value
from engine.errors import UnsupportedSQL
from engine.sql import carried_values as CV
from engine.sql import functions as F
from engine.sql import zoned_time as Z
from engine.sql.parse import DIALECT
from engine.sql.time_zone import current_time_zone
from engine.sql.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INET,
    INT_RANGES,
    INTEGER,
    INTERVAL,
    JSONB,
    NUMERIC,
    REAL,
    TEXT,
    TIMESTAMP,
    TIMESTAMPTZ,
    UNKNOWN,
    SqlType,
    TypeKind,
    common_type,
    from_pg_name,
    numeric_rank,
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


def flatten_connective(node: exp.Expression, cls: type) -> list[exp.Expression]:
    """The operands of a chain of one connective (AND or OR), through parentheses, in order."""
    if isinstance(node, exp.Paren):
        return flatten_connective(node.this, cls)
    if isinstance(node, cls):
        return flatten_connective(node.this, cls) + flatten_connective(node.expression, cls)
    return [node]


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


_COLUMN_CODE = re.compile(r"c[0-9]+")


# --- internals --------------------------------------------------------------------------------

_NOVALUE = object()


@dataclass
class _E:
    """A compiled sub-expression: Python code, SQL type, may it be NULL, may it raise."""

    code: str
    type: SqlType
    nullable: bool = True
    raises: bool = False
    value: Any = _NOVALUE  # the constant's Python value, when the expression is a constant
    simple: bool = False  # a plain name or literal: cheap and safe to evaluate twice
    # a constant interval's (months, days, microseconds), kept apart as Postgres keeps them
    interval: tuple[int, int, int] | None = None

    @property
    def is_const(self) -> bool:
        return self.value is not _NOVALUE


_NONDETERMINISTIC = {
    exp.CurrentTimestamp: "now()/current_timestamp",
    exp.CurrentDate: "current_date",
    exp.CurrentTime: "current_time",
    exp.Localtimestamp: "localtimestamp",
    exp.Rand: "random()",
    exp.Uuid: "gen_random_uuid()",
}
_NONDETERMINISTIC_NAMES = {
    "now",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "timeofday",
    "random",
    "gen_random_uuid",
    "uuid_generate_v4",
    "txid_current",
    "pg_backend_pid",
    "localtime",
    "setseed",
    "nextval",
    "currval",
}
for _name in ("CurrentTime", "Localtime", "CurrentDatetime", "UnixSeconds"):
    if hasattr(exp, _name):
        _NONDETERMINISTIC.setdefault(getattr(exp, _name), _name.lower())


def _where(node: exp.Expression) -> str:
    """'at line L, column C' from the node or its first descendant carrying a position."""
    for n in node.walk():
        meta = getattr(n, "_meta", None) or {}
        if "line" in meta:
            return f"at line {meta['line']}, column {meta['col']}"
    return f"in `{node.sql(dialect='postgres')}`"


def _unsupported(node: exp.Expression, what: str, hint: str | None = None) -> UnsupportedSQL:
    msg = f"{what} is not supported {_where(node)}"
    if hint:
        msg += f"; {hint}"
    return UnsupportedSQL(msg)


# text -> value of the types carried as Python values or canonical text (engine.sql.carried_values)
_FROM_TEXT = {
    TypeKind.UUID: CV.text_to_uuid,
    TypeKind.BYTEA: CV.text_to_bytea,
    TypeKind.JSONB: CV.text_to_jsonb,
    TypeKind.JSON: CV.text_to_json,
    TypeKind.INET: CV.text_to_inet,
    TypeKind.CIDR: CV.text_to_cidr,
}

_COMPARISONS = {exp.EQ: "==", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_PG_OPS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}

# Types whose values may be NaN, which Postgres orders above every number and equal to itself
# (Python: unequal to everything, unordered; a Decimal NaN even raises on < and >).
_NAN_KINDS = frozenset({TypeKind.DOUBLE, TypeKind.REAL, TypeKind.NUMERIC})
# op -> the result when x or y is NaN (x != x: x is NaN); x and y are names, evaluated again
_NAN_CASES = {
    "==": "({x} != {x} and {y} != {y})",
    "!=": "({x} == {x} or {y} == {y})",
    "<": "({y} != {y} and {x} == {x})",
    "<=": "({y} != {y})",
    ">": "({x} != {x} and {y} == {y})",
    ">=": "({x} != {x})",
}


def _nan_aware(
    op: str, x: str, y: str, guarded: bool, xb: str | None = None, yb: str | None = None
) -> str:
    """``x op y`` with Postgres' NaN semantics; ``x``, ``y`` are names read several times, bound
    by the code ``xb``, ``yb`` (``name := ...``) at their first evaluation when given.

    Floats: the plain comparison, and only when it is false (true for !=) the NaN case, e.g.
    ``(x < y or (y != y and x == x))``. ``guarded`` (a Decimal may be NaN): the NaN test comes
    first, since ``Decimal('NaN') < 1`` raises.

    >>> _nan_aware("<", "a", "b", False)
    '(a < b or (b != b and a == a))'
    """
    xb, yb = xb or x, yb or y
    nan_case = _NAN_CASES[op].format(x=x, y=y)
    if guarded:  # & rather than and: both sides are evaluated (and bound) in order
        return f"({x} {op} {y} if ({xb} == {x}) & ({yb} == {y}) else {nan_case})"
    if op == "!=":
        return f"({xb} != {yb} and ({x} == {x} or {y} == {y}))"
    return f"({xb} {op} {yb} or {nan_case})"


class _Compiler:
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

    # -- casts ---------------------------------------------------------------------------------
    def c_Cast(self, node: exp.Cast) -> _E:
        to = node.args["to"]
        try:
            target = from_pg_name(to.sql(dialect="postgres"))
        except ValueError:
            raise _unsupported(node, f"type {to.sql(dialect='postgres')}") from None
        if target.kind in (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ, TypeKind.TIME):
            target = SqlType(target.kind)
        return self.cast(self.compile(node.this), target, node, explicit=True)

    def cast(self, e: _E, to: SqlType, node: exp.Expression, explicit: bool = False) -> _E:
        """Convert ``e`` to type ``to`` (NULL stays NULL)."""
        src = e.type
        if src == to or (src.unconstrained() == to and not explicit):
            return e
        if src.kind is TypeKind.UNKNOWN:
            if e.is_const and e.value is None:
                return self.literal(None, to)
            src = TEXT
            if to.kind is TypeKind.INTERVAL and e.is_const:
                return self.interval_literal(e.value, node)
        if not to.is_string:
            e = self.padded(e)  # the input function reads character(n)'s padded text
        conv = self._cast_fn(src, to, node)
        if conv is None:
            return _E(e.code, to, e.nullable, e.raises, e.value, e.simple)
        fn, raises = conv
        if e.is_const:
            if e.value is None:
                return self.literal(None, to)
            try:
                return self.literal(fn(e.value), to)
            except EvalError as err:
                # Postgres rejects bad literals (and folds numeric constants) at plan time
                if e.type.kind in (TypeKind.UNKNOWN, TypeKind.NUMERIC):
                    raise UnsupportedSQL(f"{err} {_where(node)}") from None
        name = self.const_name(fn) if not isinstance(fn, str) else fn
        code, nullable = self.strict([e], lambda xs: f"{name}({xs[0]})")
        return _E(code, to, nullable, raises or e.raises)

    def _cast_fn(self, src: SqlType, to: SqlType, node: exp.Expression):
        """(callable, may_raise) converting a non-NULL value, or None for 'no change'."""
        s, t = src.kind, to.kind
        if to.kind is TypeKind.NUMERIC and to.precision is not None:
            base = self._cast_fn(src, NUMERIC, node)
            p, sc = to.precision, to.scale or 0

            def typmod(v, _b=base[0] if base else None):
                return F.numeric_typmod(_b(v) if _b else v, p, sc)

            return typmod, True
        if to.is_string:
            if to.kind is TypeKind.CHAR:
                raise _unsupported(node, "casting to character(n)", "cast to text or varchar(n)")
            base = None if src.is_string else self._to_text(src, node)
            if to.length is not None:
                n = to.length

                def trunc(v, _b=base):
                    return (_b(v) if _b else v)[:n]

                return trunc, False
            return (base, False) if base else None
        if s is TypeKind.ARRAY and t is TypeKind.ARRAY and src.element != to.element:
            conv = self._cast_fn(src.element, to.element, node)  # element by element
            if conv is not None:
                return CV.array_map(conv[0]), conv[1]
        if s == t:
            return None
        if src.is_integer and to.is_integer:
            lo, hi, msg = INT_RANGES[t]
            if numeric_rank(to) >= numeric_rank(src):
                return None
            return (lambda v: F.int_range_check(v, lo, hi, msg)), True
        if src.is_integer:
            if t is TypeKind.NUMERIC:
                return Decimal, False
            if t is TypeKind.DOUBLE:
                return float, False
            if t is TypeKind.REAL:
                return (lambda v: F.to_float4(float(v))), False
            if t is TypeKind.BOOLEAN and s is TypeKind.INTEGER:
                return (lambda v: v != 0), False
        if s is TypeKind.NUMERIC:
            if to.is_integer:
                lo, hi, msg = INT_RANGES[t]
                return (lambda v: F.numeric_to_int(v, lo, hi, msg)), True
            if t is TypeKind.DOUBLE:
                return F.numeric_to_float8, True
            if t is TypeKind.REAL:
                return (lambda v: F.to_float4(float(v))), True
        if s is TypeKind.REAL and t is not TypeKind.REAL:
            # from the real's exact single-precision value (F.float4_to_float8), as Postgres
            if t is TypeKind.DOUBLE:
                return F.float4_to_float8, False
            if t is TypeKind.NUMERIC:  # float4_numeric: FLT_DIG (6) significant digits
                return (lambda v: F.float_to_numeric(F.float4_to_float8(v), 6)), False
            if to.is_integer:
                lo, hi, msg = INT_RANGES[t]
                return (lambda v: F.float_to_int(F.float4_to_float8(v), lo, hi, msg)), True
        if src.is_float:
            if to.is_integer:
                lo, hi, msg = INT_RANGES[t]
                return (lambda v: F.float_to_int(v, lo, hi, msg)), True
            if t is TypeKind.NUMERIC:
                return (lambda v: F.float_to_numeric(v, 15)), False
            if t is TypeKind.REAL:
                return F.to_float4, True
        if s is TypeKind.BOOLEAN and t is TypeKind.INTEGER:
            return int, False
        if src.is_string:
            if to.is_integer:
                lo, hi, _ = INT_RANGES[t]
                name = to.sql()
                return (lambda v: F.text_to_int(v, lo, hi, name)), True
            if t is TypeKind.NUMERIC:
                return F.text_to_numeric, True
            if t is TypeKind.DOUBLE:
                return F.text_to_float, True
            if t is TypeKind.REAL:
                return (lambda v: F.to_float4(F.text_to_float(v, "real"))), True
            if t is TypeKind.BOOLEAN:
                return F.text_to_bool, True
            if t is TypeKind.DATE:
                return F.text_to_date, True
            if t is TypeKind.TIMESTAMP:
                return F.text_to_timestamp, True
            carried = _FROM_TEXT.get(t)
            if carried is not None:
                return carried, True
            if t is TypeKind.ENUM:
                return CV.enum_input(to.sql(), to.labels), True
            if t is TypeKind.ARRAY:
                conv = self._cast_fn(TEXT, to.element, node)
                element = conv[0] if conv else (lambda v: v)
                return CV.text_to_array(lambda b: element(b.decode())), True
        if s is TypeKind.CIDR and t is TypeKind.INET:
            return CV.cidr_to_inet, False
        if s is TypeKind.JSON and t is TypeKind.JSONB:
            return CV.text_to_jsonb, True
        if s is TypeKind.JSONB and t is TypeKind.JSON:
            return None  # jsonb's text is json text
        if s is TypeKind.DATE and t is TypeKind.TIMESTAMP:
            return F.date_to_ts, False
        if s is TypeKind.TIMESTAMP and t is TypeKind.DATE:
            return (lambda v: v.date()), False
        if TypeKind.TIMESTAMPTZ in (s, t):
            return self._zoned_cast_fn(src, to, node)
        raise _unsupported(node, f"cast from {src} to {to}")

    def _zoned_cast_fn(self, src: SqlType, to: SqlType, node: exp.Expression):
        """Casts to and from timestamptz: evaluated in the session's TimeZone."""
        s, t = src.kind, to.kind
        kernels = {
            (TypeKind.TIMESTAMPTZ, TypeKind.TIMESTAMP): (Z.to_local, True),
            (TypeKind.TIMESTAMPTZ, TypeKind.DATE): (Z.tz_to_date, True),
            (TypeKind.TIMESTAMPTZ, TypeKind.TIME): (lambda v, z: Z.to_local(v, z).time(), True),
            (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ): (Z.from_local, True),
            (TypeKind.DATE, TypeKind.TIMESTAMPTZ): (Z.date_to_tz, True),
            (TypeKind.TEXT, TypeKind.TIMESTAMPTZ): (Z.text_to_tz, True),
        }
        kernel = kernels.get((TypeKind.TEXT if src.is_string else s, t))
        if kernel is None:
            raise _unsupported(node, f"cast from {src} to {to}")
        fn, raises = kernel
        zone = self.session_zone(node, f"cast from {src} to {to}")
        return (lambda v, _fn=fn, _z=zone: _fn(v, _z)), raises

    def _to_text(self, src: SqlType, node: exp.Expression) -> Callable:
        k = src.kind
        if src.is_integer:
            return str
        if k is TypeKind.NUMERIC:
            return F.numeric_text
        if k is TypeKind.DOUBLE:
            return F.float8_text
        if k is TypeKind.REAL:
            return F.float4_text
        if k is TypeKind.BOOLEAN:
            return F.bool_text
        if k is TypeKind.DATE:
            return F.date_text
        if k is TypeKind.TIMESTAMP:
            return F.timestamp_text
        if k is TypeKind.TIMESTAMPTZ:
            zone = self.session_zone(node, f"converting {src} to text")
            return lambda v, _z=zone: Z.tz_text(v, _z)
        if k is TypeKind.INTERVAL:
            return F.interval_text
        if k is TypeKind.INET:
            return CV.inet_text
        if src.text_carried:
            return None
        if k is TypeKind.UUID:
            return str
        if k is TypeKind.BYTEA:
            return CV.bytea_text
        if k is TypeKind.ARRAY:
            el = src.element
            element = (None if el.is_string else self._to_text(el, node)) or str
            return lambda v: CV.array_text(v, element)
        raise _unsupported(node, f"converting {src} to text")

    def coerce(self, e: _E, to: SqlType, node: exp.Expression, free: bool = False) -> _E:
        """Implicit conversion to ``to``; with ``free`` (comparisons), int needs no conversion to
        compare with numeric or float8 in Python (a bigint does with float8: Postgres rounds it
        to float8 first, Python compares exactly)."""
        if to.kind is TypeKind.CHAR and e.type.kind is not TypeKind.CHAR:
            # text -> character: its trailing blanks do not count (the engine drops them)
            e = self.cast(e, TEXT, node)
            code, nullable = self.strict([e], lambda xs: f"{xs[0]}.rstrip(' ')")
            return _E(code, SqlType(TypeKind.CHAR), nullable, e.raises)
        if e.type == to or e.type.unconstrained() == to.unconstrained():
            return e
        exact = to.kind is TypeKind.NUMERIC or (
            to.kind is TypeKind.DOUBLE and e.type.kind is not TypeKind.BIGINT
        )
        if free and e.type.is_integer and exact and not e.is_const:
            return _E(e.code, to, e.nullable, e.raises, e.value, e.simple)
        return self.cast(e, to.unconstrained(), node)

    def unify(
        self,
        es: list[_E],
        node: exp.Expression,
        what: str,
        free: bool = False,
        select: bool = False,
    ) -> tuple[list[_E], SqlType]:
        """The values of ``es`` converted to their common type. ``select``: Postgres'
        ``select_common_type`` (CASE results, COALESCE, GREATEST/LEAST, IN), where of string
        types the first wins (coalesce(v, t) is varchar, coalesce(ch, t) character), as each
        converts to the others implicitly."""
        t = common_type([e.type for e in es])
        if t is None:
            names = " and ".join(str(e.type) for e in es)
            raise UnsupportedSQL(f"{what} types {names} cannot be matched {_where(node)}")
        if select and t.is_string:
            t = next((e.type for e in es if e.type.kind is not TypeKind.UNKNOWN), t)
        if any(e.type != t for e in es) and t != t.unconstrained():
            # Postgres keeps a typmod (numeric(10,2), varchar(10)) only when every input has it;
            # a NULL or other literal coerced to the type has none
            t = SqlType(t.kind)
        return [self.coerce(e, t, node, free) for e in es], t

    # -- boolean logic -------------------------------------------------------------------------
    def _bool(self, node: exp.Expression) -> _E:
        e = self.compile(node)
        if e.type.kind is TypeKind.UNKNOWN:
            e = self.cast(e, BOOLEAN, node)
        if e.type.kind is not TypeKind.BOOLEAN:
            raise UnsupportedSQL(
                f"argument of {type(node.parent).__name__.upper()} must be type boolean, not type {e.type} {_where(node)}"
            )
        return e

    def _logic(self, node: exp.Expression, is_and: bool) -> _E:
        args = [self._bool(n) for n in flatten_connective(node, type(node))]
        decisive = "False" if is_and else "True"
        if not any(a.nullable for a in args):
            op = " and " if is_and else " or "
            return _E(
                "(" + op.join(a.code for a in args) + ")",
                BOOLEAN,
                False,
                any(a.raises for a in args),
            )
        names, tests = [], []
        for a in args:
            if a.simple:
                n = a.code
                tests.append(f"{n} is {decisive}")
            else:
                n = self.tmp()
                tests.append(f"({n} := {a.code}) is {decisive}")
            names.append(n)
        null_test = " or ".join(
            f"{n} is None" for a, n in zip(args, names, strict=True) if a.nullable
        )
        other = "True" if is_and else "False"
        code = f"({decisive} if {' or '.join(tests)} else (None if {null_test} else {other}))"
        return _E(code, BOOLEAN, True, any(a.raises for a in args))

    def c_And(self, node: exp.And) -> _E:
        return self._logic(node, True)

    def c_Or(self, node: exp.Or) -> _E:
        return self._logic(node, False)

    def c_Not(self, node: exp.Not) -> _E:
        a = self._bool(node.this)
        if a.is_const:
            return self.literal(None if a.value is None else not a.value, BOOLEAN)
        code, nullable = self.strict([a], lambda xs: f"(not {xs[0]})")
        return _E(code, BOOLEAN, nullable, a.raises)

    def truth(self, node: exp.Expression) -> str | None:
        """Code that is truthy exactly when ``node`` is TRUE (filters only), or None if no shortcut."""
        if isinstance(node, exp.Paren):
            return self.truth(node.this)
        if isinstance(node, exp.And):
            parts = flatten_connective(node, exp.And)
            codes = []
            for i, p in enumerate(parts):
                e_code = self.truth(p)
                if e_code is None:
                    e = self._bool(p)
                    if e.raises and i > 0:
                        return None
                    e_code = e.code
                elif i > 0 and _may_raise(p):
                    return None
                codes.append(e_code)
            return "(" + " and ".join(codes) + ")"
        if type(node) in _COMPARISONS:
            a, b = self.compile(node.this), self.compile(node.expression)
            if a.raises or b.raises:
                return None
            a, b = self._compare_operands(a, b, node)
            tests = [f"{x.code} is not None" for x in (a, b) if x.nullable]
            if not all(x.simple for x in (a, b) if x.nullable):
                return None
            cmp = self.compare_code(_COMPARISONS[type(node)], a, b, a.code, b.code)
            return "(" + " and ".join([*tests, cmp]) + ")"
        return None

    # -- comparisons ---------------------------------------------------------------------------
    def _compare_operands(self, a: _E, b: _E, node: exp.Expression) -> tuple[_E, _E]:
        ta, tb = a.type, b.type
        kinds = {ta.kind, tb.kind}
        if TypeKind.JSON in kinds:
            raise UnsupportedSQL(
                f"operator does not exist: {ta} {_op_symbol(node)} {tb} {_where(node)}; "
                "json has no comparison operators: cast it to jsonb"
            )
        if TypeKind.CHAR in kinds and kinds <= {TypeKind.CHAR, TypeKind.VARCHAR, TypeKind.UNKNOWN}:
            # character(n) semantics (Postgres' bpchar operators): trailing blanks do not count.
            # character(n) values arrive unpadded (engine.postgres.values.parse_bpchar); the
            # other side (varchar, a literal) loses its trailing blanks here. char vs text
            # compares as text (below), as in Postgres.
            return self._unpadded(a, node), self._unpadded(b, node)
        if ta.kind is TypeKind.UNKNOWN and tb.kind is TypeKind.UNKNOWN:
            return self.cast(a, TEXT, node), self.cast(b, TEXT, node)
        if ta.kind is TypeKind.UNKNOWN:
            return self.cast(a, tb.unconstrained(), node), b
        if tb.kind is TypeKind.UNKNOWN:
            return a, self.cast(b, ta.unconstrained(), node)
        if ta.is_numeric_category and tb.is_numeric_category:
            # Postgres compares in float8; Python compares int/float exactly (same for |x| < 2**53)
            wide = TypeKind.NUMERIC in (ta.kind, tb.kind) or TypeKind.BIGINT in (ta.kind, tb.kind)
            # a real against anything but a real: its exact single-precision value in float8
            real = TypeKind.REAL in (ta.kind, tb.kind) and ta.kind is not tb.kind
            if ta.is_float != tb.is_float and wide or real:
                return self.cast(a, DOUBLE, node), self.cast(b, DOUBLE, node)
            return a, b
        t = common_type([ta, tb])
        if t is None or t.kind is TypeKind.INTERVAL and ta != tb:
            raise UnsupportedSQL(
                f"operator does not exist: {ta} {_op_symbol(node)} {tb} {_where(node)}; "
                "add an explicit cast"
            )
        return self.coerce(a, t, node, True), self.coerce(b, t, node, True)

    @staticmethod
    def _require_order(t: SqlType, node: exp.Expression, what: str) -> None:
        if not t.ordered:
            raise _unsupported(
                node,
                f"{what} on {t} values",
                f"incview cannot order {t} values as Postgres does; = and <> work",
            )

    def _unpadded(self, e: _E, node: exp.Expression) -> _E:
        if e.type.kind is TypeKind.CHAR:
            return _E(e.code, TEXT, e.nullable, e.raises)
        if e.type.kind is TypeKind.UNKNOWN:
            e = self.cast(e, TEXT, node)
        code, nullable = self.strict([e], lambda xs: f"{xs[0]}.rstrip(' ')")
        return _E(code, TEXT, nullable, e.raises)

    def padded(self, e: _E) -> _E:
        """A character(n) value with its padding, where Postgres reads it so (its output in
        concat(), casts through text input, the subject of LIKE, octet_length): the engine
        carries it unpadded (``engine.postgres.values.parse_bpchar``)."""
        if e.type.kind is not TypeKind.CHAR or e.type.length is None:
            return e
        n = e.type.length
        code, nullable = self.strict([e], lambda xs: f"{xs[0]}.ljust({n})")
        return _E(code, e.type, nullable, e.raises)

    def _comparison(self, node: exp.Expression) -> _E:
        a, b = self._compare_operands(self.compile(node.this), self.compile(node.expression), node)
        op = _COMPARISONS[type(node)]
        if op not in ("==", "!="):
            self._require_order(a.type, node, f"operator {_op_symbol(node)}")
        code, nullable = self.strict([a, b], lambda xs: self.compare_code(op, a, b, *xs))
        return _E(code, BOOLEAN, nullable, a.raises or b.raises)

    def compare_code(self, op: str, a: _E, b: _E, x: str, y: str) -> str:
        """Code of ``x op y`` for operands ``a``, ``b`` (whose code or names are ``x``, ``y``):
        the plain Python comparison, or Postgres' NaN semantics when a side may be NaN."""
        kinds = {a.type.kind, b.type.kind}
        if not kinds & _NAN_KINDS:
            return f"{x} {op} {y}"
        xb = yb = None
        if not x.isidentifier() and not (a.simple and x == a.code):
            t = self.tmp()
            x, xb = t, f"({t} := {x})"
        if not y.isidentifier() and not (b.simple and y == b.code):
            t = self.tmp()
            y, yb = t, f"({t} := {y})"
        return _nan_aware(op, x, y, TypeKind.NUMERIC in kinds, xb, yb)

    c_EQ = c_NEQ = c_LT = c_LTE = c_GT = c_GTE = _comparison

    def c_NullSafeEQ(self, node: exp.Expression) -> _E:
        a, b = self._compare_operands(self.compile(node.this), self.compile(node.expression), node)
        code = self.compare_code("==", a, b, a.code, b.code)  # None == None, NaN = NaN
        return _E(f"({code})", BOOLEAN, False, a.raises or b.raises)

    def c_NullSafeNEQ(self, node: exp.Expression) -> _E:
        a, b = self._compare_operands(self.compile(node.this), self.compile(node.expression), node)
        code = self.compare_code("!=", a, b, a.code, b.code)
        return _E(f"({code})", BOOLEAN, False, a.raises or b.raises)

    def c_Is(self, node: exp.Is) -> _E:
        a = self.compile(node.this)
        rhs = node.expression
        neg = bool(node.args.get("negate"))
        if a.is_const:  # a literal ('yes' IS NULL): known now
            if isinstance(rhs, exp.Null):
                return self.literal((a.value is None) != neg, BOOLEAN)
            if isinstance(rhs, exp.Boolean) and a.type.kind is TypeKind.BOOLEAN:
                return self.literal((a.value is bool(rhs.this)) != neg, BOOLEAN)
        if isinstance(rhs, exp.Null):
            code = f"({a.code} is {'not ' if neg else ''}None)"
        elif isinstance(rhs, exp.Boolean):
            if a.type.kind not in (TypeKind.BOOLEAN, TypeKind.UNKNOWN):
                raise UnsupportedSQL(
                    f"argument of IS {rhs.sql()} must be type boolean {_where(node)}"
                )
            code = f"({a.code} is {'not ' if neg else ''}{bool(rhs.this)})"
        else:
            raise _unsupported(node, f"IS {rhs.sql(dialect='postgres')}")
        return _E(code, BOOLEAN, False, a.raises)

    def c_Between(self, node: exp.Between) -> _E:
        if node.args.get("symmetric"):
            raise _unsupported(
                node, "BETWEEN SYMMETRIC", "write (x BETWEEN a AND b OR x BETWEEN b AND a)"
            )
        x = node.this
        rewritten = exp.and_(
            exp.GTE(this=x.copy(), expression=node.args["low"].copy()),
            exp.LTE(this=x.copy(), expression=node.args["high"].copy()),
        )
        return self.compile(rewritten)

    def c_In(self, node: exp.In) -> _E:
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise _unsupported(node, "IN (subquery)", "the planner turns it into a semi-join")
        x = self.compile(node.this)
        items = [self.compile(i) for i in node.expressions]
        kinds = {e.type.kind for e in (x, *items)}
        if TypeKind.CHAR in kinds and kinds <= {TypeKind.CHAR, TypeKind.VARCHAR, TypeKind.UNKNOWN}:
            x, *items = (self._unpadded(e, node) for e in (x, *items))  # bpchar: see _compare
        unified, t = self.unify([x, *items], node, "IN", free=True, select=True)
        _no_json_equality(t, node)
        x, items = unified[0], unified[1:]
        # a NaN constant: the comparisons below know NaN = NaN, a set lookup only the shared one
        if all(i.is_const and i.value == i.value for i in items):
            values = [i.value for i in items]
            has_null = any(v is None for v in values)
            nonnull = [v for v in values if v is not None]
            if not nonnull:
                code = "None"
                return _E(code, BOOLEAN, True)
            kset = self.const_name(frozenset(nonnull))
            miss = "None" if has_null else "False"
            if x.nullable or has_null:
                if x.nullable and not x.simple:
                    t_ = self.tmp()
                    code = f"(None if ({t_} := {x.code}) is None else (True if {t_} in {kset} else {miss}))"
                elif x.nullable:
                    code = (
                        f"(None if {x.code} is None else (True if {x.code} in {kset} else {miss}))"
                    )
                else:
                    code = f"(True if {x.code} in {kset} else {miss})"
                return _E(code, BOOLEAN, True, x.raises)
            return _E(f"({x.code} in {kset})", BOOLEAN, False, x.raises)
        ors = [exp.EQ(this=node.this.copy(), expression=i.copy()) for i in node.expressions]
        return self.compile(exp.or_(*ors) if len(ors) > 1 else ors[0])

    # -- LIKE ----------------------------------------------------------------------------------
    def c_Escape(self, node: exp.Escape) -> _E:
        inner = node.this
        if not isinstance(inner, (exp.Like, exp.ILike)):
            raise _unsupported(node, "ESCAPE outside LIKE")
        esc = node.expression
        if not (isinstance(esc, exp.Literal) and esc.is_string):
            raise _unsupported(node, "a non-constant ESCAPE")
        try:
            e = F.like_escape(esc.this)
        except EvalError as err:
            raise UnsupportedSQL(f"{err} {_where(node)}") from None
        return self._like(inner, e)

    def c_Like(self, node: exp.Like) -> _E:
        return self._like(node, "\\")

    def c_ILike(self, node: exp.ILike) -> _E:
        return self._like(node, "\\")

    def _text_arg(self, node: exp.Expression, what: str) -> _E:
        e = self.compile(node)
        if e.type.kind is TypeKind.UNKNOWN:
            return self.cast(e, TEXT, node)
        if not e.type.is_string:
            raise UnsupportedSQL(
                f"{what} needs a text argument, not {e.type} {_where(node)}; add ::text"
            )
        return e

    def _like(self, node: exp.Expression, escape: str | None) -> _E:
        icase = isinstance(node, exp.ILike)
        neg = bool(node.args.get("negate"))
        s = self.padded(self._text_arg(node.this, "LIKE"))  # bpcharlike: the padded subject
        p = self._text_arg(node.expression, "LIKE")
        if p.is_const and p.value is not None:
            pattern = F.ascii_lower(p.value) if icase else p.value
            try:
                tokens = F.like_tokens(pattern, escape)
            except EvalError as err:
                raise UnsupportedSQL(f"{err} {_where(node)}") from None
            build = self._like_fast(tokens, pattern, escape, icase)
            code, nullable = self.strict([s], lambda xs: build(xs[0]))
        else:
            fn = "_F.ilike" if icase else "_F.like"
            esc = repr(escape)
            code, nullable = self.strict([s, p], lambda xs: f"{fn}({xs[0]}, {xs[1]}, {esc})")
        if neg and nullable:
            t = self.tmp()
            code = f"(None if ({t} := {code}) is None else not {t})"
        elif neg:
            code = f"(not {code})"
        return _E(code, BOOLEAN, nullable, s.raises or p.raises or not p.is_const)

    def _like_fast(
        self, tokens: list[str], pattern: str, escape, icase: bool
    ) -> Callable[[str], str]:
        def subject(x: str) -> str:
            return f"_F.ascii_lower({x})" if icase else x

        literal = all(t.startswith("L") for t in tokens)
        inner = tokens[1:-1]
        if literal:
            lit = "".join(t[1] for t in tokens)
            return lambda x: f"({subject(x)} == {lit!r})"
        if tokens == ["%"]:
            return lambda x: "True"
        if tokens[-1] == "%" and all(t.startswith("L") for t in tokens[:-1]):
            lit = "".join(t[1] for t in tokens[:-1])
            return lambda x: f"{subject(x)}.startswith({lit!r})"
        if tokens[0] == "%" and all(t.startswith("L") for t in tokens[1:]):
            lit = "".join(t[1] for t in tokens[1:])
            return lambda x: f"{subject(x)}.endswith({lit!r})"
        if (
            len(tokens) > 2
            and tokens[0] == tokens[-1] == "%"
            and all(t.startswith("L") for t in inner)
        ):
            lit_inner = "".join(t[1] for t in inner)
            return lambda x: f"({lit_inner!r} in {subject(x)})"
        rx = self.const_name(F.like_regex(pattern, escape).fullmatch)
        return lambda x: f"({rx}({subject(x)}) is not None)"

    def c_SimilarTo(self, node: exp.Expression) -> _E:
        raise _unsupported(node, "SIMILAR TO", "use LIKE")

    def c_RegexpLike(self, node: exp.Expression) -> _E:
        raise _unsupported(node, "regular expression match (~)", "use LIKE")

    # -- arithmetic ----------------------------------------------------------------------------
    def _arith_types(self, a: _E, b: _E, node: exp.Expression) -> tuple[_E, _E]:
        if a.type.kind is TypeKind.UNKNOWN and b.type.kind is TypeKind.UNKNOWN:
            raise UnsupportedSQL(
                f"operator is not unique: unknown {_op_symbol(node)} unknown {_where(node)}"
            )
        # interval * and / take a float8 (interval * '1.5'); else the literal takes the other type
        scale = type(node) in (exp.Mul, exp.Div) and TypeKind.INTERVAL in (a.type.kind, b.type.kind)
        if a.type.kind is TypeKind.UNKNOWN:
            a = self.cast(a, DOUBLE if scale else b.type.unconstrained(), node)
        if b.type.kind is TypeKind.UNKNOWN:
            b = self.cast(b, DOUBLE if scale else a.type.unconstrained(), node)
        return a, b

    def _binary(self, node: exp.Expression) -> _E:
        a, b = self._arith_types(self.compile(node.this), self.compile(node.expression), node)
        op = _PG_OPS[type(node)]
        ta, tb = a.type, b.type
        if ta.is_numeric_category and tb.is_numeric_category:
            return self._numeric_op(op, a, b, node)
        dt = self._datetime_op(op, a, b, node)
        if dt is not None:
            return dt
        raise UnsupportedSQL(
            f"operator does not exist: {ta} {op} {tb} {_where(node)}; add an explicit cast"
        )

    c_Add = c_Sub = c_Mul = c_Div = c_Mod = _binary

    def _numeric_op(self, op: str, a: _E, b: _E, node: exp.Expression) -> _E:
        ta, tb = a.type, b.type
        raises = a.raises or b.raises
        if ta.is_integer and tb.is_integer:
            t = max(ta.unconstrained(), tb.unconstrained(), key=numeric_rank)
            lo, hi, msg = INT_RANGES[t.kind]
            if op == "/":
                return self.call(F.int_div, [a, b], t, extra=f", {lo}, {hi}, {msg!r}")
            if op == "%":
                return self.call(F.int_mod, [a, b], t)
            r = self.tmp()

            def build(xs: list[str]) -> str:
                return f"({r} if {lo} <= ({r} := {xs[0]} {op} {xs[1]}) <= {hi} else _err({msg!r}))"

            return self._fold(a, b, build, t, True)
        if ta.is_float or tb.is_float:
            t = REAL if ta.kind is TypeKind.REAL and tb.kind is TypeKind.REAL else DOUBLE
            # in float8, a real as its exact single-precision value (float4pl and the like
            # round the float8 result to real again, below)
            a = self.cast(a, DOUBLE, node) if ta.kind in (TypeKind.NUMERIC, TypeKind.REAL) else a
            b = self.cast(b, DOUBLE, node) if tb.kind in (TypeKind.NUMERIC, TypeKind.REAL) else b
            if op == "%":
                raise UnsupportedSQL(f"operator does not exist: {ta} % {tb} {_where(node)}")
            if op in "+-":
                r = self.tmp()

                def build(xs: list[str]) -> str:
                    return (
                        f"({r} if -_INF < ({r} := {xs[0]} {op} {xs[1]}) < _INF "
                        f"else _F.float_check({r}, {xs[0]}, {xs[1]}))"
                    )

                e = self._fold(a, b, build, t, True)
            else:
                e = self.call(F.float_mul if op == "*" else F.float_div, [a, b], t)
            if t is REAL:
                return self.call(F.to_float4, [e], REAL)
            return e
        # numeric (an integer operand mixes in exactly)
        if op == "/":
            return self.call(F.numeric_div, [a, b], NUMERIC)
        if op == "%":
            return self.call(F.numeric_mod, [a, b], NUMERIC)
        self.numeric_ctx = True
        return self._fold(a, b, lambda xs: f"({xs[0]} {op} {xs[1]})", NUMERIC, raises)

    def _fold(self, a: _E, b: _E, build, t: SqlType, raises: bool) -> _E:
        if a.is_const and b.is_const:
            if a.value is None or b.value is None:
                return self.literal(None, t)
            try:
                with decimal.localcontext(F.NUMERIC_CONTEXT):
                    value = eval(build([a.code, b.code]), dict(self.ns))
                return self.literal(value, t)
            except EvalError:
                pass
        code, nullable = self.strict([a, b], build)
        return _E(code, t, nullable, raises or a.raises or b.raises)

    def _datetime_op(self, op: str, a: _E, b: _E, node: exp.Expression) -> _E | None:
        ka, kb = a.type.kind, b.type.kind
        D, TS, IV = TypeKind.DATE, TypeKind.TIMESTAMP, TypeKind.INTERVAL
        TZ = TypeKind.TIMESTAMPTZ
        INT4 = (TypeKind.SMALLINT, TypeKind.INTEGER)  # date + bigint does not exist
        if op == "+" and (kb in (D, TS, TZ) and (ka is IV or ka in INT4)):
            a, b, ka, kb = b, a, kb, ka
        if TZ in (ka, kb):
            return self._zoned_op(op, a, b, node)
        if ka is D and kb in INT4 and op in "+-":
            fn = F.date_plus_days if op == "+" else F.date_minus_days
            return self.call(fn, [a, b], DATE)
        if ka is D and kb is D and op == "-":
            code, nullable = self.strict([a, b], lambda xs: f"({xs[0]} - {xs[1]}).days")
            return _E(code, INTEGER, nullable, a.raises or b.raises)
        if ka in (D, TS) and kb is IV and op in "+-":
            if ka is D:
                a = self.cast(a, TIMESTAMP, node)
            fn = F.ts_plus_interval if op == "+" else F.ts_minus_interval
            return self.call(fn, [a, b], TIMESTAMP)
        if ka in (D, TS) and kb in (D, TS) and op == "-" and TS in (ka, kb):
            a, b = self.cast(a, TIMESTAMP, node), self.cast(b, TIMESTAMP, node)
            code, nullable = self.strict([a, b], lambda xs: f"({xs[0]} - {xs[1]})")
            return _E(code, INTERVAL, nullable, a.raises or b.raises)
        if ka is IV and kb is IV and op in "+-":
            if isinstance(a.value, F.Interval) or isinstance(b.value, F.Interval):
                raise _unsupported(node, "arithmetic between intervals with months")
            code, nullable = self.strict([a, b], lambda xs: f"({xs[0]} {op} {xs[1]})")
            return _E(code, INTERVAL, nullable, a.raises or b.raises)
        if op == "*" and kb is IV and (a.type.is_numeric_category or ka is TypeKind.UNKNOWN):
            a, b, ka, kb = b, a, kb, ka
        if ka is IV and op in "*/" and (b.type.is_numeric_category or kb is TypeKind.UNKNOWN):
            b = self.cast(b, DOUBLE, node)  # interval_mul(interval, float8): a real widened
            fn = PI.interval_mul if op == "*" else PI.interval_div
            return self.call(fn, [a, b], INTERVAL)
        return None

    def _zoned_op(self, op: str, a: _E, b: _E, node: exp.Expression) -> _E | None:
        """timestamptz +/- interval (in the session's TimeZone) and timestamptz - timestamptz."""
        ka, kb = a.type.kind, b.type.kind
        TZ = TypeKind.TIMESTAMPTZ
        if ka is TZ and kb is TypeKind.INTERVAL and op in "+-":
            if b.interval is None:  # a value: its fields at run time (PgInterval)
                zone = self.session_zone(node, f"timestamptz {op} interval")
                extra = f", {self.const_name(zone)}"
                sign = self.literal(1 if op == "+" else -1, INTEGER)
                return self.call(Z.plus_interval_value, [a, b, sign], TIMESTAMPTZ, extra=extra)
            months, days, micros = b.interval
            if op == "-":
                months, days, micros = -months, -days, -micros
            zone = self.session_zone(node, f"timestamptz {op} interval")
            extra = f", {months}, {days}, {micros}, {self.const_name(zone)}"
            return self.call(Z.plus_interval, [a], TIMESTAMPTZ, extra=extra)
        dt = (TypeKind.DATE, TypeKind.TIMESTAMP, TZ)
        if op == "-" and ka in dt and kb in dt:
            a, b = self.cast(a, TIMESTAMPTZ, node), self.cast(b, TIMESTAMPTZ, node)
            code, nullable = self.strict([a, b], lambda xs: f"({xs[0]} - {xs[1]})")
            return _E(code, INTERVAL, nullable, a.raises or b.raises)
        return None

    def _neg(self, a: _E, node: exp.Expression) -> _E:
        t = a.type
        if t.kind is TypeKind.UNKNOWN:
            a = self.cast(a, NUMERIC if "." in str(a.value) else INTEGER, node)
            t = a.type
        if t.is_integer:
            lo, hi, msg = INT_RANGES[t.kind]
            r = self.tmp()
            if a.is_const and a.value is not None:
                v = -a.value
                if lo <= v <= hi:
                    return self.literal(v, t.unconstrained())
            build = lambda xs: f"({r} if ({r} := -{xs[0]}) <= {hi} else _err({msg!r}))"  # noqa: E731
            code, nullable = self.strict([a], build)
            return _E(code, t.unconstrained(), nullable, True)
        if t.is_numeric_category or t.kind is TypeKind.INTERVAL:
            self.numeric_ctx |= t.kind is TypeKind.NUMERIC
            if a.is_const and a.value is not None:
                return self.literal(-a.value, t.unconstrained())
            code, nullable = self.strict([a], lambda xs: f"(-{xs[0]})")
            return _E(code, t.unconstrained(), nullable, a.raises)
        raise UnsupportedSQL(f"operator does not exist: - {t} {_where(node)}")

    def c_Neg(self, node: exp.Neg) -> _E:
        a = self.compile(node.this)
        if a.type.kind is TypeKind.UNKNOWN:  # - NULL, - '1': several operators would fit
            raise UnsupportedSQL(f"operator is not unique: - unknown {_where(node)}")
        return self._neg(a, node)

    # -- strings -------------------------------------------------------------------------------
    def c_DPipe(self, node: exp.DPipe) -> _E:
        a, b = self.compile(node.this), self.compile(node.expression)
        kinds = {a.type.kind, b.type.kind}
        if kinds <= {TypeKind.BYTEA, TypeKind.UNKNOWN} and TypeKind.BYTEA in kinds:  # byteacat
            a, b = self.cast(a, BYTEA, node), self.cast(b, BYTEA, node)
            code, nullable = self.strict([a, b], lambda xs: f"({xs[0]} + {xs[1]})")
            return _E(code, BYTEA, nullable, a.raises or b.raises)
        if not (a.type.is_string or a.type.kind is TypeKind.UNKNOWN) and not (
            b.type.is_string or b.type.kind is TypeKind.UNKNOWN
        ):
            raise UnsupportedSQL(f"operator does not exist: {a.type} || {b.type} {_where(node)}")
        if kinds == {TypeKind.JSONB, TypeKind.UNKNOWN}:  # jsonb || jsonb, the literal as jsonb
            raise _unsupported(node, "jsonb || jsonb (concatenating json documents)")
        if TypeKind.ARRAY in kinds:  # anyarray || anyelement: not text
            raise UnsupportedSQL(
                f"operator does not exist: {a.type} || {b.type} {_where(node)}; incview does "
                "not concatenate arrays"
            )
        a, b = self.cast(a, TEXT, node), self.cast(b, TEXT, node)
        if a.is_const and b.is_const:
            return self.literal(None if None in (a.value, b.value) else a.value + b.value, TEXT)
        code, nullable = self.strict([a, b], lambda xs: f"({xs[0]} + {xs[1]})")
        return _E(code, TEXT, nullable, a.raises or b.raises)

    def c_Concat(self, node: exp.Concat) -> _E:
        parts = []
        raises = False
        for arg in node.expressions:
            e = self.padded(self.compile(arg))  # each argument's output text
            raises |= e.raises
            if e.is_const and e.value is None:
                continue
            if e.type.kind is TypeKind.BOOLEAN:
                conv = "_F.bool_out"
            elif e.type.is_string or e.type.kind is TypeKind.UNKNOWN or e.type.text_carried:
                conv = ""  # (jsonb, inet, cidr, enum: the value is its output text)
            else:
                conv = self.helper(self._to_text(e.type, arg))
            if e.nullable:
                t = self.tmp()
                parts.append(f"('' if ({t} := {e.code}) is None else {conv}({t}))")
            else:
                parts.append(f"{conv}({e.code})")
        code = "(" + " + ".join(parts) + ")" if parts else "''"
        return _E(code, TEXT, False, raises)

    def _str1(self, node: exp.Expression, fn: str, type_: SqlType = TEXT) -> _E:
        s = self._text_arg(node.this, type(node).__name__.lower())
        code, nullable = self.strict([s], lambda xs: fn.format(xs[0]))
        return _E(code, type_, nullable, s.raises)

    def c_Lower(self, node: exp.Lower) -> _E:
        return self._str1(node, "_F.ascii_lower({})")

    def c_Upper(self, node: exp.Upper) -> _E:
        return self._str1(node, "_F.ascii_upper({})")

    def c_Length(self, node: exp.Length) -> _E:
        return self._str1(node, "len({})", INTEGER)

    def c_Reverse(self, node: exp.Reverse) -> _E:
        return self._str1(node, "{}[::-1]")

    def _int_arg(self, node: exp.Expression) -> _E:
        e = self.compile(node)
        if e.type.kind is TypeKind.UNKNOWN:
            return self.cast(e, INTEGER, node)
        if e.type.kind in (TypeKind.SMALLINT, TypeKind.INTEGER):
            return e
        # Postgres converts bigint, numeric and floats to integer only when told: its function
        # (left(text, bigint)...) does not exist
        raise UnsupportedSQL(
            f"an integer argument is required, not {e.type} {_where(node)}; Postgres casts "
            f"{e.type} to integer only explicitly: add ::int"
        )

    def c_Substring(self, node: exp.Substring) -> _E:
        s = self._text_arg(node.this, "substring")
        given = [node.args[k] for k in ("start", "length") if node.args.get(k) is not None]
        kinds = [self.compile(a).type.kind for a in given]
        if kinds and (
            kinds[0] in (TypeKind.TEXT, TypeKind.VARCHAR, TypeKind.CHAR)
            or all(k is TypeKind.UNKNOWN for k in kinds)
        ):  # substring(s from 'x'), substring(s, '2', '3'): Postgres' regular expression forms
            raise _unsupported(node, "substring(... from <pattern>)")
        start = self._int_arg(given[0]) if given else self.literal(1, INTEGER)
        args = [s, start]
        if node.args.get("length") is not None:
            args.append(self._int_arg(node.args["length"]))
        return self.call(F.substring, args, TEXT, raises=len(args) == 3)

    def c_Trim(self, node: exp.Trim) -> _E:
        s = self._text_arg(node.this, "trim")
        chars = node.args.get("expression")
        c = self._text_arg(chars, "trim") if chars is not None else self.literal(" ", TEXT)
        pos = (node.args.get("position") or "BOTH").upper()
        method = {"BOTH": "strip", "LEADING": "lstrip", "TRAILING": "rstrip"}[pos]
        if node.args.get("collation"):
            raise _unsupported(node, "TRIM with COLLATE")
        code, nullable = self.strict([s, c], lambda xs: f"{xs[0]}.{method}({xs[1]})")
        return _E(code, TEXT, nullable, s.raises or c.raises)

    def c_Replace(self, node: exp.Replace) -> _E:
        args = [
            self._text_arg(node.this, "replace"),
            self._text_arg(node.expression, "replace"),
            self._text_arg(node.args["replacement"], "replace"),
        ]
        return self.call(F.replace, args, TEXT, raises=False)

    def c_SplitPart(self, node: exp.SplitPart) -> _E:
        args = [
            self._text_arg(node.this, "split_part"),
            self._text_arg(node.args["delimiter"], "split_part"),
            self._int_arg(node.args["part_index"]),
        ]
        return self.call(F.split_part, args, TEXT)

    def c_StrPosition(self, node: exp.StrPosition) -> _E:
        if node.args.get("position") is not None or node.args.get("occurrence") is not None:
            raise _unsupported(node, "strpos with a start position")
        s = self._text_arg(node.this, "position")
        sub = self._text_arg(node.args["substr"], "position")
        code, nullable = self.strict([s, sub], lambda xs: f"({xs[0]}.find({xs[1]}) + 1)")
        return _E(code, INTEGER, nullable, s.raises or sub.raises)

    def c_Left(self, node: exp.Left) -> _E:
        s = self._text_arg(node.this, "left")
        n = self._int_arg(node.expression)
        code, nullable = self.strict([s, n], lambda xs: f"{xs[0]}[:{xs[1]}]")
        return _E(code, TEXT, nullable, s.raises or n.raises)

    def c_Right(self, node: exp.Right) -> _E:
        s = self._text_arg(node.this, "right")
        n = self._int_arg(node.expression)
        return self.call(F.right, [s, n], TEXT, raises=False)

    def c_Repeat(self, node: exp.Repeat) -> _E:
        s = self._text_arg(node.this, "repeat")
        n = self._int_arg(node.args["times"])
        return self.call(F.repeat, [s, n], TEXT, raises=False)

    # -- conditionals --------------------------------------------------------------------------
    def c_Case(self, node: exp.Case) -> _E:
        subject = node.this
        ifs = node.args.get("ifs") or []
        results = [self.compile(i.args["true"]) for i in ifs]
        default = node.args.get("default")
        results.append(
            self.compile(default) if default is not None else self.literal(None, UNKNOWN)
        )
        # Postgres resolves the result type from the ELSE branch first, then the THENs
        if default is not None:
            unified, t = self.unify([results[-1], *results[:-1]], node, "CASE", select=True)
            results = [*unified[1:], unified[0]]
        else:
            results, t = self.unify(results, node, "CASE", select=True)
        if subject is not None:
            subj = self.compile(subject)
            if subj.type.kind is TypeKind.UNKNOWN:  # Postgres reads an untyped subject as text
                subj = self.cast(subj, TEXT, node)
            whens = [self.compile(i.this) for i in ifs]
            unified, ct = self.unify([subj, *whens], node, "CASE/WHEN", free=True)
            _no_json_equality(ct, node)
            subj, whens = unified[0], unified[1:]
            if subj.simple:
                name, first = subj.code, subj.code
            else:
                name = self.tmp()
                first = f"({name} := {subj.code})"
            conds = []
            for k, w in enumerate(whens):  # Postgres' x = w: NULL if either is NULL, NaN = NaN
                x = first if k == 0 else name
                if w.is_const and w.value is None:
                    conds.append(f"({x} is None and False)" if x != name else "False")
                    continue
                if w.simple or not w.nullable:
                    wn, wtest = w.code, (f" and {w.code} is not None" if w.nullable else "")
                else:
                    wn = self.tmp()
                    wtest = f" and ({wn} := {w.code}) is not None"
                eq = self.compare_code("==", subj, w, name, wn)
                # a simple subject that is never NULL (a literal) needs no test (nor a walrus)
                xtest = "True" if subj.simple and not subj.nullable else f"{x} is not None"
                conds.append(f"({xtest}{wtest} and {eq})")
            raises = subj.raises or any(w.raises for w in whens)
        else:
            cond_es = [self._bool(i.this) for i in ifs]
            conds = [c.code for c in cond_es]
            raises = any(c.raises for c in cond_es)
        code = results[-1].code
        for cond, r in zip(reversed(conds), reversed(results[:-1]), strict=True):
            code = f"({r.code} if {cond} else {code})"
        nullable = any(r.nullable for r in results)
        return _E(code, t, nullable, raises or any(r.raises for r in results))

    def c_If(self, node: exp.If) -> _E:
        case = exp.Case(
            ifs=[exp.If(this=node.this, true=node.args["true"])], default=node.args.get("false")
        )
        return self.compile(case)

    def c_Coalesce(self, node: exp.Coalesce) -> _E:
        args = [self.compile(a) for a in [node.this, *node.expressions]]
        args, t = self.unify(args, node, "COALESCE", select=True)
        code = None
        kept: list[_E] = []
        for a in args:
            if a.is_const and a.value is None:
                continue
            kept.append(a)
            if not a.nullable:
                break
        if not kept:
            return self.literal(None, t)
        code = kept[-1].code
        for a in reversed(kept[:-1]):
            if a.simple:
                code = f"({a.code} if {a.code} is not None else {code})"
            else:
                n = self.tmp()
                code = f"({n} if ({n} := {a.code}) is not None else {code})"
        return _E(code, t, kept[-1].nullable, any(a.raises for a in kept))

    def c_Nullif(self, node: exp.Nullif) -> _E:
        """NULL if the arguments are equal (as ``=`` compares them), else the first argument,
        of the type that operator takes it as (nullif(a, r) is double precision, nullif(si, a)
        smallint, nullif(v, '') text)."""
        a, b = self.compile(node.this), self.compile(node.expression)
        if a.type.kind is TypeKind.UNKNOWN and not (b.type.is_string or b.type.kind is a.type.kind):
            a = self.cast(a, b.type.unconstrained(), node)  # a literal read as b's type
        n = self.tmp()
        first = _E(n, a.type, a.nullable, False, simple=True)  # a, evaluated once
        x, y = self._compare_operands(first, b, node)
        t = _nullif_type(a.type, b.type, common_type([a.type, b.type]) or x.type)
        result = self.coerce(first, t, node)
        equal = self.compare_code("==", x, y, x.code, y.code)  # NaN = NaN
        code = f"(None if ({n} := {a.code}, {equal})[1] else {result.code})"
        return _E(code, t, True, a.raises or b.raises or result.raises)

    def _greatest_least(self, node: exp.Expression, fn: str) -> _E:
        args = [self.compile(a) for a in [node.this, *node.expressions]]
        args, t = self.unify(args, node, fn.upper(), select=True)
        self._require_order(t, node, fn.upper())
        if not any(a.nullable for a in args) and t.kind not in _NAN_KINDS:
            return _E(
                f"{'max' if fn == 'greatest' else 'min'}({', '.join(a.code for a in args)})",
                t,
                False,
                any(a.raises for a in args),
            )
        code = f"_F.{fn}({', '.join(a.code for a in args)})"
        return _E(code, t, True, any(a.raises for a in args))

    def c_Greatest(self, node: exp.Greatest) -> _E:
        return self._greatest_least(node, "greatest")

    def c_Least(self, node: exp.Least) -> _E:
        return self._greatest_least(node, "least")

    # -- math ----------------------------------------------------------------------------------
    def _num_arg(self, node: exp.Expression, what: str) -> _E:
        e = self.compile(node)
        if e.type.kind is TypeKind.UNKNOWN:
            e = self.cast(e, DOUBLE, node)
        if not e.type.is_numeric_category:
            raise UnsupportedSQL(f"function {what}({e.type}) does not exist {_where(node)}")
        return e

    def c_Abs(self, node: exp.Abs) -> _E:
        a = self._num_arg(node.this, "abs")
        t = a.type.unconstrained()
        if t.is_integer:
            lo, hi, msg = INT_RANGES[t.kind]
            r = self.tmp()
            code, nullable = self.strict(
                [a], lambda xs: f"({r} if ({r} := abs({xs[0]})) <= {hi} else _err({msg!r}))"
            )
            return _E(code, t, nullable, True)
        self.numeric_ctx |= t.kind is TypeKind.NUMERIC
        code, nullable = self.strict([a], lambda xs: f"abs({xs[0]})")
        return _E(code, t, nullable, a.raises)

    def c_Round(self, node: exp.Round) -> _E:
        a = self._num_arg(node.this, "round")
        places = node.args.get("decimals")
        if places is not None:
            if a.type.is_float:
                raise UnsupportedSQL(
                    f"function round(double precision, integer) does not exist {_where(node)}; "
                    "cast the first argument to numeric"
                )
            a = self.cast(a, NUMERIC, node)
            return self.call(F.numeric_round, [a, self._int_arg(places)], NUMERIC)
        if a.type.kind is TypeKind.NUMERIC:
            return self.call(F.numeric_round, [a], NUMERIC)
        return self.call(F.float_round, [self.cast(a, DOUBLE, node)], DOUBLE)

    def _floor_ceil(self, node: exp.Expression, rounding: str, pyfn: str) -> _E:
        if node.args.get("decimals") is not None or node.args.get("to") is not None:
            raise _unsupported(node, f"{pyfn} with a scale")
        a = self._num_arg(node.this, pyfn)
        if a.type.kind is TypeKind.NUMERIC:
            return self.call(F.numeric_trunc_scale, [a], NUMERIC, extra=f", {rounding!r}")
        a = self.cast(a, DOUBLE, node)
        return self.call(F.float_floor if pyfn == "floor" else F.float_ceil, [a], DOUBLE, False)

    def c_Floor(self, node: exp.Floor) -> _E:
        return self._floor_ceil(node, decimal.ROUND_FLOOR, "floor")

    def c_Ceil(self, node: exp.Ceil) -> _E:
        return self._floor_ceil(node, decimal.ROUND_CEILING, "ceil")

    # -- date/time -----------------------------------------------------------------------------
    def c_TimestampTrunc(self, node: exp.TimestampTrunc) -> _E:
        unit_node = node.args.get("unit")
        unit = F.trunc_unit(unit_node.name) if unit_node is not None else None
        if unit is None:
            raise _unsupported(node, f"date_trunc unit {unit_node.name if unit_node else '?'!r}")
        zone_node = node.args.get("zone")
        v = self.compile(node.this)
        if v.type.kind is TypeKind.UNKNOWN:
            if zone_node is None:
                raise _ambiguous(node, "date_trunc(unknown, unknown)")
            v = self.cast(v, TIMESTAMPTZ, node)
        if v.type.kind is TypeKind.TIMESTAMP and zone_node is None:
            return self.call(F.date_trunc, [self.literal(unit, TEXT), v], TIMESTAMP, raises=False)
        if v.type.kind not in (TypeKind.DATE, TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ):
            raise _unsupported(node, f"date_trunc on {v.type}")
        if zone_node is not None:
            zone = self.named_zone(zone_node, node, "date_trunc's time zone")
        else:
            what = f"date_trunc on {v.type}"
            if self.time_zone.name is None and v.type.kind is TypeKind.DATE:
                # the message of a planning without a TimeZone: how to avoid depending on it
                what += " (cast it to stay zone-free: date_trunc('month', d::timestamp))"
            zone = self.session_zone(node, what)
        v = self.cast(v, TIMESTAMPTZ, node)  # Postgres promotes date and timestamp
        return self.zone_call(Z.date_trunc, [self.literal(unit, TEXT), v], TIMESTAMPTZ, zone)

    def named_zone(self, zone_node: exp.Expression, node: exp.Expression, what: str):
        """The ``ZoneInfo`` of a constant zone name (AT TIME ZONE, date_trunc's third argument).

        Postgres reads a name it knows as an abbreviation ('EST', 'CET', 'PST') as that fixed
        offset before trying the tz database, and accepts POSIX zone specs: only full IANA
        names ('Region/City') and 'UTC' are taken, whose meaning is the same in both."""
        z = self.compile(zone_node)
        if not (z.is_const and isinstance(z.value, str)):
            raise _unsupported(
                node, f"{what} given by anything but a zone name literal", "write 'Region/City'"
            )
        name = z.value.strip()
        if "/" not in name and name.upper() not in ("UTC", "GMT"):
            raise _unsupported(
                node,
                f"time zone {name!r} as {what}",
                "write a full IANA zone name such as 'America/New_York' or 'UTC' (Postgres reads "
                "abbreviations and POSIX specs by rules of its own)",
            )
        try:
            return Z.load_zone("UTC" if name.upper() in ("UTC", "GMT") else name)
        except ValueError:
            raise UnsupportedSQL(f'time zone "{name}" not recognized {_where(node)}') from None

    def c_AtTimeZone(self, node: exp.AtTimeZone) -> _E:
        """``timestamptz AT TIME ZONE z`` -> the wall-clock timestamp in z; ``timestamp AT TIME
        ZONE z`` -> the timestamptz of that wall-clock time in z (a date is promoted to
        timestamptz first, in the session's TimeZone, as Postgres does)."""
        zone = self.named_zone(node.args["zone"], node, "AT TIME ZONE")
        v = self.compile(node.this)
        if v.type.kind in (TypeKind.UNKNOWN, TypeKind.DATE):
            v = self.cast(v, TIMESTAMPTZ, node)
        if v.type.kind is TypeKind.TIMESTAMPTZ:
            return self.zone_call(Z.to_local, [v], TIMESTAMP, zone)
        if v.type.kind is TypeKind.TIMESTAMP:
            return self.zone_call(Z.from_local, [v], TIMESTAMPTZ, zone)
        raise _unsupported(node, f"AT TIME ZONE on {v.type}")

    def _extract(
        self, node: exp.Expression, field_name: str, arg: exp.Expression, as_float: bool
    ) -> _E:
        v = self.compile(arg)
        if v.type.kind is TypeKind.UNKNOWN:
            raise _ambiguous(node, "date_part(unknown, unknown)" if as_float else "extract")
        f = F.extract_field_name(field_name)
        if v.type.kind is TypeKind.TIMESTAMPTZ:
            if f not in F.TIMESTAMP_FIELDS | Z.ZONE_FIELDS:
                raise UnsupportedSQL(
                    f'unit "{field_name.lower()}" not supported for type {v.type} {_where(node)}'
                )
            zone = self.session_zone(node, f"extract({f} from timestamptz)")
            fn = Z.date_part if as_float else Z.extract
            args = [self.literal(f, TEXT), v]
            return self.zone_call(fn, args, DOUBLE if as_float else NUMERIC, zone)
        if v.type.kind is TypeKind.TIMESTAMP:
            ok = f in F.TIMESTAMP_FIELDS
        elif v.type.kind is TypeKind.DATE:
            # date_part(text, date) is date_part($1, $2::timestamp): zone-free, epoch included
            ok = f in F.DATE_FIELDS or (as_float and f in F.TIMESTAMP_FIELDS)
            if as_float and ok:
                v = self.cast(v, TIMESTAMP, node)
        else:
            raise _unsupported(node, f"extract from {v.type}")
        if not ok:
            raise UnsupportedSQL(
                f'unit "{field_name.lower()}" not supported for type {v.type} {_where(node)}'
            )
        fn = F.date_part if as_float else F.extract
        return self.call(
            fn, [self.literal(f, TEXT), v], DOUBLE if as_float else NUMERIC, raises=False
        )

    def c_Extract(self, node: exp.Extract) -> _E:
        return self._extract(node, node.this.name, node.expression, as_float=False)

    # -- jsonb and arrays ----------------------------------------------------------------------
    def _json_get(self, node: exp.Expression, as_text: bool) -> _E:
        doc = self.compile(node.this)
        if doc.type.kind is TypeKind.UNKNOWN:  # json's and jsonb's operators would both fit
            op = "->>" if as_text else "->"
            raise UnsupportedSQL(f"operator is not unique: unknown {op} unknown {_where(node)}")
        if doc.type.kind is not TypeKind.JSONB:
            raise _unsupported(node, f"-> / ->> on {doc.type}", "cast the value to jsonb")
        path = node.expression
        keys: list[str | int] = []
        if isinstance(path, exp.Neg) and isinstance(path.this, exp.Literal) and path.this.is_int:
            keys.append(-int(path.this.this))  # j -> -1: the last element
        elif not isinstance(path, exp.JSONPath):
            raise _unsupported(node, "a key of -> / ->> that is not a constant")
        else:
            for step in path.expressions[1:]:
                index = isinstance(step, exp.JSONPathSubscript) and isinstance(step.this, int)
                if isinstance(step, exp.JSONPathKey) or index:
                    keys.append(step.this)
                else:
                    raise _unsupported(node, f"the json path step {step.sql()}")
        for n, key in enumerate(keys):
            last = n == len(keys) - 1
            text = as_text and last
            e = self.call(
                CV.jsonb_get, [doc, self.literal(key, TEXT), self.literal(text, BOOLEAN)],
                TEXT if text else JSONB, raises=False,
            )  # fmt: skip
            doc = _E(e.code, e.type, True, e.raises, e.value, e.simple)
        return doc

    def c_JSONExtract(self, node: exp.JSONExtract) -> _E:
        return self._json_get(node, as_text=False)

    def c_JSONExtractScalar(self, node: exp.JSONExtractScalar) -> _E:
        return self._json_get(node, as_text=True)

    def _jsonb_operand(self, node: exp.Expression, e: exp.Expression) -> _E:
        v = self.compile(e)
        if v.type.kind is TypeKind.UNKNOWN:
            v = self.cast(v, JSONB, node)
        if v.type.kind is not TypeKind.JSONB:
            raise _unsupported(node, f"{node.key} on {v.type}", "cast the value to jsonb")
        return v

    def _jsonb_operands(self, node: exp.Expression, op: str) -> tuple[_E, _E]:
        if all(isinstance(e, (exp.Literal, exp.Null)) for e in (node.this, node.expression)):
            # two untyped literals: jsonb's, arrays' and ranges' operators would all fit
            raise UnsupportedSQL(f"operator is not unique: unknown {op} unknown {_where(node)}")
        return self._jsonb_operand(node, node.this), self._jsonb_operand(node, node.expression)

    def c_ArrayContainsAll(self, node: exp.ArrayContainsAll) -> _E:  # jsonb @> jsonb
        a, b = self._jsonb_operands(node, "@>")
        return self.call(CV.jsonb_contains, [a, b], BOOLEAN, raises=False)

    def c_ArrayContainedBy(self, node: exp.ArrayContainedBy) -> _E:  # jsonb <@ jsonb
        a, b = self._jsonb_operands(node, "<@")
        return self.call(CV.jsonb_contains, [b, a], BOOLEAN, raises=False)

    def c_JSONBContainsTopKey(self, node: exp.JSONBContainsTopKey) -> _E:  # jsonb ? text
        doc = self._jsonb_operand(node, node.this)
        key = self.compile(node.expression)
        if not (key.type.is_string or key.type.kind is TypeKind.UNKNOWN):
            raise _unsupported(node, f"? with a {key.type} key")
        return self.call(CV.jsonb_has_key, [doc, key], BOOLEAN, raises=False)

    def c_Bracket(self, node: exp.Bracket) -> _E:
        arr = self.compile(node.this)
        if arr.type.kind is not TypeKind.ARRAY:
            raise _unsupported(node, f"a subscript of {arr.type}")
        if len(node.expressions) != 1 or isinstance(node.expressions[0], exp.Slice):
            raise _unsupported(node, "array slices and multi-dimensional subscripts")
        index = node.expressions[0]
        i = self.compile(index)
        if i.type.kind is TypeKind.UNKNOWN:
            i = self.cast(i, INTEGER, node)
        if not i.type.is_integer:
            raise _unsupported(node, f"an array subscript of type {i.type}")
        if _sqlglot_shifted(node):
            if i.is_const and i.value is not None:
                i = self.literal(i.value + 1, INTEGER)
            else:
                code, nullable = self.strict([i], lambda xs: f"({xs[0]} + 1)")
                i = _E(code, i.type, nullable, i.raises)
        # Postgres evaluates no subscript of a NULL array
        t, u, fn = self.tmp(), self.tmp(), self.helper(CV.array_subscript)
        code = (
            f"(None if ({t} := {arr.code}) is None else "
            f"(None if ({u} := {i.code}) is None else {fn}({t}, {u})))"
        )
        return _E(code, arr.type.element, True, arr.raises or i.raises)

    def _cardinality(self, node: exp.Expression, arg: exp.Expression) -> _E:
        arr = self.compile(arg)
        if arr.type.kind is not TypeKind.ARRAY:
            raise _unsupported(node, f"cardinality of {arr.type}")
        return self.call(CV.cardinality, [arr], INTEGER, raises=False)

    # Functions sqlglot leaves anonymous: name -> (the numbers of arguments it takes, the
    # method compiling a call). The inventory of the expression corpus reads this table.
    FUNCTIONS: dict[str, tuple[tuple[int, ...], str]] = {
        "cardinality": ((1,), "f_cardinality"),
        "jsonb_typeof": ((1,), "f_jsonb_function"),
        "jsonb_array_length": ((1,), "f_jsonb_function"),
        F.RAISE_FUNCTION: ((2,), "f_raise"),  # written by the planner only
        "date_part": ((2,), "f_date_part"),
        "octet_length": ((1,), "f_octet_length"),
    }

    def c_Anonymous(self, node: exp.Anonymous) -> _E:
        name = node.name.lower()
        counts, method = self.FUNCTIONS.get(name, ((), ""))
        if len(node.expressions) not in counts:
            raise self._unknown(node)
        return getattr(self, method)(node, name, *node.expressions)

    def f_cardinality(self, node: exp.Anonymous, name: str, arg: exp.Expression) -> _E:
        return self._cardinality(node, arg)

    def f_jsonb_function(self, node: exp.Anonymous, name: str, arg: exp.Expression) -> _E:
        doc = self._jsonb_operand(node, arg)
        if name == "jsonb_typeof":
            return self.call(CV.jsonb_typeof, [doc], TEXT, raises=False)
        return self.call(CV.jsonb_array_length, [doc], INTEGER, raises=True)

    def f_raise(self, node: exp.Anonymous, name: str, message, like: exp.Expression) -> _E:
        typed = self.compile(like)
        return _E(f"{self.helper(F.raise_error)}({message.this!r})", typed.type, True, True)

    def f_date_part(self, node: exp.Anonymous, name: str, unit, value: exp.Expression) -> _E:
        if not (isinstance(unit, exp.Literal) and unit.is_string):
            raise _unsupported(node, "date_part with a non-constant field")
        return self._extract(node, unit.this, value, as_float=True)

    def f_octet_length(self, node: exp.Anonymous, name: str, arg: exp.Expression) -> _E:
        s = self.padded(self._text_arg(arg, "octet_length"))
        code, nullable = self.strict([s], lambda xs: f"len({xs[0]}.encode())")
        return _E(code, INTEGER, nullable, s.raises)

    # -- sqlglot spellings of the same functions -----------------------------------------------
    def c_Var(self, node: exp.Var) -> _E:
        raise _unsupported(node, f"identifier {node.name}")

    def c_Pow(self, node: exp.Expression) -> _E:
        raise _unsupported(node, "power()/^")


def _nullif_type(a: SqlType, b: SqlType, common: SqlType) -> SqlType:
    """The type NULLIF(a, b) returns: the first argument's, as the ``=`` operator Postgres
    resolves for (a, b) takes it (cross-type operators keep it: int2 = int4, date = timestamp,
    float4 = float8; else both sides convert to the common type; strings compare as text but
    character with character)."""
    ka, kb = a.kind, b.kind
    strings = (TypeKind.CHAR, TypeKind.VARCHAR, TypeKind.UNKNOWN)
    if (a.is_string or ka is TypeKind.UNKNOWN) and (b.is_string or kb is TypeKind.UNKNOWN):
        # bpchareq when a character meets a character, varchar or literal; else texteq
        char = TypeKind.CHAR in (ka, kb) and ka in strings and kb in strings
        return SqlType(TypeKind.CHAR) if char else TEXT
    if ka is TypeKind.UNKNOWN:
        return common
    if ka is TypeKind.CIDR:  # network_eq takes inet
        return INET
    if kb is TypeKind.UNKNOWN or ka is kb:
        return a
    if (a.is_integer and b.is_integer) or (a.is_datetime and b.is_datetime):
        return a
    if ka is TypeKind.REAL and b.is_numeric_category:  # float48eq: the real stays real
        return a
    if b.is_float and not a.is_float:  # float84eq, float8eq: the first becomes float8
        return DOUBLE
    return a if common.kind is ka else common


def _no_json_equality(t: SqlType, node: exp.Expression) -> None:
    """IN and CASE x WHEN compare with =, which json does not have (as in Postgres)."""
    if t.kind is TypeKind.JSON:
        raise UnsupportedSQL(
            f"operator does not exist: json = json {_where(node)}; json has no comparison "
            "operators: cast it to jsonb"
        )


def _sqlglot_shifted(node: exp.Bracket) -> bool:
    """Whether sqlglot stored the subscript 0-based: it does when it types the subscript as an
    integer (ia[2] as 1, ia[i::int] as i::int + -1, ia[-1] as -2), not otherwise (ia[i]); its
    types of the stored subscript tell the same (``sqlglot...builders.apply_index_offset``)."""
    from sqlglot.optimizer.annotate_types import annotate_types

    array = annotate_types(node.this.copy(), dialect=DIALECT).type
    if array is not None and array.this not in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.ARRAY):
        return False
    index = annotate_types(node.expressions[0].copy(), dialect=DIALECT).type
    return index is not None and index.this in exp.DataType.INTEGER_TYPES


def _ambiguous(node: exp.Expression, signature: str) -> UnsupportedSQL:
    """Postgres' error for an untyped literal where several date/time types fit."""
    return UnsupportedSQL(
        f"function {signature} is not unique {_where(node)}; add an explicit cast "
        "('2024-01-05'::timestamp, ::timestamptz or ::date)"
    )


def _op_symbol(node: exp.Expression) -> str:
    sql_names = {exp.EQ: "=", exp.NEQ: "<>", exp.Nullif: "="}  # _COMPARISONS: Python operators
    return {**_COMPARISONS, **sql_names, **_PG_OPS}.get(type(node), type(node).__name__)


def _may_raise(node: exp.Expression) -> bool:
    return any(
        isinstance(n, (exp.Div, exp.Mod, exp.Cast, exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Func))
        for n in node.walk()
    )


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return not isinstance(v, float) or v == v
