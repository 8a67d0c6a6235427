"""Join ordering for chains of inner and cross joins: avoid cross products, small inputs first.

A maximal tree of inner/cross joins (not shared with another parent) is flattened into its
inputs ("leaves") and the conjuncts of all its conditions. With three or more leaves it is
rebuilt left-deep in a greedy order: start with the smallest leaf when every leaf's row estimate
is known (``Scan.row_estimate`` reached through SubqueryAlias/Filter/Project), else with the
first; then repeatedly take a leaf connected to the joined ones by an equality conjunct, falling
back to a cross product only when nothing connects. With statistics (every leaf's row estimate
known) the order minimizes the sum of estimated intermediate rows, searched over all left-deep
orders of up to 10 leaves (greedily beyond): a join's rows are |A| * |B| / max(distinct values of
the two columns) per column equality (``Scan.column_distinct``, from ``pg_stats``; a column
without a figure counts as a key) and 1/3 per other conjunct. So a join on a column with few
distinct values (the nation key that customers and suppliers share) waits until a more selective
condition comes with it, instead of multiplying rows into the join states. A leaf's estimate is
its Scan's times its filters' selectivity (1 / distinct values for ``column = constant``, a third
for other conjuncts, NOT NULL ignored), and equalities imply others (``c_nationkey = s_nationkey
AND s_nationkey = n_nationkey`` joins customer to nation too), so TPC-H Q5 starts from the one
filtered region and its nations instead of ending with them behind six million lines; an
equality the ones placed below it already imply is dropped. Without statistics:
the first connected leaf in query order. Each conjunct is placed at the lowest join where all its leaves are
available. If the resulting column order differs from the original, a Project restores it, so
the plan's output is unchanged (``remove_passthrough`` drops it where the parent reads columns by
name). Refused: outer, semi and anti joins (they are leaves, never reordered across), trees with
fewer than three leaves, conjuncts whose columns cannot be attributed to exactly one leaf, and
trees already left-deep in the chosen order.

Example (no statistics; t1 and t3 are not related)::

    Inner Join: t2.d = t3.k                      Projection: t1.a, ..., t2.a, t2.d, t3.k, t3.v
      Cross Join                                   Inner Join: t2.d = t3.k
        SubqueryAlias: t1                 ->         Inner Join: t1.a = t2.a
        SubqueryAlias: t3                              SubqueryAlias: t1
      SubqueryAlias: t2  (with t1.a = t2.a)            SubqueryAlias: t2
                                                     SubqueryAlias: t3
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import LogicalPlan
from engine.sql.rules.column_classes import ColumnClasses, column_ends, implied_equalities
from engine.sql.rules.row_estimates import OTHER_SELECTIVITY, distinct_estimate, row_estimate
from engine.sql.rules.scope import (
    and_all,
    conjuncts,
    key,
    parent_counts,
    resolve,
)

_CHAIN = ("inner", "cross")


def order_joins(plan: LogicalPlan) -> LogicalPlan:
    """Reorder inner/cross join trees (see the module docstring)."""
    parents = parent_counts(plan)
    memo: dict[int, LogicalPlan] = {}
    keep: list[LogicalPlan] = []

    def visit(node: LogicalPlan) -> LogicalPlan:
        if id(node) in memo:
            return memo[id(node)]
        if isinstance(node, lp.Join) and node.kind in _CHAIN:
            leaves: list[LogicalPlan] = []
            conds: list[exp.Expression] = []
            left_deep = _flatten(node, parents, leaves, conds, True)
            new_leaves = [visit(x) for x in leaves]
            out = _reorder(node, new_leaves, conds, left_deep)
            if out is None:
                out = _rebuild_same(node, parents, iter(new_leaves))
        else:
            kids = [visit(c) for c in node.children]
            out = node.with_children(*kids) if kids else node
        memo[id(node)] = out
        keep.append(node)
        return out

    return visit(plan)


def _in_chain(n: LogicalPlan, parents) -> bool:
    return isinstance(n, lp.Join) and n.kind in _CHAIN and parents.get(id(n), 0) <= 1


def _flatten(node: lp.Join, parents, leaves, conds, left_deep: bool) -> bool:
    for side, child in (("left", node.left), ("right", node.right)):
        if _in_chain(child, parents):
            if side == "right":
                left_deep = False
            left_deep = _flatten(child, parents, leaves, conds, left_deep)
        else:
            leaves.append(child)
    conds.extend(conjuncts(node.condition))
    return left_deep


def _rebuild_same(node: LogicalPlan, parents, leaves) -> LogicalPlan:
    """``node`` with its leaves replaced (same shape)."""
    kids = []
    for child in (node.left, node.right):
        kids.append(
            _rebuild_same(child, parents, leaves) if _in_chain(child, parents) else next(leaves)
        )
    return node.with_children(*kids)


#: up to this many leaves the order is searched exhaustively (2^n subsets), beyond it greedily
_EXHAUSTIVE_LEAVES = 10


def _cheapest_order(n, rank, connected_to, joined_size, estimates) -> list[int]:
    """The left-deep order with the smallest sum of estimated intermediate rows (what the
    join states hold, and roughly what a change costs), by dynamic programming over subsets of
    leaves; a leaf joins without a condition only when none of the rest connects. Ties go to
    the order whose leaves rank first (smaller, then earlier in the query)."""
    best: dict[int, tuple[float, float, tuple]] = {}  # mask -> (cost, rows, order)
    for i in range(n):
        best[1 << i] = (0.0, float(estimates[i] or 1), (i,))
    for _ in range(n - 1):
        grown: dict[int, tuple[float, float, tuple]] = {}
        for mask, (cost, rows, order) in best.items():
            joined = set(order)
            rest = [i for i in range(n) if not mask >> i & 1]
            for i in connected_to(joined, rest) or rest:
                size = joined_size(rows, joined, i)
                cand = (cost + size, size, (*order, i))
                key = mask | 1 << i
                old = grown.get(key)
                if old is None or (cand[0], [rank(j) for j in cand[2]]) < (
                    old[0],
                    [rank(j) for j in old[2]],
                ):
                    grown[key] = cand
        best = grown
    ((_, _, order),) = best.values()
    return list(order)


def _reorder(original: lp.Join, leaves, conds, left_deep: bool) -> LogicalPlan | None:
    n = len(leaves)
    if n < 3:
        return None
    refs: list[set[int]] = []
    for c in conds:
        owners: set[int] = set()
        for col in c.find_all(exp.Column):
            hits = [i for i, leaf in enumerate(leaves) if resolve(col, leaf.fields) is not None]
            if len(hits) != 1:
                return None
            owners.add(hits[0])
        refs.append(owners)
    conds, refs, classes = implied_equalities(leaves, conds, refs)
    edges: set[tuple[int, int]] = set()
    #: conjunct -> its two sides (leaf, column name) when it equates two plain columns
    column_pairs: dict[int, tuple[tuple[int, str], tuple[int, str]]] = {}
    for k, (c, owners) in enumerate(zip(conds, refs, strict=True)):
        if isinstance(c, exp.EQ) and len(owners) == 2:
            lo = {
                i
                for col in c.left.find_all(exp.Column)
                for i in owners
                if resolve(col, leaves[i].fields) is not None
            }
            ro = {
                i
                for col in c.right.find_all(exp.Column)
                for i in owners
                if resolve(col, leaves[i].fields) is not None
            }
            if len(lo) == 1 and len(ro) == 1 and lo != ro:
                a, b = lo.pop(), ro.pop()
                edges.add((a, b))
                edges.add((b, a))
                if isinstance(c.left, exp.Column) and isinstance(c.right, exp.Column):
                    column_pairs[k] = ((a, c.left.name), (b, c.right.name))
    estimates = [row_estimate(leaf) for leaf in leaves]
    stats = all(e is not None for e in estimates)

    def rank(i: int) -> tuple:
        return (estimates[i], i) if stats else (i,)

    def distinct(i: int, name: str) -> float:
        d = distinct_estimate(leaves[i], name)
        return d if d is not None else float(estimates[i] or 1)  # unknown: as if a key

    def joined_size(size: float, joined: set[int], i: int) -> float:
        """Estimated rows of (the leaves ``joined``, of ``size`` rows) joined with leaf ``i``:
        |A| * |B| / max(distinct values of the two columns) per equality conjunct."""
        out = size * float(estimates[i] or 1)
        divisors: dict[object, float] = {}  # per class of equal columns: implied ones count once
        for k, owners in enumerate(refs):
            if i in owners and owners - {i} and owners <= joined | {i}:
                pair = column_pairs.get(k)
                if pair is None:
                    out *= OTHER_SELECTIVITY
                else:
                    (a, a_name), (b, b_name) = pair
                    d = max(distinct(a, a_name), distinct(b, b_name), 1.0)
                    cls = classes.get(k, k)  # a column class, or the conjunct itself
                    divisors[cls] = max(divisors.get(cls, 1.0), d)
        for d in divisors.values():
            out /= d
        return max(out, 1.0)

    def connected_to(joined: set[int], rest: list[int]) -> list[int]:
        return [i for i in rest if any((j, i) in edges for j in joined)]

    if stats and n <= _EXHAUSTIVE_LEAVES:
        order = _cheapest_order(n, rank, connected_to, joined_size, estimates)
    else:
        # greedy: the smallest leaf, then the connected leaf giving the fewest estimated rows
        # (without statistics the first connected one in query order)
        order = [min(range(n), key=rank)]
        size = float(estimates[order[0]] or 1)
        while len(order) < n:
            rest = [i for i in range(n) if i not in order]
            connected = connected_to(set(order), rest)
            if stats and connected:
                joined = set(order)
                sizes = {i: joined_size(size, joined, i) for i in connected}
                nxt = min(connected, key=lambda i: (sizes[i], rank(i)))
                size = sizes[nxt]
            else:
                nxt = min(connected or rest, key=rank)
            order.append(nxt)
    if order == list(range(n)) and left_deep:
        return None
    placed = [False] * len(conds)
    equal = ColumnClasses()  # columns the placed equalities made equal
    plan = leaves[order[0]]
    avail = {order[0]}
    for i in order[1:]:
        avail.add(i)
        here = []
        for k, c in enumerate(conds):
            if not placed[k] and refs[k] <= avail:
                placed[k] = True
                ends = column_ends(c, leaves)
                if ends is not None and not equal.union(*ends):
                    continue  # implied by the equalities placed so far
                here.append(c)
        cond = and_all(here)
        plan = lp.Join(plan, leaves[i], "inner" if cond is not None else "cross", cond)
    fields = original.fields
    if [key(f) for f in plan.fields] == [key(f) for f in fields]:
        return plan
    keys = [key(f) for f in fields]
    if len(set(keys)) != len(keys):
        return None
    return lp.Project(plan, tuple(f.ref() for f in fields), fields)
