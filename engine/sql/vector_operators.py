"""The vectorized compiler's rules for operators: arithmetic, casts, text functions, LIKE.

``OperatorRules`` is the part of ``VectorCompiler`` (``engine.sql.vector_compiler``) that maps
``+ - * / %``, unary minus, ``CAST``, ``||``, lower/upper/length, SUBSTRING and LIKE onto kernels
(``number_kernels``, ``vector_kernels``, ``vector_casts``), with the result types and operand
conversions of the row compiler (``ExpressionTypes``). It relies on the compiler's ``compile``,
``operand``, ``cast`` and ``types``; a rule returns None where no kernel is exact. This module
must not evaluate rows itself.
"""

from __future__ import annotations

from sqlglot import exp

from engine.dataflow.columnar import number_kernels as N
from engine.dataflow.columnar import vector_kernels as K
from engine.dataflow.columnar.vectors import Kind, Vec
from engine.dataflow.errs import EvalError
from engine.sql import functions as F
from engine.sql.types import BOOLEAN, DOUBLE, INT_RANGES, TypeKind
from engine.sql.types import SqlType as T
from engine.sql.vector_nodes import Inputs, VNode

_STRING_FUNCTIONS = {exp.Lower: "lower", exp.Upper: "upper", exp.Length: "length"}
_INTEGERS = (TypeKind.SMALLINT, TypeKind.INTEGER, TypeKind.BIGINT)


def _like_kernel(tokens: list[str]) -> tuple[str, str] | None:
    """(test, literal) of a LIKE pattern's tokens: equals, starts_with, ends_with, contains, or
    else regex (an RE2 expression of the whole pattern)."""
    literal = [tok for tok in tokens if tok.startswith("L")]
    text = "".join(tok[1] for tok in literal)
    if len(literal) == len(tokens):
        return "equals", text
    if tokens == ["%"]:
        return "contains", ""
    inner = tokens[1:-1]
    if tokens[-1] == "%" and len(literal) == len(tokens) - 1:
        return "starts_with", text
    if tokens[0] == "%" and len(literal) == len(tokens) - 1:
        return "ends_with", text
    if len(tokens) > 2 and tokens[0] == tokens[-1] == "%" and len(literal) == len(inner):
        return "contains", text
    return "regex", _re2(tokens)


def _re2(tokens: list[str]) -> str:
    """A LIKE pattern's tokens as an RE2 regular expression matching the whole text ('%' any
    characters, newlines too; '_' one character; literals escaped: ASCII letters and digits as
    they are, ASCII punctuation after a backslash, anything else by its code point)."""
    out = [r"(?s)\A"]
    for tok in tokens:
        if tok == "%":
            out.append(".*")
        elif tok == "_":
            out.append(".")
        else:
            c = tok[1]
            if c.isascii() and c.isalnum():
                out.append(c)
            elif c.isascii() and not c.isspace() and c.isprintable():
                out.append("\\" + c)
            else:
                out.append(f"\\x{{{ord(c):X}}}")
    out.append(r"\z")
    return "".join(out)


class OperatorRules:
    """Arithmetic, casts and text rules of ``VectorCompiler`` (a mixin)."""

    # -- arithmetic -----------------------------------------------------------------------------
    def _arith(self, node: exp.Expression, t: T) -> VNode | None:
        op = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}[type(node)]
        ta, tb = self.types.arithmetic(node)
        a, b = self.operand(node.this, ta), self.operand(node.expression, tb)
        if a is None or b is None:
            return None
        if a.type.is_numeric_category and b.type.is_numeric_category:
            return self._numeric_op(op, a, b, t)
        return self._datetime_op(op, a, b, t)

    v_Add = v_Sub = v_Mul = v_Div = v_Mod = _arith

    def _numeric_op(self, op: str, a: VNode, b: VNode, t: T) -> VNode | None:
        ar, br = a.run, b.run
        if t.is_integer:
            lo, hi, _ = INT_RANGES[t.kind]
            if op == "/":
                return VNode(lambda inp: N.int_div(ar(inp), br(inp), lo, hi), t)
            if op == "%":
                return VNode(lambda inp: N.int_mod(ar(inp), br(inp)), t)
            return VNode(lambda inp: N.int_arith(op, ar(inp), br(inp), lo, hi), t)
        if t.kind is TypeKind.DOUBLE and op in "+-*/":
            a, b = self._as_float(a), self._as_float(b)
            if a is None or b is None:
                return None
            ar, br = a.run, b.run
            return VNode(lambda inp: N.float_arith(op, ar(inp), br(inp)), t)
        if t.kind is TypeKind.NUMERIC and op in "+-*" and Kind.FLOAT not in (a.kind, b.kind):
            return VNode(lambda inp: N.numeric_arith(op, ar(inp), br(inp)), t)
        return None  # real arithmetic (float4 rounding), numeric / and %: per row

    def _as_float(self, v: VNode) -> VNode | None:
        """An operand of float8 arithmetic: the row compiler casts a numeric to float8, and
        Python's int-float arithmetic converts an int with float(v)."""
        if v.kind is Kind.FLOAT:
            return v
        if v.kind is Kind.INT:
            run = v.run
            return VNode(lambda inp: N.int_to_float(run(inp), exact=False), v.type)
        return self.cast(v, DOUBLE) if v.kind is Kind.NUMERIC else None

    def _datetime_op(self, op: str, a: VNode, b: VNode, t: T) -> VNode | None:
        if op == "+" and b.kind is Kind.DATE and a.kind is Kind.INT:
            a, b = b, a
        if a.kind is Kind.DATE and b.kind is Kind.INT and op in "+-" and t.kind is TypeKind.DATE:
            if op == "-":
                b = self._neg(b)
                if b is None:
                    return None
            ar, br = a.run, b.run
            return VNode(lambda inp: K.date_plus_days(ar(inp), br(inp)), t)
        if a.kind is Kind.DATE and b.kind is Kind.DATE and op == "-" and t.is_integer:
            ar, br = a.run, b.run
            return VNode(lambda inp: K.date_minus_date(ar(inp), br(inp)), t)
        return None

    def _neg(self, v: VNode) -> VNode | None:
        run = v.run
        if v.kind is Kind.INT:
            _, hi, _ = INT_RANGES[v.type.kind]
            return VNode(lambda inp: N.int_neg(run(inp), hi), v.type.unconstrained())
        if v.kind is Kind.NUMERIC:
            return VNode(lambda inp: N.numeric_neg(run(inp)), v.type.unconstrained())
        if v.kind is Kind.FLOAT and v.type.kind is TypeKind.DOUBLE:
            return VNode(lambda inp: N.float_neg(run(inp)), v.type)
        return None

    def v_Neg(self, node: exp.Neg, t: T) -> VNode | None:
        a = self.compile(node.this)
        return None if a is None else self._neg(a)

    # -- casts and strings ----------------------------------------------------------------------
    def v_Cast(self, node: exp.Cast, t: T) -> VNode | None:
        v = self.compile(node.this)
        return None if v is None else self.cast(v, t)

    def v_DPipe(self, node: exp.DPipe, t: T) -> VNode | None:
        sides = []
        for side in (node.this, node.expression):
            v = self.compile(side)
            if v is not None and v.kind is not Kind.TEXT:
                v = self.cast(v, t)  # 'abc' || 12: the other side as text
            if v is None:
                return None
            sides.append(v.run)
        a, b = sides
        return VNode(lambda inp: K.concat(a(inp), b(inp)), t)

    def _string_function(self, node: exp.Expression, t: T) -> VNode | None:
        a = self.compile(node.this)
        if a is None or not a.type.is_string:
            return None
        fn, run = _STRING_FUNCTIONS[type(node)], a.run
        return VNode(lambda inp: K.text_map(fn, run(inp)), t)

    v_Lower = v_Upper = v_Length = _string_function

    def v_Substring(self, node: exp.Substring, t: T) -> VNode | None:
        """``substring(s FROM start [FOR length])`` with integer constants: one slice by code
        points (``functions.substring``'s bounds); a negative length (an error) or a computed
        bound runs per row."""
        s = self.compile(node.this)
        if s is None or not s.type.is_string:
            return None
        bounds = []
        for name in ("start", "length"):
            arg = node.args.get(name)
            if arg is None:
                bounds.append(None)
                continue
            c = self.types.typed(arg)
            if not (c.const and c.type.kind in _INTEGERS and isinstance(c.value, int)):
                return None
            bounds.append(c.value)
        start = 1 if bounds[0] is None else bounds[0]
        if bounds[1] is not None and bounds[1] < 0:
            return None
        lo = max(start - 1, 0)
        hi = None if bounds[1] is None else max(start - 1 + bounds[1], lo)
        run = s.run
        return VNode(lambda inp: K.text_slice(run(inp), lo, hi), t)

    def _like(self, node: exp.Expression, escape: str | None) -> VNode | None:
        """LIKE/ILIKE with a constant pattern: equality, prefix, suffix or substring tests where
        the pattern allows, else one RE2 match of the whole text; a non-constant pattern runs
        per row."""
        t = BOOLEAN
        pattern = self.types.typed(node.expression)
        s = self.compile(node.this)
        if s is None or not (s.type.is_string or s.type.kind is TypeKind.UNKNOWN):
            return None
        if not (pattern.const and isinstance(pattern.value, str)):
            return None
        icase = isinstance(node, exp.ILike)
        try:
            tokens = F.like_tokens(F.ascii_lower(pattern.value) if icase else pattern.value, escape)
        except EvalError:
            return None
        test = _like_kernel(tokens)
        if test is None:
            return None
        negate, run = bool(node.args.get("negate")), s.run

        def like(inp: Inputs) -> Vec:
            v = run(inp)
            r = K.text_test(test[0], K.text_map("lower", v) if icase else v, test[1])
            return K.not_(r) if negate else r

        return VNode(like, t)

    def v_Like(self, node: exp.Like, t: T) -> VNode | None:
        return self._like(node, "\\")

    v_ILike = v_Like

    def v_Escape(self, node: exp.Escape, t: T) -> VNode | None:
        inner, esc = node.this, node.expression
        if not isinstance(inner, (exp.Like, exp.ILike)):
            return None
        if not (isinstance(esc, exp.Literal) and esc.is_string):
            return None
        try:
            return self._like(inner, F.like_escape(esc.this))
        except EvalError:
            return None
