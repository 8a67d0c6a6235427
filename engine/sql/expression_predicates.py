"""Predicates: AND/OR/NOT (three-valued), comparisons (NaN ordered as Postgres orders it, padded
char, IS [NOT] DISTINCT FROM, IS, BETWEEN, IN) and LIKE/ILIKE/SIMILAR TO/regex matches.

A part of the row expression compiler (``expression_compiler._Compiler``): its methods generate
the Python code of a sub-expression (``_E``) with Postgres' semantics.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from engine.dataflow.errs import EvalError
from engine.errors import UnsupportedSQL
from engine.sql import functions as F
from engine.sql.expression_basics import (
    _COMPARISONS,
    _E,
    _NAN_KINDS,
    _may_raise,
    _nan_aware,
    _no_json_equality,
    _op_symbol,
    _unsupported,
    _where,
    flatten_connective,
)
from engine.sql.types import (
    BOOLEAN,
    DOUBLE,
    TEXT,
    SqlType,
    TypeKind,
    common_type,
)


class PredicateCompiling:
    """``_Compiler``'s boolean logic and comparisons, LIKE."""

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
