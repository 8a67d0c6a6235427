"""What the planner refuses: each bad view raises ``UnsupportedSQL`` naming the problem and,
where the parser recorded one, its position ("line L, column C" of the offending token).

Views are planned under TimeZone Europe/Paris, as a creating session would give them."""

from __future__ import annotations

import pytest

from engine.errors import UnsupportedSQL
from engine.sql.catalog import DictCatalog
from engine.sql.planner import plan_view

CATALOG = DictCatalog(
    {
        "customers": {
            "id": "int not null",
            "name": "text",
            "segment": "text",
            "score": "numeric(8,2)",
        },
        "orders": {
            "id": "int not null",
            "customer_id": "int",
            "amount": "numeric(10,2)",
            "qty": "int",
            "status": "text",
            "created": "date",
        },
        "events": {"id": "int not null", "at": "timestamptz", "every": "interval", "z": "text"},
    }
)
TIME_ZONE = "Europe/Paris"

B = pytest.param

# (sql, substrings the message must contain, "line L, column C" or None when there is none)
BAD = [
    # -- syntax and statement kinds -------------------------------------------------------------
    B("SELEC id FROM orders", ["syntax error"], "line 1, column 13", id="syntax-typo"),
    B("SELECT id FROM orders WHERE", ["syntax error"], "line 1, column 27", id="syntax-dangling"),
    B(
        "SELECT id, FROM orders",
        ["syntax error", "comma"],
        "line 1, column 12",
        id="trailing-comma",
    ),
    B("SELECT id, 'abc FROM orders", ["syntax error", "tokenizing"], None, id="unterminated"),
    B("", ["empty"], None, id="empty"),
    B("INSERT INTO orders (id) VALUES (1)", ["must be a SELECT", "INSERT"], "line 1", id="insert"),
    B("UPDATE orders SET qty = 1", ["must be a SELECT", "UPDATE"], "line 1", id="update"),
    B("DELETE FROM orders", ["must be a SELECT", "DELETE"], "line 1", id="delete"),
    B("CREATE TABLE t (a int)", ["must be a SELECT", "CREATE"], "line 1", id="ddl"),
    B(
        "SELECT 1 AS a; SELECT 2 AS b",
        ["one SELECT statement", "several"],
        "line 1, column 23",
        id="several-statements",
    ),
    B("SELECT id INTO t2 FROM orders", ["SELECT INTO"], "line 1, column 16", id="select-into"),
    # -- names ----------------------------------------------------------------------------------
    B("SELECT id FROM nope", ["unknown table nope"], "line 1, column 16", id="unknown-table"),
    B(
        "SELECT id FROM sales.orders",
        ["unknown table sales.orders"],
        "line 1, column 16",
        id="unknown-schema",
    ),
    B(
        "SELECT id FROM other_db.public.orders",
        ["cross-database"],
        "line 1, column 16",
        id="cross-database",
    ),
    B(
        "SELECT nope FROM orders",
        ["unknown column 'nope'"],
        "line 1, column 8",
        id="unknown-column",
    ),
    B(
        "SELECT o.nope FROM orders o",
        ["unknown column 'nope'", "table o"],
        "line 1, column 8",
        id="unknown-qualified-column",
    ),
    B(
        "SELECT id FROM orders o JOIN customers c ON c.id = o.customer_id",
        ["'id' is ambiguous", "customers", "orders"],
        "line 1, column 8",
        id="ambiguous-column",
    ),
    B(
        "SELECT id, qty AS id FROM orders",
        ["two columns named 'id'", "alias"],
        None,
        id="duplicate-output-names",
    ),
    # -- functions and types --------------------------------------------------------------------
    B("SELECT soundex(status) FROM orders", ["SOUNDEX", "not supported"], "line 1", id="function"),
    B(
        "SELECT id, now() AS t FROM orders",
        ["now", "not deterministic"],
        "line 1, column 12",
        id="now",
    ),
    B(
        "SELECT id FROM orders WHERE random() > 0.5",
        ["random", "not deterministic"],
        "line 1, column 29",
        id="random",
    ),
    B(
        "SELECT id, clock_timestamp() FROM orders",
        ["clock_timestamp() changes with time"],
        "line 1, column 12",
        id="clock-timestamp",
    ),
    B(
        "SELECT id FROM orders WHERE created > current_date",
        ["current_date is not deterministic"],
        None,
        id="current-date",
    ),
    B(
        "SELECT id FROM orders WHERE status = 1",
        ["operator does not exist: text = integer", "cast"],
        "line 1",
        id="type-mismatch-comparison",
    ),
    B(
        "SELECT status + 1 AS x FROM orders",
        ["operator does not exist: text + integer"],
        "line 1",
        id="type-mismatch-arithmetic",
    ),
    B(
        "SELECT id FROM orders WHERE qty",
        ["argument of WHERE must be type boolean", "integer"],
        "line 1, column 29",
        id="where-not-boolean",
    ),
    # -- aggregates and grouping ----------------------------------------------------------------
    B(
        "SELECT customer_id, status, count(*) FROM orders GROUP BY customer_id",
        ["status", "must appear in GROUP BY"],
        "line 1, column 21",
        id="group-by-violation",
    ),
    B(
        "SELECT id, count(*) FROM orders",
        ["id", "must appear in GROUP BY"],
        "line 1, column 8",
        id="aggregate-without-group-by",
    ),
    B(
        "SELECT id FROM orders HAVING qty > 1",
        ["HAVING without GROUP BY"],
        "line 1, column 30",
        id="having-without-group",
    ),
    B(
        "SELECT array_agg(DISTINCT id) FROM orders",
        ["array_agg(DISTINCT", "not supported"],
        "line 1, column 8",
        id="array-agg-distinct",
    ),
    B(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM orders",
        ["percentile_cont", "ordered-set"],
        "line 1, column 8",
        id="ordered-set-aggregate",
    ),
    B(
        "SELECT sum(DISTINCT amount) FROM orders",
        ["sum(DISTINCT ...) is not supported"],
        "line 1, column 8",
        id="sum-distinct",
    ),
    B("SELECT sum(status) FROM orders", ["sum of a text value"], "line 1, column 8", id="sum-text"),
    B(
        "SELECT customer_id, GROUPING(status) FROM orders GROUP BY ROLLUP (customer_id)",
        ["arguments to GROUPING must be grouping expressions"],
        "line 1",
        id="grouping-of-a-non-grouping-column",
    ),
    B(
        "SELECT GROUPING(status) FROM orders",
        ["GROUPING needs a GROUP BY"],
        "line 1",
        id="grouping-without-group-by",
    ),
    # -- ordering, limits and windows -----------------------------------------------------------
    B(
        "SELECT id FROM orders LIMIT 5",
        ["LIMIT without ORDER BY"],
        "line 1, column 29",
        id="limit-without-order",
    ),
    B(
        "SELECT id FROM orders ORDER BY id LIMIT $1",
        ["LIMIT must be an integer constant"],
        "line 1",
        id="limit-parameter",
    ),
    B(
        "SELECT DISTINCT ON (customer_id) id FROM orders ORDER BY customer_id, id LIMIT 2",
        ["DISTINCT ON with LIMIT"],
        "line 1",
        id="distinct-on-limit",
    ),
    B(
        "SELECT id, sum(amount) OVER (PARTITION BY customer_id ORDER BY amount "
        "RANGE BETWEEN 10 PRECEDING AND CURRENT ROW) AS s FROM orders",
        ["RANGE frames with an offset"],
        "line 1",
        id="window-frame-range-offset",
    ),
    B(
        "SELECT id, sum(amount) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING "
        "EXCLUDE CURRENT ROW) AS s FROM orders",
        ["EXCLUDE"],
        "line 1",
        id="window-frame-exclude",
    ),
    B(
        "SELECT id, sum(amount) OVER (PARTITION BY customer_id ROWS 2 PRECEDING) AS s FROM orders",
        ["ROWS frame without ORDER BY"],
        "line 1",
        id="window-rows-frame-without-order",
    ),
    B(
        "SELECT id, row_number() OVER w AS rn FROM orders WINDOW w AS (ORDER BY id)",
        ["named windows"],
        "line 1, column 12",
        id="named-window",
    ),
    B(
        "SELECT ntile(qty) OVER (ORDER BY id) AS q FROM orders",
        ["the argument of ntile must be an integer constant"],
        "line 1, column 14",
        id="ntile-of-a-column",
    ),
    B(
        "SELECT nth_value(id, 0) OVER (ORDER BY id) AS q FROM orders",
        ["argument of nth_value must be greater than zero"],
        "line 1",
        id="nth-value-zero",
    ),
    B(
        "SELECT percentile_rank() OVER (ORDER BY id) AS q FROM orders",
        ["window function PERCENTILE_RANK"],
        "line 1, column 8",
        id="unknown-window-function",
    ),
    # -- FROM and subqueries --------------------------------------------------------------------
    B(
        "SELECT c.id, x.n FROM customers c, LATERAL "
        "(SELECT count(*) AS n FROM orders o WHERE o.customer_id = c.id) x",
        ["LATERAL"],
        "line 1",
        id="lateral",
    ),
    B(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) "
        "SELECT n FROM r",
        ["WITH RECURSIVE"],
        "line 1",
        id="recursive-cte",
    ),
    B(
        "SELECT * FROM orders o, (VALUES (o.qty), (2)) v(x)",
        ["VALUES in FROM must be constant", "o", "qty"],
        "line 1",
        id="values-lateral",
    ),
    # -- constant relations: what stays refused (issue 18) ----------------------------------------
    B(
        "SELECT * FROM (VALUES (1, 2), (3)) v(x, y)",
        ["VALUES lists must all be the same length"],
        "line 1, column 32",
        id="values-ragged",
    ),
    B(
        "SELECT * FROM (VALUES (1), (DATE '2024-01-01')) v(x)",
        ["VALUES types date and integer cannot be matched"],
        "line 1, column 24",
        id="values-type-mismatch",
    ),
    B(
        "SELECT * FROM (VALUES (10 / 0)) v(x)",
        ["VALUES raises an error", "division by zero"],
        "line 1, column 24",
        id="values-error",
    ),
    B(
        "SELECT * FROM (VALUES (1)) v(x, y)",
        ["v has 1 column(s) available but 2 are named"],
        None,
        id="values-too-many-names",
    ),
    B(
        "SELECT o.id, g.x FROM orders o, generate_series(1, o.qty) g(x)",
        ["generate_series in FROM must be constant", "qty"],
        "line 1, column 52",
        id="series-lateral",
    ),
    B(
        "SELECT * FROM generate_series(1, 10, 0) g",
        ["step size cannot equal zero"],
        "line 1, column 15",
        id="series-step-zero",
    ),
    B(
        "SELECT * FROM generate_series(true, false, interval '1 day') d",
        ["generate_series over boolean values with an interval step"],
        "line 1, column 15",
        id="series-booleans",
    ),
    B(
        "SELECT * FROM generate_series(1, 100000000) g",
        ["100000000 rows", "limited to 1000000"],
        "line 1, column 15",
        id="series-too-long",
    ),
    B(
        "SELECT * FROM generate_series(1, 3) WITH ORDINALITY g(x, n)",
        ["WITH ORDINALITY"],
        "line 1, column 15",
        id="series-ordinality",
    ),
    B(
        "SELECT * FROM unnest(ARRAY[1, 2]) WITH ORDINALITY u(x, n)",
        ["WITH ORDINALITY"],
        "line 1, column 28",
        id="unnest-ordinality",
    ),
    B(
        "SELECT * FROM unnest(ARRAY[1, 2], ARRAY[3]) u",
        ["several arrays needs a column list"],
        "line 1, column 28",
        id="unnest-two-arrays-unnamed",
    ),
    B(
        "SELECT * FROM unnest(ARRAY[ARRAY[1], ARRAY[2]]) u",
        ["multidimensional"],
        "line 1",
        id="unnest-2d",
    ),
    B(
        "SELECT * FROM unnest(ARRAY[]) u",
        ["type of an empty array"],
        None,
        id="unnest-empty",
    ),
    B(
        "SELECT id FROM customers c "
        "WHERE c.id IN (SELECT o.customer_id FROM orders o WHERE o.qty = c.id)",
        ["correlated IN", "EXISTS"],
        "line 1, column 34",
        id="correlated-in",
    ),
    B(
        "SELECT id FROM customers c WHERE c.score > 0 "
        "OR EXISTS (SELECT 1 FROM orders o WHERE o.amount > c.score)",
        ["EXISTS must be correlated by equalities"],
        "line 1",
        id="exists-under-or-correlated-by-inequality",
    ),
    B(
        "SELECT id, (SELECT max(amount) + 1 FROM orders o2 WHERE o2.id = o.id) AS a FROM orders o",
        ["correlated scalar subquery", "single aggregate call or an expression without"],
        "line 1, column 20",  # the subquery's first positioned node (keywords carry none)
        id="correlated-scalar-aggregate-in-expression",
    ),
    B(
        "SELECT id, (SELECT amount FROM orders) AS a FROM orders o",
        ["scalar subquery must return exactly one row"],
        "line 1, column 20",
        id="scalar-subquery-many-rows",
    ),
    B(
        "SELECT id FROM orders UNION SELECT id, name FROM customers",
        ["same number of columns"],
        "line 1",
        id="union-arity",
    ),
    B("SELECT id FROM orders FOR UPDATE", ["FOR UPDATE"], None, id="for-update"),
    # -- what Postgres rejects or what is not deterministic ------------------------------------
    B(
        "SELECT o.id FROM orders o JOIN customers c ON",
        ["JOIN without a join condition"],
        "line 1",
        id="join-empty-on",
    ),
    B(
        "SELECT o.id FROM orders o JOIN customers c",
        ["JOIN without a join condition"],
        "line 1",
        id="join-no-on",
    ),
    B(
        "SELECT id FROM orders TABLESAMPLE SYSTEM (10)",
        ["TABLESAMPLE is not deterministic"],
        "line 1",
        id="tablesample",
    ),
    B(
        "SELECT DISTINCT ON (qty) id FROM orders",
        ["DISTINCT ON without ORDER BY"],
        "line 1",
        id="distinct-on-no-order",
    ),
    B(
        "SELECT xmin, id FROM orders",
        ["system column xmin is not deterministic"],
        "line 1, column 8",
        id="system-column-xmin",
    ),
    B(
        "SELECT ctid FROM Orders",
        ["system column ctid is not deterministic"],
        "line 1, column 8",
        id="system-column-ctid",
    ),
    # -- time zones (docs/sql.md "Time zones") ----------------------------------------------------
    B(
        "SELECT at AT TIME ZONE 'EST' FROM events",
        ["time zone 'EST' as AT TIME ZONE", "full IANA zone name"],
        "line 1",
        id="tz-abbreviation",
    ),
    B(
        "SELECT at AT TIME ZONE z FROM events",
        ["AT TIME ZONE given by anything but a zone name literal"],
        "line 1",
        id="tz-zone-column",
    ),
    B(
        "SELECT at AT TIME ZONE INTERVAL '-05:00' FROM events",
        ["AT TIME ZONE given by anything but a zone name literal"],
        "line 1",
        id="tz-zone-interval",
    ),
    B(
        "SELECT date_trunc('day', at, 'Mars/Olympus') FROM events",
        ['time zone "Mars/Olympus" not recognized'],
        "line 1",
        id="tz-unknown-zone",
    ),
    B(
        "SELECT date_trunc('month', '2024-01-05') FROM events",
        ["function date_trunc(unknown, unknown) is not unique", "explicit cast"],
        "line 1",
        id="date-trunc-untyped-literal",
    ),
    B(
        "SELECT extract(day FROM '2024-01-05') FROM events",
        ["function extract is not unique"],
        "line 1",
        id="extract-untyped-literal",
    ),
]


@pytest.mark.parametrize(("sql", "fragments", "where"), BAD)
def test_refused_with_a_clear_message(sql, fragments, where):
    with pytest.raises(UnsupportedSQL) as info:
        plan_view(sql, CATALOG, TIME_ZONE)
    msg = str(info.value)
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"
    if where is not None:
        assert f"at {where}" in msg, f"position {where!r} not in {msg!r}"
