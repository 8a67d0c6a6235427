"""PostgresCatalog against a real PostgreSQL: columns, row and distinct-value estimates (the
join-ordering statistics), and the join order they give a TPC-H Q5-like view."""

from __future__ import annotations

from engine.postgres.source_catalog import PostgresCatalog
from engine.sql.logical_plan import Join, LogicalPlan
from engine.sql.planner import plan_view


def _join_conditions(plan: LogicalPlan) -> list[str]:
    """The inner joins' conditions, innermost first."""
    out: list[str] = []

    def visit(n: LogicalPlan) -> None:
        for c in n.children:
            visit(c)
        if isinstance(n, Join) and n.condition is not None:
            out.append(n.condition.sql())

    visit(plan)
    return out


def test_statistics_reach_the_columns(pg_conn):
    pg_conn.execute("CREATE TABLE stats_t (id int PRIMARY KEY, grp int, note text)")
    pg_conn.execute("INSERT INTO stats_t SELECT g, g % 7, NULL FROM generate_series(1, 5000) g")
    catalog = PostgresCatalog(pg_conn)
    before = catalog.lookup(None, "stats_t")
    assert before is not None and all(c.distinct is None for c in before.columns)
    pg_conn.execute("ANALYZE stats_t")
    table = catalog.lookup(None, "stats_t")
    assert table is not None and table.row_estimate == 5000
    distinct = {c.name: c.distinct for c in table.columns}
    assert distinct["id"] == 5000  # n_distinct -1 (unique): all rows
    assert distinct["grp"] == 7
    assert distinct["note"] is None  # only NULLs: no figure


def test_a_join_on_a_shared_low_cardinality_key_is_not_taken_alone(pg_conn):
    """Q5's shape: customers and suppliers share a 25-value nation key. Joined on it alone they
    multiply; with statistics the planner joins suppliers where the lineitem key comes too (the
    nation key meets only the 25 nations: the implied ``c_nationkey = n_nationkey``)."""
    pg_conn.execute(
        """
        CREATE TABLE region (r_regionkey int, r_name text);
        CREATE TABLE nation (n_nationkey int, n_regionkey int, n_name text);
        CREATE TABLE supplier (s_suppkey int, s_nationkey int);
        CREATE TABLE customer (c_custkey int, c_nationkey int);
        CREATE TABLE orders (o_orderkey int, o_custkey int);
        CREATE TABLE lineitem (l_orderkey int, l_suppkey int, l_price numeric);
        INSERT INTO region SELECT g, 'r' || g FROM generate_series(0, 4) g;
        INSERT INTO nation SELECT g, g % 5, 'n' || g FROM generate_series(0, 24) g;
        INSERT INTO supplier SELECT g, g % 25 FROM generate_series(1, 1000) g;
        INSERT INTO customer SELECT g, g % 25 FROM generate_series(1, 15000) g;
        INSERT INTO orders SELECT g, 1 + g % 10000 FROM generate_series(1, 150000) g;
        INSERT INTO lineitem SELECT 1 + g % 150000, 1 + g % 1000, g FROM generate_series(1, 600000) g;
        ANALYZE region, nation, supplier, customer, orders, lineitem;
        """
    )
    plan = plan_view(
        "SELECT n_name, sum(l_price) FROM customer, orders, lineitem, supplier, nation, region "
        "WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey "
        "AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey "
        "AND n_regionkey = r_regionkey GROUP BY n_name",
        PostgresCatalog(pg_conn),
    )
    conditions = _join_conditions(plan.optimized)
    alone = [c for c in conditions if "s_nationkey" in c and "s_suppkey" not in c]
    assert not alone, conditions
    assert any("c_nationkey" in c and "n_nationkey" in c for c in conditions), conditions


def test_unique_keys_are_those_no_two_rows_can_share(pg_conn):
    """A table's keys: its primary key first, then unique indexes of NOT NULL plain columns;
    not a unique index over a nullable column (NULLs repeat), a partial or expression index, a
    deferrable constraint (duplicates within a transaction), a table with inheritance children
    (a SELECT of it reads theirs); a partitioned table's keys hold across its partitions."""
    pg_conn.execute(
        """
        CREATE TABLE keyed (id int PRIMARY KEY, code text NOT NULL UNIQUE, a int NOT NULL,
                            b int NOT NULL, maybe int UNIQUE, low text NOT NULL, d int NOT NULL);
        CREATE UNIQUE INDEX keyed_ab ON keyed (b, a);
        CREATE UNIQUE INDEX keyed_partial ON keyed (a) WHERE a > 0;
        CREATE UNIQUE INDEX keyed_lower ON keyed (lower(low));
        ALTER TABLE keyed ADD CONSTRAINT keyed_d UNIQUE (d) DEFERRABLE;
        CREATE TABLE bag (g int, v int);
        CREATE TABLE parent (id int PRIMARY KEY);
        CREATE TABLE child () INHERITS (parent);
        CREATE TABLE parts (id int, region int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
        CREATE TABLE parts_1 PARTITION OF parts FOR VALUES IN (1);
        """
    )
    catalog = PostgresCatalog(pg_conn)
    assert catalog.lookup(None, "keyed").keys == (("id",), ("code",), ("b", "a"))
    assert catalog.lookup(None, "bag").keys == ()
    assert catalog.lookup(None, "parent").keys == ()
    assert catalog.lookup(None, "child").keys == ()  # no index of its own
    assert catalog.lookup(None, "parts").keys == (("id", "region"),)
