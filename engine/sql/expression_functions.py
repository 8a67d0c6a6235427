"""Functions: strings (``||``, concat, lower/upper, substring, trim, replace, split_part, position,
left/right, repeat), conditionals (CASE, COALESCE, NULLIF, GREATEST/LEAST) and math (abs, round,
floor, ceil).

A part of the row expression compiler (``expression_compiler._Compiler``): its methods generate
the Python code of a sub-expression (``_E``) with Postgres' semantics.
"""

from __future__ import annotations

import decimal

from sqlglot import exp

from engine.errors import UnsupportedSQL
from engine.sql import functions as F
from engine.sql.expression_basics import (
    _E,
    _NAN_KINDS,
    _no_json_equality,
    _nullif_type,
    _unsupported,
    _where,
)
from engine.sql.types import (
    BYTEA,
    DOUBLE,
    INT_RANGES,
    INTEGER,
    NUMERIC,
    TEXT,
    UNKNOWN,
    SqlType,
    TypeKind,
    common_type,
)


class FunctionCompiling:
    """``_Compiler``'s strings and conditionals, math."""

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
