"""Classes of equal columns across the inputs of a join chain, for ``order_joins``.

``c_nationkey = s_nationkey AND s_nationkey = n_nationkey`` puts three columns of three inputs in
one class: ``implied_equalities`` adds ``c_nationkey = n_nationkey`` so the order may join customer
to nation directly, and ``ColumnClasses`` (a union-find) tells the placement which equalities the
joins below already imply. Columns are (input, field position). Sound for inner joins only: an
equality that holds is true, so its operands are not NULL and equal.
"""

from __future__ import annotations

from sqlglot import exp

from engine.sql.rules.scope import resolve

Column = tuple[int, int]  # (leaf, field position)


class ColumnClasses:
    def __init__(self) -> None:
        self.parent: dict[Column, Column] = {}

    def find(self, x: Column) -> Column:
        while self.parent.get(x, x) != x:
            x = self.parent[x]
        return x

    def union(self, a: Column, b: Column) -> bool:
        """Join the classes of ``a`` and ``b``; False if they were one already."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[ra] = rb
        return True


def column_ends(c: exp.Expression, leaves) -> tuple[Column, Column] | None:
    """The two columns of ``left_column = right_column`` over two different leaves, else None."""
    if not (isinstance(c, exp.EQ) and isinstance(c.left, exp.Column)):
        return None
    if not isinstance(c.right, exp.Column):
        return None
    ends = []
    for col in (c.left, c.right):
        hits = [(i, resolve(col, leaf.fields)) for i, leaf in enumerate(leaves)]
        hits = [(i, k) for i, k in hits if k is not None]
        if len(hits) != 1:
            return None
        ends.append(hits[0])
    return (ends[0], ends[1]) if ends[0][0] != ends[1][0] else None


def implied_equalities(leaves, conds, refs):
    """``conds`` plus ``a = c`` wherever ``a = b`` and ``b = c`` equate columns of different
    leaves with no conjunct between those two leaves' columns yet (``c_nationkey = s_nationkey AND
    s_nationkey = n_nationkey`` connects customer to nation: the order may then join them
    directly), their ``refs``, and per equality conjunct the class of columns it equates. The
    placement drops an equality the ones placed below it already imply."""
    equal = ColumnClasses()
    ends = [column_ends(c, leaves) for c in conds]
    for e in ends:
        if e is not None:
            equal.union(*e)
    members: dict[Column, list[Column]] = {}
    for e in ends:
        for col in e or ():
            group = members.setdefault(equal.find(col), [])
            if col not in group:
                group.append(col)
    related = {frozenset((a[0], b[0])) for a, b in (e for e in ends if e is not None)}
    conds, refs = list(conds), list(refs)
    for group in members.values():
        for x, a in enumerate(group):
            for b in group[x + 1 :]:
                pair = frozenset((a[0], b[0]))
                if a[0] == b[0] or pair in related:
                    continue
                c = exp.EQ(
                    this=leaves[a[0]].fields[a[1]].ref(), expression=leaves[b[0]].fields[b[1]].ref()
                )
                if column_ends(c, leaves) != (a, b):
                    continue  # a name that does not resolve to that one column
                related.add(pair)
                conds.append(c)
                refs.append({a[0], b[0]})
    classes = {}
    for k, c in enumerate(conds):
        e = column_ends(c, leaves)
        if e is not None:
            classes[k] = equal.find(e[0])
    return conds, refs, classes
