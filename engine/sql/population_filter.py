"""Population WHERE clauses: the predicates the rewrite rules pushed into a table's scans
(``Scan.filters``), rendered as SQL for the population ``COPY (SELECT ... WHERE ...)``, so that
Postgres does not ship rows no scan of the view needs.

Only predicates whose Postgres evaluation is certainly the same as incview's, and which cannot
raise, are rendered: comparisons (=, <>, <, <=, >, >=) between integer/numeric/double/boolean
columns and numeric or boolean literals (or between two such columns), ``IS [NOT] NULL`` on any
column, combined with AND / OR / NOT. Text is left out (Postgres compares by the database's
collation, incview by code point), so are ``real`` (float4 widening) and every computed
expression (a scalar error belongs to the view's errs stream, not to a failed COPY). An AND keeps
its renderable conjuncts (a weaker filter is still correct); an OR or NOT needs all of its parts.
A table scanned several times gets the OR of its scans' clauses, and no clause at all when one of
its scans has none. The dataflow applies every filter anyway: this only saves reading. This
module must not change results.
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql.logical_plan import LogicalPlan, Scan
from engine.sql.types import TypeKind

_COMPARABLE = (
    TypeKind.SMALLINT,
    TypeKind.INTEGER,
    TypeKind.BIGINT,
    TypeKind.NUMERIC,
    TypeKind.DOUBLE,
    TypeKind.BOOLEAN,
)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _operand(e: exp.Expression, kinds: dict[str, TypeKind]) -> str | None:
    if isinstance(e, exp.Paren):
        return _operand(e.this, kinds)
    if isinstance(e, exp.Column):
        kind = kinds.get(e.name)
        return _quote(e.name) if kind in _COMPARABLE else None
    if isinstance(e, exp.Literal) and not e.is_string:
        return e.this if _is_number(e.this) else None
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        return f"-{e.this.this}" if _is_number(e.this.this) else None
    if isinstance(e, exp.Boolean):
        return "true" if e.this else "false"
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _render(e: exp.Expression, kinds: dict[str, TypeKind], top: bool) -> str | None:
    if isinstance(e, exp.Paren):
        return _render(e.this, kinds, top)
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
        return f"{_quote(e.this.name)} IS {'NOT ' if e.args.get('negate') else ''}NULL"
    if e.args.get("negate"):
        return None
    if isinstance(e, _COMPARISONS):
        left, right = _operand(e.left, kinds), _operand(e.right, kinds)
        if left is None or right is None:
            return None
        if not (isinstance(e.left, exp.Column) or isinstance(e.right, exp.Column)):
            return None
        op = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
        return f"{left} {op[type(e)]} {right}"
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
