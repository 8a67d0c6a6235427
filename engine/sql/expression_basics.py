"""The row expression compiler's building blocks: ``_E`` (a compiled sub-expression), the
errors naming a construct and its position, the tables of operators and NaN cases, and the
small type decisions the compiler's parts share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from engine.errors import UnsupportedSQL
from engine.sql import carried_values as CV
from engine.sql.parse import DIALECT
from engine.sql.types import (
    DOUBLE,
    INET,
    TEXT,
    SqlType,
    TypeKind,
)

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


def flatten_connective(node: exp.Expression, cls: type) -> list[exp.Expression]:
    """The operands of a chain of one connective (AND or OR), through parentheses, in order."""
    if isinstance(node, exp.Paren):
        return flatten_connective(node.this, cls)
    if isinstance(node, cls):
        return flatten_connective(node.this, cls) + flatten_connective(node.expression, cls)
    return [node]
