"""Population WHERE clauses: the predicates the rewrite rules pushed into a table's scans
(``Scan.filters``), rendered as SQL for the population ``COPY (SELECT ... WHERE ...)``, so that
Postgres does not ship rows no scan of the view needs.

Only predicates whose Postgres evaluation is certainly the same as incview's, and which cannot
raise, are rendered: comparisons (=, <>, <, <=, >, >=, BETWEEN) between integer/numeric/double/
boolean/date/timestamp columns and numeric or boolean literals, date or timestamp literals of
years 1-9999 and such a literal plus or minus an interval literal (TPC-H's ``date '1994-01-01' +
interval '1' year``), or between two such columns; ``IS [NOT] NULL`` on any column, combined
with AND / OR / NOT. Text is left out (Postgres compares by the database's collation, incview by
code point), so are ``real`` (float4 widening), timestamptz (its literals read in the session's
time zone) and every other computed expression (a scalar error belongs to the view's errs
stream, not to a failed COPY). An AND keeps
its renderable conjuncts (a weaker filter is still correct); an OR or NOT needs all of its parts.
A table scanned several times gets the OR of its scans' clauses, and no clause at all when one of
its scans has none. The dataflow applies every filter anyway: this only saves reading. This
module must not change results.
"""

from __future__ import annotations

import datetime

from sqlglot import exp

from engine.postgres.pgoutput import quoted
from engine.sql.logical_plan import LogicalPlan, Scan
from engine.sql.types import TypeKind

_COMPARABLE = (
    TypeKind.SMALLINT,
    TypeKind.INTEGER,
    TypeKind.BIGINT,
    TypeKind.NUMERIC,
    TypeKind.DOUBLE,
    TypeKind.BOOLEAN,
    TypeKind.DATE,
    TypeKind.TIMESTAMP,  # not timestamptz: its literals read in the session's time zone
)
#: the comparisons rendered, with their SQL (shared with ``population_aggregate``)
COMPARISON_OPS = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_COMPARISONS = tuple(COMPARISON_OPS)
_TIME_TYPES = (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP)
_INTERVAL_UNITS = ("YEAR", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND")


def _operand(e: exp.Expression, kinds: dict[str, TypeKind]) -> str | None:
    if isinstance(e, exp.Paren):
        return _operand(e.this, kinds)
    if isinstance(e, exp.Column):
        kind = kinds.get(e.name)
        return quoted(e.name) if kind in _COMPARABLE else None
    if isinstance(e, exp.Literal) and not e.is_string:
        return e.this if is_number(e.this) else None
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        return f"-{e.this.this}" if is_number(e.this.this) else None
    if isinstance(e, exp.Boolean):
        return "true" if e.this else "false"
    return time_constant(e)


def time_constant(e: exp.Expression) -> str | None:
    """A date or timestamp literal, or one plus or minus an interval literal (TPC-H's
    ``date '1998-12-01' - interval '90' day``): SQL that cannot fail or mean anything else."""
    if isinstance(e, exp.Paren):
        return time_constant(e.this)
    if isinstance(e, exp.Cast) and e.to.this in _TIME_TYPES:
        literal = e.this
        if not (isinstance(literal, exp.Literal) and literal.is_string):
            return None
        try:  # a plain date (and time) of years 1-9999: no error, no special value
            datetime.datetime.fromisoformat(literal.this.strip())
        except ValueError:
            return None
        return e.sql(dialect="postgres")
    if isinstance(e, exp.Add | exp.Sub) and isinstance(e.expression, exp.Interval):
        base, interval = time_constant(e.this), e.expression
        unit = interval.args.get("unit")
        amount = interval.this.this if isinstance(interval.this, exp.Literal) else ""
        words = amount.split()
        if len(words) == 2 and unit is None:  # INTERVAL '90 DAY'
            amount, unit_name = words
        else:
            unit_name = unit.name if unit is not None else ""
        if base is None or not amount.isdigit() or int(amount) > 100_000:
            return None
        if unit_name.upper().rstrip("S") not in _INTERVAL_UNITS:
            return None
        op = "+" if isinstance(e, exp.Add) else "-"
        return f"({base} {op} INTERVAL '{int(amount)} {unit_name.upper()}')"
    return None


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _render(e: exp.Expression, kinds: dict[str, TypeKind], top: bool) -> str | None:
    if isinstance(e, exp.Paren):
        return _render(e.this, kinds, top)
    if isinstance(e, exp.Between) and not e.args.get("symmetric"):
        value, low, high = (_operand(e.args.get(k), kinds) for k in ("this", "low", "high"))
        if value is None or low is None or high is None or not isinstance(e.this, exp.Column):
            return None
        return f"{value} >= {low} AND {value} <= {high}"
    if {k for k, v in e.args.items() if v} - {"this", "expression", "negate"}:
        return None  # a flag this module does not know: leave the predicate to the dataflow
    if isinstance(e, exp.And):
        parts = [_render(x, kinds, top) for x in (e.left, e.right)]
        kept = [p for p in parts if p is not None]
        if top:
            return " AND ".join(f"({p})" for p in kept) or None
        return None if len(kept) < 2 else f"({kept[0]}) AND ({kept[1]})"
    if isinstance(e, exp.Or):
        parts = [_render(x, kinds, False) for x in (e.left, e.right)]
        return None if None in parts else f"({parts[0]}) OR ({parts[1]})"
    if isinstance(e, exp.Not):
        inner = _render(e.this, kinds, False)
        return None if inner is None else f"NOT ({inner})"
    if (
        isinstance(e, exp.Is)
        and isinstance(e.this, exp.Column)
        and isinstance(e.expression, exp.Null)
    ):
        if e.this.name not in kinds:
            return None
        return f"{quoted(e.this.name)} IS {'NOT ' if e.args.get('negate') else ''}NULL"
    if e.args.get("negate"):
        return None
    if isinstance(e, _COMPARISONS):
        left, right = _operand(e.left, kinds), _operand(e.right, kinds)
        if left is None or right is None:
            return None
        if not (isinstance(e.left, exp.Column) or isinstance(e.right, exp.Column)):
            return None
        return f"{left} {COMPARISON_OPS[type(e)]} {right}"
    return None


def scan_clause(scan: Scan) -> str | None:
    """The WHERE clause (SQL over the table's own columns) for one scan, None for no filter."""
    kinds = {f.name: getattr(f.type, "kind", None) for f in scan.table_fields}
    parts = [p for p in (_render(f, kinds, True) for f in scan.filters) if p is not None]
    return " AND ".join(f"({p})" for p in parts) or None


def population_filters(plan: LogicalPlan) -> dict[str, str | None]:
    """``schema.table`` -> the WHERE clause of its population read (None: read every row)."""
    clauses: dict[str, list[str | None]] = {}
    for node in plan.walk():
        if isinstance(node, Scan):
            clauses.setdefault(f"{node.schema}.{node.table}", []).append(scan_clause(node))
    out: dict[str, str | None] = {}
    for table, parts in clauses.items():
        if None in parts:
            out[table] = None
        else:
            unique = list(dict.fromkeys(p for p in parts if p is not None))
            out[table] = unique[0] if len(unique) == 1 else " OR ".join(f"({p})" for p in unique)
    return out
