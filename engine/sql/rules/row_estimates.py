"""Row estimates of join inputs for ``order_joins``: a Scan's row count (``pg_class.reltuples``)
times the selectivity of the filters above it, and a column's distinct values (``pg_stats``).

Guesses as Postgres makes them without histograms; they only steer the join order, never a result.
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.scope import conjuncts

#: selectivity of a conjunct that is neither ``column = constant`` nor an equality of two columns
#: (Postgres' default)
OTHER_SELECTIVITY = 1 / 3


def _scan_below(node: LogicalPlan) -> lp.Scan | None:
    while (below := _through(node)) is not None:
        node = below
    return node if isinstance(node, lp.Scan) else None


def _through(node: LogicalPlan) -> LogicalPlan | None:
    """The input whose rows ``node`` passes on (a semi or anti join's left: an upper bound)."""
    if isinstance(node, (lp.SubqueryAlias, lp.Filter, lp.Project)):
        return node.input
    if isinstance(node, lp.Join) and node.kind in lp.SEMI_KINDS:
        return node.left
    return None


def row_estimate(node: LogicalPlan) -> float | None:
    """Rows of ``node``: its Scan's estimate times the selectivity of the Filters above it (a
    semi or anti join on the way counts as keeping every row)."""
    scan = _scan_below(node)
    if scan is None or scan.row_estimate is None:
        return None
    rows = float(scan.row_estimate)
    while node is not scan:
        if isinstance(node, lp.Filter):
            rows *= _selectivity(node.predicate, scan)
        node = _through(node)  # type: ignore[assignment]
    return rows


def _selectivity(predicate: exp.Expression, scan: lp.Scan) -> float:
    """The fraction of rows a filter keeps, as Postgres guesses without histograms: 1 / distinct
    values for ``column = constant``, all of them for ``column IS NOT NULL`` (what
    ``infer_join_filters`` adds on join keys), a third for any other conjunct."""
    out = 1.0
    for c in conjuncts(predicate):
        if isinstance(c, exp.Not) and isinstance(c.this, exp.Is):
            continue
        column = _equals_constant(c)
        d = _distinct_of(scan, column) if column is not None else None
        out *= 1 / d if d else OTHER_SELECTIVITY
    return out


def _equals_constant(c: exp.Expression) -> str | None:
    """The column name of ``column = constant`` (either way round), else None."""
    if not isinstance(c, exp.EQ):
        return None
    for a, b in ((c.left, c.right), (c.right, c.left)):
        if isinstance(a, exp.Column) and not b.find(exp.Column):
            return a.name
    return None


def _distinct_of(scan: lp.Scan, name: str) -> float | None:
    if not scan.column_distinct:
        return None
    for f, d in zip(scan.table_fields, scan.column_distinct, strict=True):
        if f.name == name:
            return d
    return None


def distinct_estimate(node: LogicalPlan, name: str) -> float | None:
    """Distinct values of ``node``'s field ``name``, from the statistics of the Scan below it
    (a field a Project renamed or computed under another Scan column's name gets that column's
    figure: it only steers the order, never the result)."""
    scan = _scan_below(node)
    return None if scan is None else _distinct_of(scan, name)
