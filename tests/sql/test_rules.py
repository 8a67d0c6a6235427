"""The logical rewrite rules (engine/sql/rules/): fixtures per rule, and semantics preserved.

Fixture files ``tests/sql/fixtures/<rule>.sql`` hold blocks::

    -- case: a name
    -- rules: pushdown_filters, infer_join_filters      (optional; default: the file's rule)
    SELECT ...;
    -- expected:
    <the optimized plan, as format_plan prints it>

separated by blank lines before the next ``-- case:``. ``optimize.sql`` runs all of ``RULES``.
Set ``INCVIEW_UPDATE_FIXTURES=1`` to rewrite the expected plans from the current output (then
read the diff!). ``test_semantics_preserved`` runs ~30 queries through the dataflow twice - the
unoptimized and the optimized plan - on random data, the first time as a population (each
source filtered by its scans' ``partial_filters``, as the population COPY would be), then as
random changes, and compares the results as multisets.
"""

from __future__ import annotations

import importlib
import os
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from engine.dataflow.batch import DiffBatch
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import ZSetSink
from engine.sql import logical_plan as lp
from engine.sql.catalog import DictCatalog
from engine.sql.expression_compiler import ColumnRef, compile_predicate
from engine.sql.logical_plan import LogicalPlan, format_plan
from engine.sql.physical_planner import plan_physical
from engine.sql.plan_builder import build_plan
from engine.sql.plan_expressions import and_all
from engine.sql.planner import explain
from engine.sql.rules import RULES, optimize

FIXTURES = Path(__file__).parent / "fixtures"

CATALOG = DictCatalog(
    {
        "example_table": {"a": "int", "b": "int", "c": "text"},
        "numbers_table": {"a": "int"},
        "t1": {"a": "int", "b": "int", "c": "text"},
        "t2": {"a": "int", "d": "int"},
        "t3": {"k": "int not null", "v": "int"},
        # a TPC-H-like snowflake, with distinct-value statistics (order_joins)
        "region": {"r_regionkey": "int", "r_name": "text"},
        "nation": {"n_nationkey": "int", "n_regionkey": "int", "n_name": "text"},
        "supplier": {"s_suppkey": "int", "s_nationkey": "int"},
        "customer": {"c_custkey": "int", "c_nationkey": "int"},
        "orders": {"o_orderkey": "int", "o_custkey": "int"},
        "lineitem": {"l_orderkey": "int", "l_suppkey": "int", "l_price": "numeric"},
    },
    row_estimates=(
        ESTIMATES := {
            "t1": 100_000,
            "t2": 50,
            "t3": 1_000,
            "region": 5,
            "nation": 25,
            "supplier": 1_000,
            "customer": 15_000,
            "orders": 150_000,
            "lineitem": 600_000,
        }
    ),  # fmt: skip
    distinct_estimates={
        "region.r_regionkey": 5,
        "nation.n_nationkey": 25,
        "nation.n_regionkey": 5,
        "supplier.s_suppkey": 1_000,
        "supplier.s_nationkey": 25,
        "customer.c_custkey": 15_000,
        "customer.c_nationkey": 25,
        "orders.o_orderkey": 150_000,
        "orders.o_custkey": 10_000,
        "lineitem.l_orderkey": 150_000,
        "lineitem.l_suppkey": 1_000,
    },
)
# the catalog's row estimates reach the plan through Scan.row_estimate


def with_row_estimates(plan: LogicalPlan) -> LogicalPlan:
    """``plan`` with each Scan's ``row_estimate`` from the catalog (if the builder left it out)."""
    memo: dict[int, LogicalPlan] = {}

    def visit(n: LogicalPlan) -> LogicalPlan:
        if id(n) in memo:
            return memo[id(n)]
        if isinstance(n, lp.Scan):
            out: LogicalPlan = n
            if n.row_estimate is None and n.table in ESTIMATES:
                from dataclasses import replace

                out = replace(n, row_estimate=ESTIMATES[n.table])
        else:
            kids = [visit(c) for c in n.children]
            out = n.with_children(*kids) if kids else n
        memo[id(n)] = out
        return out

    return visit(plan)


# -- fixtures ------------------------------------------------------------------------------------


def _load(path: Path) -> list[dict]:
    cases = []
    for block in re.split(r"\n(?=-- case:)", path.read_text().strip()):
        lines = block.strip().splitlines()
        name = lines[0].removeprefix("-- case:").strip()
        rules = None
        body: list[str] = []
        expected: list[str] = []
        target = body
        for line in lines[1:]:
            if line.startswith("-- rules:"):
                rules = [r.strip() for r in line.removeprefix("-- rules:").split(",")]
            elif line.startswith("-- expected:"):
                target = expected
            else:
                target.append(line)
        sql = "\n".join(body).strip().rstrip(";")
        cases.append(
            {"name": name, "rules": rules, "sql": sql, "expected": "\n".join(expected).strip()}
        )
    return cases


def _rule(name: str):
    return getattr(importlib.import_module(f"engine.sql.rules.{name}"), name)


def _fixture_params():
    params = []
    for path in sorted(FIXTURES.glob("*.sql")):
        for case in _load(path):
            params.append(pytest.param(path, case, id=f"{path.stem}:{case['name']}"))
    return params


def _run_case(path: Path, case: dict) -> str:
    plan = with_row_estimates(build_plan(case["sql"], CATALOG).plan)
    if path.stem == "optimize":
        rules = RULES
    else:
        rules = tuple(_rule(r) for r in (case["rules"] or [path.stem]))
    return format_plan(optimize(plan, rules))


@pytest.mark.parametrize(("path", "case"), _fixture_params())
def test_fixture(path: Path, case: dict) -> None:
    got = _run_case(path, case)
    if os.environ.get("INCVIEW_UPDATE_FIXTURES"):
        _rewrite(path)
        return
    assert got == case["expected"], f"\n{got}\n!=\n{case['expected']}"


def _rewrite(path: Path) -> None:
    """Write ``path`` back with every case's expected plan replaced by the current output."""
    blocks = []
    for case in _load(path):
        head = f"-- case: {case['name']}\n"
        if case["rules"]:
            head += f"-- rules: {', '.join(case['rules'])}\n"
        blocks.append(f"{head}{case['sql']};\n-- expected:\n{_run_case(path, case)}\n")
    path.write_text("\n".join(blocks))


def test_every_rule_has_fixtures() -> None:
    names = {r.__name__ for r in RULES}
    for name in names:
        cases = _load(FIXTURES / f"{name}.sql")
        assert len(cases) >= 3, name


def test_rules_are_idempotent_on_fixtures() -> None:
    for path in sorted(FIXTURES.glob("*.sql")):
        for case in _load(path):
            once = optimize(build_plan(case["sql"], CATALOG).plan)
            assert format_plan(optimize(once)) == format_plan(once), case["name"]


def test_explain_seed_example() -> None:
    catalog = DictCatalog(
        {"example_table": {"a": "int", "b": "int", "c": "text"}, "numbers_table": {"a": "int"}}
    )
    text = explain(
        "SELECT count(*) FROM example_table e JOIN numbers_table n ON e.b = n.a WHERE e.b > 30",
        catalog,
    )
    optimized = text.split("== Optimized logical plan ==\n")[1].split("\n\n")[0]
    assert optimized == "\n".join(
        [
            'Projection: "__agg0" AS count',
            "  Aggregate: groupBy=[[]], aggr=[[COUNT(*)]]",
            '    Inner Join: "e"."b" = "n"."a"',
            "      SubqueryAlias: e",
            '        Filter: NOT "example_table"."b" IS NULL AND "example_table"."b" > 30',
            "          TableScan: example_table projection=[b], "
            'partial_filters=[NOT "b" IS NULL, "b" > 30]',
            "      SubqueryAlias: n",
            '        Filter: NOT "numbers_table"."a" IS NULL AND "numbers_table"."a" > 30',
            "          TableScan: numbers_table projection=[a], "
            'partial_filters=[NOT "a" IS NULL, "a" > 30]',
        ]
    )


# -- semantics: optimized == unoptimized on random data ------------------------------------------

SEMANTIC_QUERIES = [
    # joins of every kind
    "SELECT count(*) FROM example_table e JOIN numbers_table n ON e.b = n.a WHERE e.b > 30",
    "SELECT t1.a, t1.c, t2.d FROM t1 JOIN t2 ON t1.a = t2.a WHERE t1.b > 2 AND t2.d < 4",
    "SELECT t1.a, t2.d FROM t1, t2 WHERE t1.b = t2.d AND t1.a IN (1, 2, 3)",
    "SELECT t1.a, t1.b, t2.d FROM t1 LEFT JOIN t2 ON t1.a = t2.a AND t2.d > 1 WHERE t1.b < 4",
    "SELECT t1.a, t2.d FROM t1 LEFT JOIN t2 ON t1.a = t2.a WHERE t2.d IS NULL",
    "SELECT t1.a AS x, t2.d FROM t1 LEFT JOIN t2 ON t1.a = t2.a AND t1.b > 2 WHERE t1.a > 1",
    "SELECT t1.b, t2.a AS a2 FROM t1 RIGHT JOIN t2 ON t1.a = t2.a AND t1.c = 'x' WHERE t2.d > 1",
    "SELECT t1.a AS a1, t2.a AS a2 FROM t1 FULL JOIN t2 ON t1.a = t2.a AND t2.d > 2 WHERE t1.b > 1",
    "SELECT t1.a, t2.d, t3.v FROM t1 JOIN t2 ON t1.a = t2.a JOIN t3 ON t2.d = t3.k WHERE t3.v > 2",
    "SELECT t1.a, t3.v FROM t1, t3, t2 WHERE t1.a = t2.a AND t2.d = t3.k AND t1.b >= 2",
    "SELECT t1.b, t2.d, t3.v FROM t1, t2, t3 WHERE t1.a = t2.a AND t2.a = t3.k AND t3.v > 1",
    "SELECT t1.b, t3.v FROM t3, t1, t2 WHERE t1.a = t2.d AND t2.d = t3.k AND t1.b = t3.v",
    "SELECT a, b FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.a = t1.a AND t2.d > 2) AND b > 1",
    "SELECT a, b FROM t1 WHERE NOT EXISTS (SELECT 1 FROM t2 WHERE t2.a = t1.a AND t2.d > 2)",
    "SELECT a, b FROM t1 WHERE a IN (SELECT d FROM t2 WHERE d > 1) AND a > 0",
    "SELECT a, b FROM t1 WHERE a NOT IN (SELECT d FROM t2 WHERE a > 1)",
    "SELECT t1.a, (SELECT max(d) FROM t2) AS m FROM t1 WHERE t1.b > 1",
    # semi joins on a unique right input (unique_semi_join): inner joins
    "SELECT a, b FROM t1 WHERE a IN (SELECT a FROM t2 GROUP BY a HAVING count(*) > 1)",
    "SELECT a, c FROM t1 WHERE b IN (SELECT DISTINCT d FROM t2) AND a > 0",
    "SELECT a, b FROM t1 WHERE EXISTS (SELECT 1 FROM (SELECT a, d FROM t2 GROUP BY a, d) g "
    "WHERE g.a = t1.a AND g.d = t1.b)",
    "SELECT a, c FROM t1 WHERE b IN (SELECT d FROM t2 UNION SELECT v FROM t3)",
    "SELECT a, c FROM t1 WHERE b IN (SELECT d FROM t2 EXCEPT SELECT k FROM t3)",
    # semi and anti joins moved onto the join input they test (pushdown_semi_joins)
    "SELECT t1.a, t2.d FROM t1 JOIN t2 ON t1.a = t2.a WHERE t1.b IN (SELECT k FROM t3 GROUP BY k "
    "HAVING count(*) > 1)",
    "SELECT t1.a, t2.d FROM t1 JOIN t2 ON t1.a = t2.a WHERE NOT EXISTS (SELECT 1 FROM t3 "
    "WHERE t3.k = t2.d)",
    "SELECT t1.c, t2.d, t3.v FROM t1, t2, t3 WHERE t1.a = t2.a AND t2.d = t3.k "
    "AND t1.b NOT IN (SELECT v FROM t3 WHERE v > 1)",
    "SELECT t1.a, count(*) AS n FROM t1 JOIN t2 ON t1.a = t2.a WHERE t2.d IN (SELECT a FROM t1) "
    "GROUP BY t1.a",
    # aggregates
    "SELECT c, count(*) AS n, sum(b) AS s FROM t1 WHERE a > 1 GROUP BY c HAVING count(*) > 1",
    "SELECT * FROM (SELECT a, sum(b) AS s FROM t1 GROUP BY a) g WHERE a > 2 AND s > 3",
    "SELECT t2.d, count(t1.a) AS n FROM t1 JOIN t2 ON t1.a = t2.a WHERE t1.b > 1 GROUP BY t2.d",
    "SELECT count(*) AS n FROM t1 WHERE 1 + 1 = 2 AND (TRUE OR b = 1)",
    "SELECT a, count(*) AS n FROM t1 WHERE 1 > 2 GROUP BY a",
    # subqueries, projections, constants
    "SELECT x, y FROM (SELECT a + 1 AS x, c AS y, b FROM t1) s WHERE x > 2 AND y LIKE 'a%'",
    "SELECT s.p FROM (SELECT a * 2 AS p, b FROM t1 WHERE b > 1) s WHERE s.p < 8",
    "WITH w AS (SELECT a, b FROM t1 WHERE b > 0) SELECT w1.a, w2.b FROM w w1 JOIN w w2 "
    "ON w1.a = w2.b WHERE w1.b > 2",
    "SELECT DISTINCT c FROM (SELECT c, count(*) AS n FROM t1 GROUP BY c) g WHERE n > 1",
    "SELECT DISTINCT a, b FROM t1 WHERE c = 'x'",
    "SELECT a, 'k' || 'v' AS kv, 2 * 3 AS six FROM t1 WHERE NOT NOT (a > 1)",
    # windows and top-k
    "SELECT a, b, c FROM (SELECT a, b, c, row_number() OVER (PARTITION BY c ORDER BY a, b) AS rn "
    "FROM t1) s WHERE rn <= 2",
    "SELECT * FROM (SELECT a, c, rank() OVER (PARTITION BY c ORDER BY a DESC) AS r FROM t1) s "
    "WHERE r = 1 AND c > 'a'",
    "SELECT * FROM (SELECT a, b, dense_rank() OVER (PARTITION BY a ORDER BY b) AS r FROM t1) s "
    "WHERE r < 3 AND b > 1",
    "SELECT a, s FROM (SELECT a, b, sum(b) OVER (PARTITION BY a ORDER BY b) AS s FROM t1) w "
    "WHERE a > 1 AND b > 1",
    "SELECT a, b FROM t1 WHERE b > 1 ORDER BY a, b LIMIT 3",
    # set operations
    "SELECT * FROM (SELECT a, b FROM t1 UNION ALL SELECT a, d FROM t2) u WHERE a > 1",
    "SELECT * FROM (SELECT a FROM t1 UNION SELECT d FROM t2) u WHERE a < 3",
    "SELECT * FROM (SELECT a FROM t1 EXCEPT SELECT d FROM t2) u WHERE a > 0",
    "SELECT * FROM (SELECT a FROM t1 INTERSECT ALL SELECT a FROM t2) u WHERE a IS NOT NULL",
]


def _make_row(table: str, rng: random.Random) -> tuple:
    def v(n: int = 5):
        return None if rng.random() < 0.15 else rng.randint(0, n)

    if table in ("t1", "example_table"):
        c = None if rng.random() < 0.15 else rng.choice(["a", "ab", "x", "b"])
        return (v(), v(), c) if table == "t1" else (rng.randint(0, 60), rng.randint(0, 60), c)
    if table == "numbers_table":
        return (rng.randint(0, 60),)
    if table == "t2":
        return (v(), v())
    return (rng.randint(0, 5), v())  # t3: k not null


def _history(seed: int) -> list[dict[str, DiffBatch]]:
    """Per time, per table: a batch of full-width diffs (time 0 = the population)."""
    rng = random.Random(seed)
    tables = ["t1", "t2", "t3", "example_table", "numbers_table"]
    live: dict[str, list[tuple]] = {t: [] for t in tables}
    times = []
    for t in range(4):
        per = {}
        for table in tables:
            b = DiffBatch()
            for _ in range(rng.randint(10, 30) if t == 0 else rng.randint(0, 10)):
                if live[table] and rng.random() < 0.35:
                    row = live[table].pop(rng.randrange(len(live[table])))
                    b.rows.append(row)
                    b.weights.append(-1)
                else:
                    row = (
                        rng.choice(live[table])
                        if live[table] and rng.random() < 0.1
                        else _make_row(table, rng)
                    )
                    live[table].append(row)
                    b.rows.append(row)
                    b.weights.append(1)
            per[table] = b
        times.append(per)
    return times


def _population_filter(plan: LogicalPlan, table: str):
    """The predicate a population COPY of ``table`` may use: OR over its scans' filters."""
    scans = [n for n in plan.walk() if isinstance(n, lp.Scan) and n.table == table]
    if not scans or any(not s.filters for s in scans):
        return None
    fields = scans[0].table_fields
    cols = [ColumnRef(f.name, None, f.type, f.nullable) for f in fields]
    from sqlglot import exp

    disj = None
    for s in scans:
        conj = and_all([f.copy() for f in s.filters])
        disj = conj if disj is None else exp.Or(this=exp.Paren(this=disj), expression=conj)
    fn, _ = compile_predicate(disj, cols)
    return fn


def _run(plan: LogicalPlan, history, state_dir: Path) -> tuple[Counter, int]:
    store = StateStore(state_dir)
    try:
        physical = plan_physical(plan, store)
        df = physical.dataflow
        sink = ZSetSink()
        errs = 0
        for t, per in enumerate(history, start=1):
            for name, cols in physical.inputs.items():
                table = name.partition(".")[2]
                full = [f.name for f in CATALOG.lookup(None, table).columns]
                batch = per[table]
                rows, weights = batch.rows, batch.weights
                if t == 1:
                    keep = _population_filter(plan, table)
                    if keep is not None:
                        flags = keep(rows)
                        rows = [r for r, k in zip(rows, flags, strict=True) if k]
                        weights = [w for w, k in zip(weights, flags, strict=True) if k]
                idx = [full.index(c) for c in cols]
                df.push(name, DiffBatch([tuple(r[i] for i in idx) for r in rows], list(weights)))
            out = df.time_end(t)
            df.commit(t)
            sink.apply(out.diffs)
            errs += len(out.errs)
        return sink.counter(), errs
    finally:
        store.close()


@pytest.mark.parametrize("sql", SEMANTIC_QUERIES, ids=range(len(SEMANTIC_QUERIES)))
def test_semantics_preserved(sql: str, tmp_path: Path) -> None:
    built = build_plan(sql, CATALOG).plan
    optimized = optimize(with_row_estimates(built))
    for seed in range(3):
        history = _history(seed)
        want, want_errs = _run(built, history, tmp_path / f"raw{seed}")
        got, got_errs = _run(optimized, history, tmp_path / f"opt{seed}")
        assert got == want, (
            f"{sql}\n{format_plan(optimized)}\nmissing {want - got}\nextra {got - want}"
        )
        assert bool(got_errs) == bool(want_errs)
    assert len(SEMANTIC_QUERIES) >= 30
