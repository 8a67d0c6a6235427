"""The TPC-H schema in Postgres: tables (types as dbgen's dss.ddl), keys, replica identity.

``create_tables`` drops and creates the eight tables without constraints (COPY is faster into
bare tables); ``finish_tables`` then adds the primary keys of the spec (clause 1.4.2), sets
``REPLICA IDENTITY FULL`` (incview needs old rows for UPDATE/DELETE) and runs ``VACUUM ANALYZE``.
``drop_tables`` removes them. This module issues DDL only; loading is ``bench.tpch.load``.

Text columns: dss.ddl declares the spec's "fixed text" columns ``char(n)``. incview currently
compares ``char(n)`` values with their blank padding (``c_mktsegment = 'BUILDING'`` matches no
row, Postgres ignores trailing blanks), so by default they are created ``varchar(n)``, which
the spec's "fixed text" also admits; ``create_tables(conn, char=True)`` keeps dss.ddl's types.
"""

from __future__ import annotations

import psycopg

TABLES: dict[str, str] = {
    "region": """
        r_regionkey integer NOT NULL, r_name char(25) NOT NULL, r_comment varchar(152)""",
    "nation": """
        n_nationkey integer NOT NULL, n_name char(25) NOT NULL, n_regionkey integer NOT NULL,
        n_comment varchar(152)""",
    "part": """
        p_partkey integer NOT NULL, p_name varchar(55) NOT NULL, p_mfgr char(25) NOT NULL,
        p_brand char(10) NOT NULL, p_type varchar(25) NOT NULL, p_size integer NOT NULL,
        p_container char(10) NOT NULL, p_retailprice numeric(15,2) NOT NULL,
        p_comment varchar(23) NOT NULL""",
    "supplier": """
        s_suppkey integer NOT NULL, s_name char(25) NOT NULL, s_address varchar(40) NOT NULL,
        s_nationkey integer NOT NULL, s_phone char(15) NOT NULL,
        s_acctbal numeric(15,2) NOT NULL, s_comment varchar(101) NOT NULL""",
    "partsupp": """
        ps_partkey integer NOT NULL, ps_suppkey integer NOT NULL, ps_availqty integer NOT NULL,
        ps_supplycost numeric(15,2) NOT NULL, ps_comment varchar(199) NOT NULL""",
    "customer": """
        c_custkey integer NOT NULL, c_name varchar(25) NOT NULL, c_address varchar(40) NOT NULL,
        c_nationkey integer NOT NULL, c_phone char(15) NOT NULL,
        c_acctbal numeric(15,2) NOT NULL, c_mktsegment char(10) NOT NULL,
        c_comment varchar(117) NOT NULL""",
    "orders": """
        o_orderkey integer NOT NULL, o_custkey integer NOT NULL, o_orderstatus char(1) NOT NULL,
        o_totalprice numeric(15,2) NOT NULL, o_orderdate date NOT NULL,
        o_orderpriority char(15) NOT NULL, o_clerk char(15) NOT NULL,
        o_shippriority integer NOT NULL, o_comment varchar(79) NOT NULL""",
    "lineitem": """
        l_orderkey integer NOT NULL, l_partkey integer NOT NULL, l_suppkey integer NOT NULL,
        l_linenumber integer NOT NULL, l_quantity numeric(15,2) NOT NULL,
        l_extendedprice numeric(15,2) NOT NULL, l_discount numeric(15,2) NOT NULL,
        l_tax numeric(15,2) NOT NULL, l_returnflag char(1) NOT NULL,
        l_linestatus char(1) NOT NULL, l_shipdate date NOT NULL, l_commitdate date NOT NULL,
        l_receiptdate date NOT NULL, l_shipinstruct char(25) NOT NULL,
        l_shipmode char(10) NOT NULL, l_comment varchar(44) NOT NULL""",
}

PRIMARY_KEYS: dict[str, str] = {
    "region": "r_regionkey",
    "nation": "n_nationkey",
    "part": "p_partkey",
    "supplier": "s_suppkey",
    "partsupp": "ps_partkey, ps_suppkey",
    "customer": "c_custkey",
    "orders": "o_orderkey",
    "lineitem": "l_orderkey, l_linenumber",
}


def drop_tables(conn: psycopg.Connection) -> None:
    conn.execute("DROP TABLE IF EXISTS " + ", ".join(TABLES) + " CASCADE")


def create_tables(conn: psycopg.Connection, char: bool = False) -> None:
    drop_tables(conn)
    for name, columns in TABLES.items():
        if not char:
            columns = columns.replace(" char(", " varchar(")
        conn.execute(f"CREATE TABLE {name} ({columns})")


def finish_tables(conn: psycopg.Connection) -> None:
    for name, key in PRIMARY_KEYS.items():
        conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY ({key})")
        conn.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    for name in TABLES:
        conn.execute(f"VACUUM ANALYZE {name}")
