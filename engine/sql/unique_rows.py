"""Which plans never hold a row twice: keys derived from the source tables' unique keys.

A collection whose input never holds two equal rows can skip reads a multiset needs: the
columnar top-k creates and deletes a row's entry without reading its count first when its
input is unique (``ColumnarTopKCollection(unique_rows=True)``), and a DISTINCT over unique rows
is no collection at all (the physical planner leaves it out). ``row_keys(plan)`` gives the
keys of a plan's output, each a set of output positions no two rows share values at (the
empty set: at most one row); ``unique_rows(plan)`` is whether it has one, and ``keys_relied_on``
names the source tables' keys such a derivation used (the view records them: a key dropped
later puts the view in error, ``engine.source_schema``). ``unique_on(plan, positions)`` is
whether no two rows agree on some columns (the rule ``unique_semi_join`` asks it without the
tables' keys, so that no logical rewrite rests on them).

Derived conservatively, node by node, from the catalog's keys (the primary key and unique
indexes of NOT NULL columns, ``SourceTable.keys``):

* a scan keeps the keys whose columns it reads; an alias, a filter, a top-k and a window keep
  their input's (a filter or a limit only removes rows; a window only appends columns);
* a projection keeps a key whose every column it passes on as a plain column reference;
* an inner or cross join's rows are pairs: a left key and a right key together; a semi or anti
  join keeps its left input's keys;
* an aggregate's group columns are a key (no GROUP BY: the empty key, one row);
* DISTINCT, UNION, INTERSECT and EXCEPT make every row distinct (all columns a key); EXCEPT ALL
  and INTERSECT ALL keep the left input's keys;
* outer joins, UNION ALL (grouping sets among them) and VALUES give none.

Equality here is SQL's (a unique index's: NULLs never meet, since the keys' columns are NOT
NULL), which is what the collections' row identity is. This module only reads plans.
"""

from __future__ import annotations

from engine.sql import logical_plan as lp
from engine.sql.logical_plan import LogicalPlan, column_index

Key = frozenset[int]


def row_keys(plan: LogicalPlan, source_keys: bool = True) -> list[Key]:
    """The keys of ``plan``'s output rows (positions of its fields), none if it may hold a row
    twice. ``source_keys`` False: only those the plan makes itself (GROUP BY, DISTINCT, ...),
    none from the tables' keys (a rewrite whose plan must not rest on the catalog's keys)."""
    method = globals().get("_keys_" + type(plan).__name__)
    return _minimal(method(plan, source_keys)) if method is not None else []


def unique_on(plan: LogicalPlan, positions: set[int], source_keys: bool = True) -> bool:
    """Whether no two rows of ``plan`` agree on the columns at ``positions``."""
    return any(k <= positions for k in row_keys(plan, source_keys))


def unique_rows(plan: LogicalPlan) -> bool:
    """Whether ``plan``'s output never holds two equal rows."""
    return bool(row_keys(plan))


def keys_relied_on(plan: LogicalPlan) -> dict[str, list[tuple[str, ...]]]:
    """``schema.table`` -> the keys (column names) of the tables under ``plan`` that its
    output's uniqueness may rest on: none when the plan makes its rows unique itself (a GROUP
    BY, a DISTINCT, ...), else every key a scan under it keeps."""
    out: dict[str, list[tuple[str, ...]]] = {}
    if row_keys(plan, source_keys=False):
        return out
    for node in plan.walk():
        if isinstance(node, lp.Scan):
            for key in _scan_keys(node):
                names = tuple(node.fields[i].name for i in sorted(key))
                table = out.setdefault(f"{node.schema}.{node.table}", [])
                if names not in table:
                    table.append(names)
    return out


def _minimal(keys: list[Key]) -> list[Key]:
    """The keys without duplicates or supersets of another (a key with more columns says no
    more)."""
    out: list[Key] = []
    for k in sorted(set(keys), key=len):
        if not any(o <= k for o in out):
            out.append(k)
    return out


def _scan_keys(plan: lp.Scan) -> list[Key]:
    positions = range(len(plan.table_fields)) if plan.projection is None else plan.projection
    at = {table_pos: i for i, table_pos in enumerate(positions)}
    return [frozenset(at[c] for c in key) for key in plan.keys if all(c in at for c in key)]


def _keys_Scan(plan: lp.Scan, src: bool) -> list[Key]:
    return _scan_keys(plan) if src else []


def _same_as_input(plan, src: bool) -> list[Key]:
    return row_keys(plan.input, src)


_keys_SubqueryAlias = _keys_Filter = _keys_TopK = _keys_Window = _same_as_input


def _keys_Project(plan: lp.Project, src: bool) -> list[Key]:
    fields = plan.input.fields
    passed: dict[int, int] = {}  # input position -> an output position carrying it as it is
    for out_pos, e in enumerate(plan.exprs):
        i = column_index(e, fields)
        if i is not None:
            passed.setdefault(i, out_pos)
    return [
        frozenset(passed[i] for i in key)
        for key in row_keys(plan.input, src)
        if all(i in passed for i in key)
    ]


def _keys_Join(plan: lp.Join, src: bool) -> list[Key]:
    if plan.kind in lp.SEMI_KINDS:
        return row_keys(plan.left, src)
    if plan.kind not in ("inner", "cross"):
        return []
    width = len(plan.left.fields)
    return [
        lk | frozenset(width + i for i in rk)
        for lk in row_keys(plan.left, src)
        for rk in row_keys(plan.right, src)
    ]


def _keys_Aggregate(plan: lp.Aggregate, src: bool) -> list[Key]:
    return [frozenset(range(len(plan.group_by)))]


def _every_column(plan: LogicalPlan) -> list[Key]:
    return [frozenset(range(len(plan.fields)))]


def _keys_Distinct(plan: lp.Distinct, src: bool) -> list[Key]:
    return _every_column(plan)


def _keys_SetOperation(plan: lp.SetOperation, src: bool) -> list[Key]:
    if plan.kind in ("union", "intersect", "except"):
        return _every_column(plan)
    if plan.kind in ("intersect_all", "except_all"):
        return row_keys(plan.left, src)
    return []
