"""Dates and times (date_trunc, AT TIME ZONE, EXTRACT/date_part), jsonb and arrays (``->``,
``->>``, ``@>``, ``<@``, ``?``, subscripts, cardinality), the functions sqlglot leaves anonymous
(``FUNCTIONS``) and sqlglot spellings refused by name.

A part of the row expression compiler (``expression_compiler._Compiler``): its methods generate
the Python code of a sub-expression (``_E``) with Postgres' semantics.
"""

from __future__ import annotations

from sqlglot import exp

from engine.errors import UnsupportedSQL
from engine.sql import carried_values as CV
from engine.sql import functions as F
from engine.sql import zoned_time as Z
from engine.sql.expression_basics import (
    _E,
    _ambiguous,
    _sqlglot_shifted,
    _unsupported,
    _where,
)
from engine.sql.types import (
    BOOLEAN,
    DOUBLE,
    INTEGER,
    JSONB,
    NUMERIC,
    TEXT,
    TIMESTAMP,
    TIMESTAMPTZ,
    TypeKind,
)


class TemporalJsonCompiling:
    """``_Compiler``'s date/time and jsonb and arrays, sqlglot spellings of the same functions."""

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
