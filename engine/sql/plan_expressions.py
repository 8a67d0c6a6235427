"""Small helpers over sqlglot expressions that plan building and the rewrite rules share: a
predicate's conjuncts, their conjunction, the table aliases an expression reads."""

from __future__ import annotations

from sqlglot import exp


def conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    if e is None:
        return []
    if isinstance(e, exp.And):
        return conjuncts(e.left) + conjuncts(e.right)
    if isinstance(e, exp.Paren) and isinstance(e.this, exp.And):
        return conjuncts(e.this)
    return [e]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = exp.And(this=out, expression=p)
    return out


def qualifiers(e: exp.Expression) -> set[str]:
    """The table qualifiers of the columns ``e`` references (not inside nested subqueries)."""
    out = set()
    for c in e.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Select))):
        if isinstance(c, exp.Column) and c.table:
            out.add(c.table)
    return out
