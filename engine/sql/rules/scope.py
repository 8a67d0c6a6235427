"""Shared analysis for the rewrite rules: column references, substitution, plan sharing.

The rules reason about expressions whose columns are qualified against a node's ``fields``
(``Field(qualifier, name, ...)``). This module answers the questions every rule asks - which
fields does an expression reference, rewrite its columns into other expressions, which plan nodes
are shared by several parents (a CTE used twice: rules must not push anything into those) - and
offers a memoized bottom-up plan transform that keeps shared nodes shared. It must not rewrite
plans on its own initiative.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlglot import exp

from engine.sql.logical_plan import Field, LogicalPlan
from engine.sql.plan_expressions import and_all, conjuncts

__all__ = [
    "FieldKey",
    "and_all",
    "column_keys",
    "conjuncts",
    "dedupe",
    "has_subquery_or_aggregate",
    "is_bare_column",
    "key",
    "parent_counts",
    "references_only",
    "resolve",
    "substitute",
    "transform_up",
]

FieldKey = tuple[str | None, str]


def key(f: Field) -> FieldKey:
    return (f.qualifier, f.name)


def column_keys(e: exp.Expression) -> set[FieldKey]:
    """(qualifier, name) of every column ``e`` references."""
    return {(c.table or None, c.name) for c in e.find_all(exp.Column)}


def resolve(col: exp.Column, fields: tuple[Field, ...]) -> int | None:
    """Position of the one field ``col`` names (an unqualified column matches by name alone)."""
    q = col.table or None
    hits = [
        i for i, f in enumerate(fields) if f.name == col.name and (q is None or f.qualifier == q)
    ]
    return hits[0] if len(hits) == 1 else None


def references_only(e: exp.Expression, fields: tuple[Field, ...]) -> bool:
    """True if every column of ``e`` resolves into ``fields`` (vacuously true without columns)."""
    return all(resolve(c, fields) is not None for c in e.find_all(exp.Column))


def is_bare_column(e: exp.Expression) -> bool:
    return isinstance(e, exp.Column) and not isinstance(e.this, exp.Star)


def has_subquery_or_aggregate(e: exp.Expression) -> bool:
    return any(
        isinstance(n, (exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Star))
        for n in e.walk()
    )


def substitute(
    e: exp.Expression, fields: tuple[Field, ...], replacements: list[exp.Expression]
) -> exp.Expression | None:
    """``e`` with each column (resolved in ``fields``) replaced by ``replacements[position]``.

    Returns None if some column does not resolve."""
    ok = True

    def fix(n: exp.Expression) -> exp.Expression:
        nonlocal ok
        if isinstance(n, exp.Column):
            i = resolve(n, fields)
            if i is None:
                ok = False
                return n
            r = replacements[i].copy()
            if isinstance(n.parent, (exp.Binary, exp.Not, exp.Neg)) and isinstance(
                r, (exp.Binary, exp.Not, exp.Neg)
            ):
                r = exp.Paren(this=r)
            return r
        return n

    out = e.copy().transform(fix)
    return out if ok else None


def _is_not_null(p: exp.Expression) -> bool:
    return (
        isinstance(p, exp.Not)
        and isinstance(p.this, exp.Is)
        and isinstance(p.this.expression, exp.Null)
    )


def dedupe(preds: Iterable[exp.Expression]) -> list[exp.Expression]:
    """Conjuncts without repeats (by their SQL text), first occurrence kept; ``x IS NOT NULL``
    conjuncts come first, sorted, so plans do not depend on the order filters were pushed in
    (optimizing twice gives the same plan)."""
    seen: set[str] = set()
    not_null: list[tuple[str, exp.Expression]] = []
    out = []
    for p in preds:
        s = p.sql(dialect="postgres")
        if s not in seen:
            seen.add(s)
            if _is_not_null(p):
                not_null.append((s, p))
            else:
                out.append(p)
    return [p for _, p in sorted(not_null, key=lambda sp: sp[0])] + out


def parent_counts(plan: LogicalPlan) -> dict[int, int]:
    """id(node) -> how many parent edges reach it (>1: a shared node, e.g. a CTE used twice)."""
    counts: dict[int, int] = {id(plan): 1}
    visited: set[int] = set()

    def visit(n: LogicalPlan) -> None:
        if id(n) in visited:
            return
        visited.add(id(n))
        for c in n.children:
            counts[id(c)] = counts.get(id(c), 0) + 1
            visit(c)

    visit(plan)
    return counts


def transform_up(
    plan: LogicalPlan,
    fn: Callable[[LogicalPlan], LogicalPlan],
    shared: set[int] | None = None,
) -> LogicalPlan:
    """Rebuild ``plan`` bottom-up applying ``fn`` to every node once; shared nodes stay shared.

    With ``shared`` (a set to fill), the ids of the rebuilt nodes standing for nodes shared by
    several parents are added before any of their parents is visited, so ``fn`` can check
    ``id(child) in shared``."""
    memo: dict[int, LogicalPlan] = {}
    keep: list[LogicalPlan] = []  # keeps ids stable while the memo lives
    counts = parent_counts(plan) if shared is not None else {}

    def visit(n: LogicalPlan) -> LogicalPlan:
        if id(n) in memo:
            return memo[id(n)]
        kids = n.children
        new_kids = tuple(visit(c) for c in kids)
        node = n
        if any(a is not b for a, b in zip(kids, new_kids, strict=True)):
            node = n.with_children(*new_kids)
        out = fn(node)
        memo[id(n)] = out
        keep.extend((n, out))
        if shared is not None and counts.get(id(n), 0) > 1:
            shared.add(id(out))
        return out

    return visit(plan)
