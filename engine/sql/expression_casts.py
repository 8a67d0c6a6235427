"""Casts and implicit conversions: ``CAST``/``::``, the conversion functions between types
(typmods, text forms, time zones), ``coerce`` and ``unify`` (the common type of IN lists, CASE,
COALESCE).

A part of the row expression compiler (``expression_compiler._Compiler``): its methods generate
the Python code of a sub-expression (``_E``) with Postgres' semantics.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from sqlglot import exp

from engine.dataflow.errs import EvalError
from engine.errors import UnsupportedSQL
from engine.sql import carried_values as CV
from engine.sql import functions as F
from engine.sql import zoned_time as Z
from engine.sql.expression_basics import (
    _E,
    _FROM_TEXT,
    _unsupported,
    _where,
)
from engine.sql.types import (
    INT_RANGES,
    NUMERIC,
    TEXT,
    SqlType,
    TypeKind,
    common_type,
    from_pg_name,
    numeric_rank,
)


class CastCompiling:
    """``_Compiler``'s casts."""

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
