"""Top-k per group: ``WHERE rn <= k`` over ``row_number()/rank()/dense_rank() OVER (...) AS rn``
becomes a TopK node, which keeps only the first k rows of each partition in state order instead
of numbering every row of every partition.

The pattern: a Filter with a conjunct ``rn <= k``, ``rn < k`` (limit k - 1), ``rn = 1`` (or the
mirrored forms ``k >= rn`` ...) with an integer literal k giving a limit >= 1, where ``rn``
reaches - through SubqueryAlias and Projects that pass it as a bare column - a Window whose only
function is row_number/rank/dense_rank with an ORDER BY. The Window becomes ``TopK(partition_by,
order_by, limit, rank_kind, rank_field=the window's output field)``: TopK's fields equal the
Window's, so everything above stays valid; ``pushdown_projections`` drops the rank column when
nothing uses it any more. The matched conjunct is removed; the others stay in the Filter above
(they were applied after numbering). Refused: ``rn = k`` for k > 1, ``rn > k``, a Window with
several functions, a Filter between the Window and the rn filter, shared (CTE) nodes.

Example::

    Filter: "s"."rn" <= 2                               SubqueryAlias: s
      SubqueryAlias: s                                    Projection: "t1"."a", "t1"."c", "__w0" AS rn
        Projection: "t1"."a", "t1"."c", "__w0" AS rn  ->    TopK: partition=["t1"."c"] order=["t1"."a" DESC] limit=2
          Window: [ROW_NUMBER() OVER (...)] ...                 SubqueryAlias: t1
            SubqueryAlias: t1                                     TableScan: t1
              TableScan: t1
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.calls import window_call
from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.scope import (
    and_all,
    conjuncts,
    is_bare_column,
    parent_counts,
    resolve,
    transform_up,
)

_FLIP = {exp.LT: exp.GT, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.EQ: exp.EQ}


def window_to_top_k(plan: LogicalPlan) -> LogicalPlan:
    """Turn ``rn <= k`` filters over ranking windows into TopK nodes."""
    counts = parent_counts(plan)
    rebuilt_shared: set[int] = set()

    def is_shared(n: LogicalPlan) -> bool:
        return counts.get(id(n), 0) > 1 or id(n) in rebuilt_shared

    def visit(node: LogicalPlan) -> LogicalPlan:
        if isinstance(node, lp.Filter):
            return _rewrite(node, is_shared) or node
        return node

    return transform_up(plan, visit, rebuilt_shared)


def _limit(c: exp.Expression) -> tuple[exp.Column, int] | None:
    """(rn column, limit) if ``c`` bounds a column from above by an integer literal."""
    if type(c) not in _FLIP:
        return None
    col, lit, op = c.left, c.right, type(c)
    if is_bare_column(lit) and not is_bare_column(col):
        col, lit, op = lit, col, _FLIP[op]
    if not is_bare_column(col) or not isinstance(lit, exp.Literal) or lit.is_string:
        return None
    if not lit.this.isdigit():
        return None
    k = int(lit.this)
    limit = {exp.LTE: k, exp.LT: k - 1, exp.EQ: 1 if k == 1 else None}.get(op)
    if limit is None or limit < 1:
        return None
    return col, limit


def _trace(node: LogicalPlan, col: exp.Column, is_shared) -> lp.Window | None:
    """The ranking Window whose (only) output ``col`` is, through aliases and projections."""
    while True:
        i = resolve(col, node.fields)
        if i is None:
            return None
        if isinstance(node, lp.Window):
            n_in = len(node.input.fields)
            if i != n_in or len(node.functions) != 1 or not node.order_by:
                return None
            kind = window_call(node.functions[0]).kind
            return node if kind in ("row_number", "rank", "dense_rank") else None
        if is_shared(node):
            return None
        if isinstance(node, lp.SubqueryAlias):
            col = node.input.fields[i].ref()
            node = node.input
        elif isinstance(node, lp.Project):
            e = node.exprs[i]
            if not is_bare_column(e):
                return None
            col = e
            node = node.input
        else:
            return None


def _rewrite(f: lp.Filter, is_shared) -> LogicalPlan | None:
    parts = conjuncts(f.predicate)
    for n, c in enumerate(parts):
        hit = _limit(c)
        if hit is None:
            continue
        col, limit = hit
        window = _trace(f.input, col, is_shared)
        if window is None:
            continue
        top = lp.TopK(
            window.input,
            window.partition_by,
            window.order_by,
            limit,
            0,
            window_call(window.functions[0]).kind,
            window.out_fields[0],
        )
        body = _replace(f.input, window, top)
        rest = parts[:n] + parts[n + 1 :]
        return lp.Filter(body, and_all(rest)) if rest else body
    return None


def _replace(node: LogicalPlan, target: lp.Window, new: LogicalPlan) -> LogicalPlan:
    if node is target:
        return new
    (child,) = node.children
    return replace(node, input=_replace(child, target, new))
