"""Arithmetic: ``+ - * / %`` and unary minus over integers (range-checked), floats, numeric
(Postgres' scale rules) and dates, timestamps and intervals.

A part of the row expression compiler (``expression_compiler._Compiler``): its methods generate
the Python code of a sub-expression (``_E``) with Postgres' semantics.
"""

from __future__ import annotations

import decimal

from sqlglot import exp

from engine import pg_interval as PI
from engine.dataflow.errs import EvalError
from engine.errors import UnsupportedSQL
from engine.sql import functions as F
from engine.sql import zoned_time as Z
from engine.sql.expression_basics import (
    _E,
    _PG_OPS,
    _op_symbol,
    _unsupported,
    _where,
)
from engine.sql.types import (
    DATE,
    DOUBLE,
    INT_RANGES,
    INTEGER,
    INTERVAL,
    NUMERIC,
    REAL,
    TIMESTAMP,
    TIMESTAMPTZ,
    SqlType,
    TypeKind,
    numeric_rank,
)


class ArithmeticCompiling:
    """``_Compiler``'s arithmetic."""

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
