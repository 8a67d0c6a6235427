"""``incview demo``: a shop in Postgres, four views kept up to date while a writer changes it.

The demo runs against ``--dsn`` / ``INCVIEW_DSN`` when given, else against the embedded server
under ``--state-dir`` (``Engine(dsn=None)``), on the runner a user gets by default: Spark (each
view populated by a Spark batch job, then kept up to date by its Structured Streaming query), or
in-process with ``--runner local``. It (re)creates schema ``demo`` (customers, products,
orders, order_items, all REPLICA IDENTITY FULL, a few thousand rows) and four views, whose result
tables live in the same schema:
  * ``demo.revenue_by_segment``: order_items JOIN orders JOIN customers, GROUP BY segment
  * ``demo.orders_with_customers``: orders LEFT JOIN customers (orders of deleted customers stay)
  * ``demo.top3_orders_per_customer``: row_number() per customer <= 3 (a top-k)
  * ``demo.product_sales``: products LEFT JOIN order_items, GROUP BY product; created with
    ``CALL incview.create_view`` from a session of its own, answered by the engine's commander
A writer thread inserts, updates and deletes in small transactions for ``seconds`` while the views
keep up (the streaming queries on Spark; the main loop's ``catch_up()`` in-process). Every few
seconds it prints the writer's throughput and each view's lag measured while the writer runs, then
pauses the writer, catches up and prints each view's row count and whether its result table
equals its query run by Postgres (EXCEPT ALL both ways). At the end it stops the writer, catches up, checks every view once more and prints
"all views equal their queries" (exit 0) or which view differs (exit 1); then it drops its views
(and with the last one the slot) and the schema, so it can be re-run on the same state dir
(``keep=True`` leaves them for inspection; the next run replaces them), and prints the command
that opens the same views in ``dagster dev`` (``definitions.py``; ``incview demo --dagster``).
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import psycopg

from engine.errors import ViewError

SCHEMA = "demo"
_MARK = "incview demo data: dropped and re-created by every `incview demo` run"
SEGMENTS = ["retail", "wholesale", "online", "enterprise"]
STATUSES = ["new", "paid", "shipped", "cancelled"]
N_CUSTOMERS, N_PRODUCTS, N_ORDERS = 500, 100, 2000

VIEWS = {
    "demo.revenue_by_segment": (
        "SELECT c.segment, count(*) AS items, sum(oi.quantity * oi.unit_price) AS revenue "
        "FROM demo.order_items oi JOIN demo.orders o ON oi.order_id = o.id "
        "JOIN demo.customers c ON o.customer_id = c.id "
        "WHERE o.status <> 'cancelled' GROUP BY c.segment"
    ),
    "demo.orders_with_customers": (
        "SELECT o.id, o.status, o.amount, c.name AS customer "
        "FROM demo.orders o LEFT JOIN demo.customers c ON o.customer_id = c.id"
    ),
    "demo.top3_orders_per_customer": (
        "SELECT customer_id, id, amount FROM ("
        "SELECT customer_id, id, amount, row_number() OVER "
        "(PARTITION BY customer_id ORDER BY amount DESC, id) AS rn FROM demo.orders) t "
        "WHERE rn <= 3"
    ),
    "demo.product_sales": (
        "SELECT p.id, p.name, count(oi.order_id) AS lines, coalesce(sum(oi.quantity), 0) AS units "
        "FROM demo.products p LEFT JOIN demo.order_items oi ON oi.product_id = p.id "
        "GROUP BY p.id, p.name"
    ),
}

# created as a user would from any SQL client: CALL incview.create_view (docs/commander.md)
CREATED_IN_SQL = "demo.product_sales"

_SCHEMA_SQL = f"""
CREATE SCHEMA demo;
COMMENT ON SCHEMA demo IS '{_MARK}';
CREATE TABLE demo.customers (id int PRIMARY KEY, name text NOT NULL, segment text);
CREATE TABLE demo.products (id int PRIMARY KEY, name text NOT NULL, price numeric(10,2) NOT NULL);
CREATE TABLE demo.orders (
    id int PRIMARY KEY, customer_id int, status text NOT NULL, amount numeric(12,2) NOT NULL
);
CREATE TABLE demo.order_items (
    order_id int NOT NULL, line int NOT NULL, product_id int NOT NULL,
    quantity int NOT NULL, unit_price numeric(10,2) NOT NULL, PRIMARY KEY (order_id, line)
);
ALTER TABLE demo.customers REPLICA IDENTITY FULL;
ALTER TABLE demo.products REPLICA IDENTITY FULL;
ALTER TABLE demo.orders REPLICA IDENTITY FULL;
ALTER TABLE demo.order_items REPLICA IDENTITY FULL;
SELECT setseed(0.42);
INSERT INTO demo.customers
    SELECT i, 'customer ' || i, (ARRAY{SEGMENTS!r})[1 + (random() * 3)::int]
    FROM generate_series(1, {N_CUSTOMERS}) i;
INSERT INTO demo.products
    SELECT i, 'product ' || i, round((1 + random() * 199)::numeric, 2)
    FROM generate_series(1, {N_PRODUCTS}) i;
INSERT INTO demo.orders
    SELECT i, 1 + (random() * {N_CUSTOMERS - 1})::int, (ARRAY{STATUSES!r})[1 + (random() * 3)::int], 0
    FROM generate_series(1, {N_ORDERS}) i;
INSERT INTO demo.order_items
    SELECT o.id, l, 1 + (random() * {N_PRODUCTS - 1})::int, 1 + (random() * 4)::int, 0
    FROM demo.orders o, generate_series(1, 1 + (o.id % 3)) l;
UPDATE demo.order_items oi SET unit_price = p.price FROM demo.products p WHERE p.id = oi.product_id;
UPDATE demo.orders o SET amount = s.total
    FROM (SELECT order_id, sum(quantity * unit_price) AS total FROM demo.order_items GROUP BY 1) s
    WHERE s.order_id = o.id;
"""


def _display_dsn(dsn: str) -> str:
    """The DSN without a password (``password=...`` or ``user:secret@``)."""
    conninfo = psycopg.conninfo.conninfo_to_dict(dsn)
    conninfo.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in conninfo.items())


def _reset_schema(conn: psycopg.Connection, engine) -> None:
    """Drop the demo views of an earlier run, then (re)create schema ``demo`` with its data."""
    for status in engine.list_views():
        if status.name.startswith(f"{SCHEMA}."):
            engine.drop_view(status.name)
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s",
        (SCHEMA,),
    ).fetchone()
    if row is not None:
        if row[0] != _MARK:
            raise ViewError(
                f"schema {SCHEMA} already exists in this database and was not created by the "
                f"incview demo: run the demo against another database (--dsn) or drop it "
                f"(DROP SCHEMA {SCHEMA} CASCADE) if it is not needed"
            )
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    create_demo_schema(conn)


def create_demo_schema(conn: psycopg.Connection) -> None:
    """Create schema ``demo`` with the demo's tables and data (one transaction)."""
    with conn.transaction():
        conn.execute(_SCHEMA_SQL)


class _Writer(threading.Thread):
    """Small random transactions against the demo tables until stopped; ``pause`` holds it."""

    def __init__(self, dsn: str, seed: int, tx_per_s: float = 200) -> None:
        super().__init__(name="incview-demo-writer", daemon=True)
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.interval = 1 / tx_per_s
        self.pause = threading.Lock()
        self.stop = threading.Event()
        self.transactions = 0
        self.changes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.next_order = conn.execute(
                    "SELECT coalesce(max(id), 0) + 1 FROM demo.orders"
                ).fetchone()[0]
                self.next_customer = conn.execute(
                    "SELECT coalesce(max(id), 0) + 1 FROM demo.customers"
                ).fetchone()[0]
                while not self.stop.is_set():
                    with self.pause, conn.transaction():
                        self._transaction(conn)
                    self.transactions += 1
                    time.sleep(self.interval)
        except BaseException as e:  # reported by the main loop
            self.error = e

    def _count(self, cur: psycopg.Cursor) -> None:
        self.changes += max(cur.rowcount, 0)

    def _transaction(self, conn: psycopg.Connection) -> None:
        rng = self.rng
        x = rng.random()
        if x < 0.35:  # a new order with 1-4 lines
            oid = self.next_order
            self.next_order += 1
            customer = rng.randint(1, self.next_customer)  # may not exist: the LEFT JOIN's NULLs
            self._count(
                conn.execute("INSERT INTO demo.orders VALUES (%s, %s, 'new', 0)", (oid, customer))
            )
            for line in range(1, rng.randint(1, 4) + 1):
                self._count(
                    conn.execute(
                        "INSERT INTO demo.order_items SELECT %s, %s, id, %s, price "
                        "FROM demo.products WHERE id = %s",
                        (oid, line, rng.randint(1, 5), rng.randint(1, N_PRODUCTS)),
                    )
                )
            self._count(
                conn.execute(
                    "UPDATE demo.orders SET amount = (SELECT coalesce(sum(quantity * unit_price), 0)"
                    " FROM demo.order_items WHERE order_id = %s) WHERE id = %s",
                    (oid, oid),
                )
            )
        elif x < 0.6:  # an order moves on
            self._count(
                conn.execute(
                    "UPDATE demo.orders SET status = %s WHERE id = %s",
                    (rng.choice(STATUSES), rng.randint(1, self.next_order)),
                )
            )
        elif x < 0.72:  # a line's quantity changes, and the order's amount with it
            oid = rng.randint(1, self.next_order)
            self._count(
                conn.execute(
                    "UPDATE demo.order_items SET quantity = quantity + 1 WHERE order_id = %s "
                    "AND line = 1",
                    (oid,),
                )
            )
            self._count(
                conn.execute(
                    "UPDATE demo.orders SET amount = (SELECT coalesce(sum(quantity * unit_price), 0)"
                    " FROM demo.order_items WHERE order_id = %s) WHERE id = %s",
                    (oid, oid),
                )
            )
        elif x < 0.84:  # an order and its lines are deleted
            oid = rng.randint(1, self.next_order)
            self._count(conn.execute("DELETE FROM demo.order_items WHERE order_id = %s", (oid,)))
            self._count(conn.execute("DELETE FROM demo.orders WHERE id = %s", (oid,)))
        elif x < 0.9:  # a customer changes segment
            self._count(
                conn.execute(
                    "UPDATE demo.customers SET segment = %s WHERE id = %s",
                    (rng.choice([*SEGMENTS, None]), rng.randint(1, self.next_customer)),
                )
            )
        elif x < 0.95:  # a product's price changes (new lines use it)
            self._count(
                conn.execute(
                    "UPDATE demo.products SET price = round(price * %s::numeric, 2) WHERE id = %s",
                    (rng.choice([0.9, 1.1]), rng.randint(1, N_PRODUCTS)),
                )
            )
        elif x < 0.98:  # a new customer
            cid = self.next_customer
            self.next_customer += 1
            self._count(
                conn.execute(
                    "INSERT INTO demo.customers VALUES (%s, %s, %s)",
                    (cid, f"customer {cid}", rng.choice(SEGMENTS)),
                )
            )
        else:  # a customer leaves; their orders stay (LEFT JOIN -> NULL name)
            self._count(
                conn.execute(
                    "DELETE FROM demo.customers WHERE id = %s",
                    (rng.randint(1, self.next_customer),),
                )
            )


def _differences(conn: psycopg.Connection, view: str, sql: str) -> tuple[int, int]:
    """(rows the query has that the result table lacks, rows only in the result table)."""
    missing = conn.execute(
        f"SELECT count(*) FROM (({sql}) EXCEPT ALL SELECT * FROM {view}) d"
    ).fetchone()[0]
    extra = conn.execute(
        f"SELECT count(*) FROM (SELECT * FROM {view} EXCEPT ALL ({sql})) d"
    ).fetchone()[0]
    return missing, extra


class _Throughput:
    """The writer's row changes per second while it writes: each report's rate covers the time
    since the previous report's pause ended (``restart``), not the pause itself (on Spark a
    catch-up under pause takes seconds); ``overall`` is the rate over all the writing time."""

    def __init__(self, writer: _Writer) -> None:
        self.writer = writer
        self.changes = 0
        self.at = time.monotonic()
        self.writing_s = 0.0

    def __call__(self) -> float:
        now, changes = time.monotonic(), self.writer.changes
        self.writing_s += now - self.at
        rate = (changes - self.changes) / max(now - self.at, 1e-9)
        self.changes, self.at = changes, now
        return rate

    def restart(self) -> None:
        """The writer resumed: the next interval starts now."""
        self.changes, self.at = self.writer.changes, time.monotonic()

    @property
    def overall(self) -> float:
        return self.writer.changes / max(self.writing_s, 1e-9)


def _report(
    engine, conn: psycopg.Connection, writer: _Writer, elapsed: float, rate: float, lags: dict
) -> bool:
    """Print one report; returns whether every view equals its query. The lag is read while the
    writer runs; then the writer is paused while the engine catches up and the result tables
    are compared, so both see the same data. ``lags`` collects every view's lags."""
    lag = {s.name: s.lag_ms for s in engine.list_views()}
    for name, value in lag.items():
        if value is not None:
            lags.setdefault(name, []).append(value)
    with writer.pause:
        engine.catch_up()
        checks = {name: _differences(conn, name, sql) for name, sql in VIEWS.items()}
        rows = {s.name: s.rows for s in engine.list_views()}
    print(
        f"t={elapsed:5.1f} s  writer: {writer.transactions} transactions, {writer.changes} row "
        f"changes, {rate:,.0f} changes/s now"
    )
    ok = True
    for name in VIEWS:
        missing, extra = checks[name]
        equal = missing == extra == 0
        ok &= equal
        lag_text = "-" if lag.get(name) is None else f"{lag[name]:.0f} ms"
        verdict = "yes" if equal else f"NO ({missing} missing, {extra} extra rows)"
        print(
            f"  {name:<32} lag {lag_text:>8}  rows {rows.get(name) or 0:>6}  "
            f"equals its query: {verdict}"
        )
    return ok


def run_demo(
    dsn: str | None = None,
    state_dir: str | Path = ".incview-demo",
    seconds: float = 30.0,
    seed: int = 1,
    report_every: float = 3.0,
    keep: bool = False,
    runner: str = "spark",
    spark_conf: dict[str, str] | None = None,
) -> int:
    """Run the demo (see the module docstring); returns the exit code (0: every view equal)."""
    from engine import Engine

    where = f"database {_display_dsn(dsn)}" if dsn else f"embedded PostgreSQL in {state_dir}"
    print(f"incview demo: using the {where}")
    start = time.monotonic()
    with Engine(dsn, state_dir, runner=runner, spark_conf=spark_conf) as engine:
        if engine.embedded is not None:
            bindir = engine.embedded.bindir or ""
            print(
                f"  embedded server: port {engine.embedded.port}, data "
                f"{engine.embedded.data_dir} ({'started' if engine.embedded.started_here else 'already running'},"
                f" {time.monotonic() - start:.1f} s), binaries {bindir}"
            )
        if runner == "spark":
            print(
                "  runner: spark (each view: population by a Spark batch job, then a Structured "
                "Streaming query over the change stream)"
            )
        else:
            print("  runner: local (in-process; the default is --runner spark)")
        with psycopg.connect(engine.dsn, autocommit=True) as conn:
            _reset_schema(conn, engine)
            try:
                code = _run(engine, conn, seconds, seed, report_every)
            finally:
                if not keep:
                    for name in VIEWS:
                        if name in {s.name for s in engine.list_views()}:
                            engine.drop_view(name)
                    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")  # ours: checked
    print(
        "\nthe same views in Dagster (asset graph with lineage, checks, the streaming jobs' "
        f"supervisor):\n  {dagster_command(dsn, state_dir)}"
    )
    return code


def dagster_command(dsn: str | None, state_dir: str | Path) -> str:
    """The command that opens the demo's views in ``dagster dev`` on the same database."""
    env = "INCVIEW_DSN='<the same dsn>' " if dsn else ""
    state = "" if Path(state_dir) == Path(".incview-demo") else f" --state-dir {state_dir}"
    return f"{env}./scripts/demo.sh --dagster{state}"


def create_view(engine, conn: psycopg.Connection, name: str, sql: str) -> str:
    """Create one of the demo's views; returns how, for the demo's output. ``CREATED_IN_SQL`` is
    created as a user would from any SQL client (``create_view_in_sql``), the others with
    ``Engine.create_view``."""
    if name == CREATED_IN_SQL:
        try:
            create_view_in_sql(engine, name, sql)
            return "with CALL incview.create_view, answered by the engine's commander"
        except psycopg.errors.InsufficientPrivilege as e:  # the demo's role is no incview_admin
            print(f"  (CALL incview.create_view refused: {str(e).strip()})")
    engine.create_view(name, sql)
    return "with Engine.create_view"


def create_view_in_sql(engine, name: str, sql: str, timeout_s: float = 300) -> None:
    """``CALL incview.create_view(name, sql)`` from a session of its own while this process's
    engine answers it (a ``Commander`` stepped here, as ``incview run`` does); raises the
    procedure's error."""
    from engine.commander import Commander

    failure: list[BaseException] = []

    def call() -> None:
        try:
            with psycopg.connect(
                engine.dsn, autocommit=True, options=f"-c incview.command_timeout={timeout_s:g}"
            ) as session:
                session.execute("CALL incview.create_view(%s, %s)", (name, sql))
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
            failure.append(e)

    commander = Commander(engine)
    try:
        session = threading.Thread(target=call, name="demo-call", daemon=True)
        session.start()
        while session.is_alive():
            commander.step()
            session.join(0.05)
    finally:
        commander.close()
    if failure:
        raise failure[0]


def _run(engine, conn: psycopg.Connection, seconds: float, seed: int, report_every: float) -> int:
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM demo.customers), (SELECT count(*) FROM demo.products), "
        "(SELECT count(*) FROM demo.orders), (SELECT count(*) FROM demo.order_items)"
    ).fetchone()
    print("  schema demo: {} customers, {} products, {} orders, {} order_items".format(*counts))
    if engine.runner == "spark":
        print("  the first view starts Spark (its JVM: 10-45 s on two cores) ...", flush=True)
    for name, sql in VIEWS.items():
        t = time.monotonic()
        how = create_view(engine, conn, name, sql)
        print(f"  created view {name} {how} ({time.monotonic() - t:.2f} s)", flush=True)
    if engine.runner == "spark":
        t = time.monotonic()
        engine.catch_up()  # starts the views' streaming queries
        print(f"  started {len(VIEWS)} streaming queries ({time.monotonic() - t:.2f} s)")
    writer = _Writer(engine.dsn, seed)
    print(f"writer running for {seconds:g} s; a report every {report_every:g} s\n", flush=True)
    ok = True
    lags: dict[str, list[float]] = {}
    start = last = time.monotonic()
    throughput = _Throughput(writer)
    writer.start()
    try:
        while time.monotonic() - start < seconds and writer.error is None:
            if engine.runner == "local":
                engine.catch_up()  # in-process, the views move when driven
            now = time.monotonic()
            if now - last >= report_every:
                last = now
                ok &= _report(engine, conn, writer, now - start, throughput(), lags)
                throughput.restart()
                last = time.monotonic()  # the next report: report_every of writing from now
            time.sleep(0.02 if engine.runner == "local" else 0.1)
    finally:
        writer.stop.set()
        writer.join(timeout=30)
    if writer.error is not None:
        print(f"\nthe writer failed: {writer.error!r}")
        return 1
    elapsed = time.monotonic() - start
    print("\nwriter stopped; final catch-up")
    ok &= _report(engine, conn, writer, elapsed, throughput(), {})
    print(
        f"\nthroughput: {writer.changes} row changes in {writer.transactions} transactions over "
        f"{elapsed:.1f} s ({throughput.overall:,.0f} changes/s while writing) kept up by "
        f"{len(VIEWS)} views ({engine.runner} runner)"
    )
    for name in VIEWS:
        seen = lags.get(name)
        if seen:
            print(
                f"  {name:<32} lag while writing: median {sorted(seen)[len(seen) // 2]:.0f} ms, "
                f"max {max(seen):.0f} ms"
            )
    if ok:
        print("\nall views equal their queries")
        return 0
    print("\nFAILED: some view differed from its query (see the lines marked NO above)")
    return 1
