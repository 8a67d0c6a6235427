"""What the expression compiler supports, read off the compiler itself: the inventory an expression
corpus must exercise (``tests/sql/test_expression_inventory.py`` checks the corpus of
``tests/sql/test_expression_compiler.py`` against it).

The compiler dispatches on sqlglot node classes (its ``c_<Class>`` methods), on the names of the
functions sqlglot leaves anonymous (``FUNCTIONS``), on the types of operands and arguments, and
on date/time field and unit names. ``supported(refs, pg_function_names)`` probes each of these:

- ``("node", Class)``: every handler that compiles something (``REFUSALS`` only refuse,
  ``PLANNER_ONLY`` serve nodes the planner writes);
- ``("function", name)``: every name of ``_Compiler.FUNCTIONS`` (minus ``PLANNER_ONLY``);
- ``("spelling", name)``: every Postgres function name (``pg_proc``, passed in) that parses into
  constructs the compiler compiles (``ceiling`` -> Ceil, ``btrim`` -> Trim), minus
  ``SPELLINGS_REFUSED``;
- ``("operator", op, left kind, right kind)``: every binary operator over every pair of operand
  types it compiles (one column of each type of ``refs``, and untyped literals);
- ``("cast", source kind, target)``: every cast it compiles from those operands to ``TARGETS``;
- ``("argument", callee, slot, kind)``: for every call in the corpus (a function, CASE, IN,
  BETWEEN, unary minus...), every type each argument slot compiles with (the corpus' own calls
  are the templates: the others arguments stay as written);
- ``("field", function, field, kind)`` and ``("unit", unit, kind)``: every extract/date_part
  field of the compiler's tables (aliases included) and every date_trunc unit, per date/time type.

``covered(exprs, refs)`` reads the same items off a corpus. An item added to the compiler (a
handler, a function name, a type pair) is in ``supported`` at once: the test fails until the
corpus exercises it against Postgres. This module must not talk to Postgres (the caller passes
pg_proc's names) nor evaluate rows.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator

from sqlglot import exp

from engine.errors import UnsupportedSQL
from engine.sql import functions as F
from engine.sql import zoned_time as Z
from engine.sql.expression_compiler import ColumnRef, _Compiler, parse_expression
from engine.sql.time_zone import planning_time_zone
from engine.sql.types import SqlType, TypeKind, from_pg_name

Item = tuple[str, ...]

# handlers that exist to refuse a construct with a message: an expression each must refuse
REFUSALS: dict[str, str | exp.Expression] = {
    "Pow": "power(a, 2)",
    "SimilarTo": "s similar to 'a%'",
    "RegexpLike": "s ~ 'a'",
    "Var": exp.var("epoch"),  # a bare keyword: sqlglot's Var outside the places that read one
}
# handlers and functions for nodes only the planner writes (Postgres has no such function)
PLANNER_ONLY: dict[str, str] = {
    "If": "the planner's CASE branches (in_mark, scalar subqueries); c_Case reads them itself",
    F.RAISE_FUNCTION: "the planner's error for a scalar subquery of several rows",
}
# Postgres function names that parse into compiled constructs but are refused anyway, and why
SPELLINGS_REFUSED: dict[str, tuple[str, str]] = {  # name -> (why, an expression refused)
    "interval": ("interval(n) is a type modifier; a non-constant INTERVAL", "interval(a)"),
}
LEAVES = {"Column", "Identifier", "Literal", "Null", "Boolean", "Paren", "DataType", "Var"}
LEAVES |= {"JSONPath", "JSONPathRoot", "JSONPathKey", "JSONPathSubscript"}

# binary operators: sqlglot class -> the operator family an item names
OPERATORS: dict[type[exp.Expression], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.DPipe: "||",
    exp.EQ: "=",
    exp.NEQ: "=",
    exp.NullSafeEQ: "=",
    exp.NullSafeNEQ: "=",
    exp.LT: "<",
    exp.LTE: "<",
    exp.GT: "<",
    exp.GTE: "<",
    exp.Like: "like",
    exp.ILike: "ilike",
    exp.ArrayContainsAll: "@>",
    exp.ArrayContainedBy: "<@",
    exp.JSONBContainsTopKey: "?",
}
_PROBE_OPERATORS = {op: cls for cls, op in reversed(list(OPERATORS.items()))}
# nodes that are not calls: leaves, operators, casts, and the boolean connectives
_NOT_CALLS = LEAVES | {c.__name__ for c in OPERATORS} | {"Cast", "And", "Or", "Escape", "Interval"}

# untyped literals an operand may be (each probed; an item says "unknown")
UNKNOWN_LITERALS = [
    "NULL", "'1'", "'1.5'", "'2024-02-29'", "'2024-02-29 10:30'", "'2024-02-29 10:30+02'",
    "'1 day'", "'abc'", "'true'", '\'{"a": 1}\'', "'{1,2}'", "'10.0.0.1'", "'\\x01'",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
]  # fmt: skip
TARGETS = [
    "smallint", "integer", "bigint", "numeric", "numeric(6,2)", "real", "double precision",
    "text", "varchar", "varchar(3)", "character(3)", "boolean", "date", "timestamp",
    "timestamptz", "interval", "time", "uuid", "bytea", "jsonb", "json", "inet", "cidr",
    "text[]", "integer[]",
]  # fmt: skip
EXTRACT_FIELDS = sorted(F.TIMESTAMP_FIELDS | Z.ZONE_FIELDS | set(F._FIELD_ALIASES))
TRUNC_UNITS = sorted(F._TRUNC_UNITS)


def kind_name(t: SqlType) -> str:
    """An operand type as items name it: the type without its modifier (an array: element[])."""
    if t.kind is TypeKind.ARRAY:
        return kind_name(t.element) + "[]"
    return t.kind.value


def target_name(node: exp.DataType) -> str:
    t = from_pg_name(node.sql(dialect="postgres"))
    modifier = "(n)" if t.length is not None else "(p,s)" if t.precision is not None else ""
    return kind_name(t) + modifier


class Prober:
    """Compiles probes over ``refs`` under a TimeZone; ``kind`` of a sub-expression."""

    def __init__(self, refs: list[ColumnRef], time_zone: str) -> None:
        self.refs = refs
        self.time_zone = time_zone

    def compiles(self, node: exp.Expression) -> bool:
        try:
            self.kind(node)
        except UnsupportedSQL:
            return False
        return True

    def kind(self, node: exp.Expression) -> str:
        with planning_time_zone(self.time_zone):
            return kind_name(_Compiler(self.refs).compile(node).type)

    def operands(self) -> list[tuple[exp.Expression, str]]:
        """One column of each type of ``refs``, then every untyped literal."""
        seen: dict[str, exp.Expression] = {}
        for r in self.refs:
            seen.setdefault(kind_name(r.type), exp.column(r.name))
        out = [(node, kind) for kind, node in seen.items()]
        return out + [(parse_expression(lit), "unknown") for lit in UNKNOWN_LITERALS]


def handled_nodes() -> set[str]:
    return {name[2:] for name in dir(_Compiler) if name.startswith("c_")}


def function_names() -> set[str]:
    return set(_Compiler.FUNCTIONS)


def _classes(node: exp.Expression) -> set[str]:
    out = set()
    for n in node.walk():
        out.add(f"Anonymous:{n.name.lower()}" if isinstance(n, exp.Anonymous) else type(n).__name__)
    return out - LEAVES


def spellings(pg_function_names: Iterable[str]) -> set[str]:
    """The Postgres function names that parse (with 1 to 3 arguments) into nothing but
    constructs the compiler compiles."""
    ok = (handled_nodes() - set(REFUSALS) - {"Anonymous"}) | {
        f"Anonymous:{name}" for name in function_names()
    }
    out = set()
    for name in pg_function_names:
        for args in ("x", "x, y", "x, y, z"):
            try:
                node = parse_expression(f"{name}({args})")
            except Exception:  # noqa: BLE001 - sqlglot rejects this arity: try the next
                continue
            if _classes(node) <= ok:
                out.add(name.lower())
                break
    return out


def _call_slots(node: exp.Expression) -> Iterator[tuple[str, int | None, exp.Expression]]:
    """(slot, index in a list slot, argument) of a call's value arguments."""
    for key, value in node.args.items():
        values = value if isinstance(value, list) else [value]
        for i, v in enumerate(values):
            if isinstance(v, exp.Expression) and not isinstance(
                v, (exp.DataType, exp.Var, exp.JSONPath, exp.If, exp.Identifier)
            ):
                yield (
                    (f"{key}[]" if isinstance(value, list) else key),
                    (i if isinstance(value, list) else None),
                    v,
                )


def callee(node: exp.Expression) -> str:
    return (
        f"Anonymous:{node.name.lower()}" if isinstance(node, exp.Anonymous) else type(node).__name__
    )


def _is_call(node: exp.Expression) -> bool:
    return type(node).__name__ not in _NOT_CALLS and f"c_{type(node).__name__}" in dir(_Compiler)


def covered(exprs: list[str], refs: list[ColumnRef], time_zone: str) -> set[Item]:
    """The items a corpus of expressions (compiled over ``refs``) exercises."""
    p = Prober(refs, time_zone)
    items: set[Item] = set()
    for sql in exprs:
        for n in parse_expression(sql).walk():
            name = type(n).__name__
            items.add(("node", name))
            if isinstance(n, exp.Anonymous):
                items.add(("function", n.name.lower()))
            if type(n) in OPERATORS:
                items.add(("operator", OPERATORS[type(n)], p.kind(n.this), p.kind(n.expression)))
            elif isinstance(n, exp.Cast):
                items.add(("cast", p.kind(n.this), target_name(n.args["to"])))
            elif _is_call(n):
                for slot, _i, arg in _call_slots(n):
                    items.add(("argument", callee(n), slot, p.kind(arg)))
            items |= _field_items(n, p)
    items |= {("spelling", name) for name in spelled(exprs)}
    return items


def _field_items(n: exp.Expression, p: Prober) -> set[Item]:
    if isinstance(n, exp.Extract) or isinstance(n, exp.Anonymous) and n.name == "date_part":
        function = "extract" if isinstance(n, exp.Extract) else "date_part"
        field, value = (n.this, n.expression) if function == "extract" else n.expressions
        name = field.name.lower()
        return {("field alias", name), ("field", function, name, p.kind(value))}
    if isinstance(n, exp.TimestampTrunc):
        unit, kind = n.args["unit"].name.lower(), p.kind(n.this)
        zone = {("unit", "with a zone", kind)} if n.args.get("zone") is not None else set()
        return {("unit", unit, kind), ("unit alias", unit)} | zone
    return set()


def spelled(exprs: Iterable[str]) -> set[str]:
    """Function names the corpus writes as calls (``name(``)."""
    return {m.lower() for sql in exprs for m in _CALL.findall(sql)}


_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def supported(
    refs: list[ColumnRef],
    time_zone: str,
    templates: Iterable[str],
    pg_function_names: Iterable[str],
) -> set[Item]:
    """Every item the compiler supports over ``refs``' types; ``templates`` (the corpus) give
    the calls whose argument types are probed."""
    p = Prober(refs, time_zone)
    items: set[Item] = {("node", n) for n in handled_nodes() - set(REFUSALS) - set(PLANNER_ONLY)}
    items |= {("function", f) for f in function_names() - set(PLANNER_ONLY)}
    items |= {("spelling", s) for s in spellings(pg_function_names) - set(SPELLINGS_REFUSED)}
    operands = p.operands()
    for (left, lk), (right, rk) in itertools.product(operands, repeat=2):
        for op, cls in _PROBE_OPERATORS.items():
            item = ("operator", op, lk, rk)
            if item not in items and p.compiles(cls(this=left.copy(), expression=right.copy())):
                items.add(item)
    values = [(o, k) for o, k in operands if not isinstance(o, exp.Null)]  # NULL casts to all
    for (value, kind), target in itertools.product(values, TARGETS):
        to = parse_expression(f"CAST(NULL AS {target})").args["to"]
        item = ("cast", kind, target_name(to))
        if item not in items and p.compiles(exp.Cast(this=value.copy(), to=to)):
            items.add(item)
    items |= _argument_items(p, templates, operands)
    items |= _field_and_unit_items(p, operands)
    return items


def _argument_items(
    p: Prober, templates: Iterable[str], operands: list[tuple[exp.Expression, str]]
) -> set[Item]:
    items: set[Item] = set()
    seen: set[tuple] = set()
    for sql in templates:
        for n in parse_expression(sql).walk():
            if not _is_call(n):
                continue
            slots = list(_call_slots(n))
            shape = (callee(n), tuple((s, p.kind(a)) for s, _i, a in slots))
            if shape in seen:
                continue
            seen.add(shape)
            for (slot, index, _arg), (operand, kind) in itertools.product(slots, operands):
                item = ("argument", callee(n), slot, kind)
                if item in items:
                    continue
                probe = n.copy()
                key = slot.rstrip("[]")
                if index is None:
                    probe.set(key, operand.copy())
                else:
                    values = list(probe.args[key])
                    values[index] = operand.copy()
                    probe.set(key, values)
                if p.compiles(probe):
                    items.add(item)
    return items


def _field_and_unit_items(p: Prober, operands: list[tuple[exp.Expression, str]]) -> set[Item]:
    """Every field name per date/time type; every alias, and the zone argument, once."""
    items: set[Item] = set()
    datetimes = [(o, k) for o, k in operands if k != "unknown"]
    for (value, kind), field in itertools.product(datetimes, EXTRACT_FIELDS):
        alias = field in F._FIELD_ALIASES
        if p.compiles(exp.Extract(this=exp.var(field), expression=value.copy())):
            items.add(("field alias", field) if alias else ("field", "extract", field, kind))
        call = exp.Anonymous(
            this="date_part", expressions=[exp.Literal.string(field), value.copy()]
        )
        if p.compiles(call):
            items.add(("field alias", field) if alias else ("field", "date_part", field, kind))
    for (value, kind), unit in itertools.product(datetimes, TRUNC_UNITS):
        alias = F._TRUNC_UNITS[unit] != unit
        if p.compiles(exp.TimestampTrunc(this=value.copy(), unit=exp.var(unit))):
            items.add(("unit alias", unit) if alias else ("unit", unit, kind))
        zoned = exp.TimestampTrunc(this=value.copy(), unit=exp.var(unit), zone=_UTC.copy())
        if p.compiles(zoned):
            items.add(("unit", "with a zone", kind))
    return items


_UTC = exp.Literal.string("UTC")
