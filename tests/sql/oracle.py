"""The end-to-end correctness oracle of the SQL planner: incremental results == Postgres' own.

``run_oracle(conn, sql, seed, state_dir)`` creates a small schema (customers, products, orders,
order_items; NULLable columns, small value domains so that duplicates and join matches are common;
and events, whose timestamptz, date and timestamp values sit around the DST changes and month
ends of America/New_York, with rows of its own random stream so that the other tables' rows do not
depend on it) in the Postgres database behind ``conn``, builds a catalog from Postgres' own catalog
(``format_type``), plans the view under the connection's ``TimeZone`` (run it with a zone that
has DST) and opens its dataflow on a fresh ``StateStore``. Then, batch
after batch, it generates random DML (inserts with NULLs and duplicate non-key values, updates
that may change the primary key or move an order to another customer, deletes, and now and then a
whole-table delete), applies it to Postgres in one transaction and pushes the same changes as
diffs (-old +new for an update, from the generator's model of each table) to the dataflow, closes
the time and commits it. After every batch the accumulated output Z-set must equal, as a multiset,
what Postgres returns for the same SQL; when the dataflow's errs collection is non-empty Postgres
must fail on the query too (and the other way round). Before the first batch the planner's output
column names and types must equal those of a Postgres view over the SQL.

Values are compared exactly (ints, text, dates, booleans; numerics as ``Decimal`` values, so
``1.0 == 1.00``; timestamptz as instants); floats with a relative tolerance of 1e-9 (absolute 1e-9 near zero). A mismatch
raises ``OracleMismatch`` naming the SQL, the seed, the batch and a sample of missing and extra
rows. This module is the one place of the oracle: tests only choose queries and seeds.
"""

from __future__ import annotations

import datetime
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from engine.dataflow.batch import DiffBatch
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import ZSetSink
from engine.postgres.source_catalog import unique_keys
from engine.sql.catalog import DictCatalog
from engine.sql.planner import ViewPlan, build_dataflow, plan_view
from engine.sql.types import TypeKind

# -- the schema -------------------------------------------------------------------------------

DDL = """
CREATE TABLE customers (
    id int PRIMARY KEY,
    name text,
    segment text,
    score numeric(8,2),
    region varchar(10)
);
CREATE TABLE products (
    id int PRIMARY KEY,
    name text NOT NULL,
    category text,
    price numeric(8,2)
);
CREATE TABLE orders (
    id int PRIMARY KEY,
    customer_id int,
    amount numeric(10,2),
    qty int,
    status text,
    created date,
    discount double precision
);
CREATE TABLE order_items (
    id int PRIMARY KEY,
    order_id int,
    product_id int,
    qty smallint,
    price numeric(8,2)
);
CREATE TABLE events (
    id int PRIMARY KEY,
    customer_id int,
    at timestamptz,
    day date,
    wall timestamp,
    kind text
);
"""

_BASE_DATE = datetime.date(2024, 1, 1)


def _maybe(rng: random.Random, value: Any, null_ratio: float = 0.12) -> Any:
    return None if rng.random() < null_ratio else value


def _money(rng: random.Random, lo: int, hi: int) -> Decimal:
    if rng.random() < 0.3:  # round values repeat: duplicates for DISTINCT, ties for ORDER BY
        return Decimal(rng.choice([0, 5, 10, 25, 100])).quantize(Decimal("0.01"))
    return (Decimal(rng.randint(lo * 100, hi * 100)) / 100).quantize(Decimal("0.01"))


Gen = Callable[[random.Random], Any]

_UTC = datetime.UTC
# instants (UTC) near America/New_York's DST changes (2024-03-10 07:00Z, 2024-11-03 06:00Z),
# local month ends and the turn of the year, and wall-clock times in the gap and the overlap
_EVENT_INSTANTS = [
    datetime.datetime(2024, 3, 10, 7, 0, tzinfo=_UTC),
    datetime.datetime(2024, 11, 3, 6, 0, tzinfo=_UTC),
    datetime.datetime(2024, 11, 3, 5, 0, tzinfo=_UTC),
    datetime.datetime(2024, 4, 1, 3, 59, 59, 999_999, tzinfo=_UTC),
    datetime.datetime(2024, 12, 1, 5, 0, tzinfo=_UTC),
    datetime.datetime(2025, 1, 1, 4, 30, tzinfo=_UTC),
    datetime.datetime(2024, 6, 30, 23, 0, tzinfo=_UTC),
]
_EVENT_WALLS = [
    datetime.datetime(2024, 3, 10, 2, 30),
    datetime.datetime(2024, 11, 3, 1, 30),
    datetime.datetime(2024, 3, 31, 23, 45),
    datetime.datetime(2024, 12, 31, 23, 59, 59),
]


def _event_at(rng: random.Random) -> datetime.datetime:
    minutes = rng.choice([-61, -60, -30, -1, 0, 1, 30, 59, 60, 90, 1440, -1440])
    return rng.choice(_EVENT_INSTANTS) + datetime.timedelta(minutes=minutes)


def _event_wall(rng: random.Random) -> datetime.datetime:
    return rng.choice(_EVENT_WALLS) + datetime.timedelta(minutes=rng.choice([-60, -1, 0, 15, 45]))


@dataclass
class TableSpec:
    """One table of the schema: its columns (the first is the integer primary key) and value
    generators; ``id_range`` is where new primary keys are drawn from."""

    name: str
    columns: tuple[str, ...]
    gens: dict[str, Gen]
    id_range: tuple[int, int]
    initial: int


TABLES: tuple[TableSpec, ...] = (
    TableSpec(
        "customers",
        ("id", "name", "segment", "score", "region"),
        {
            "name": lambda r: _maybe(r, r.choice(["ann", "bob", "cy", "dee", "Ed", "fay", "Ann"])),
            "segment": lambda r: _maybe(r, r.choice(["a", "b", "c"])),
            "score": lambda r: _maybe(r, _money(r, -50, 100)),
            "region": lambda r: _maybe(r, r.choice(["north", "south", "east"])),
        },
        (1, 24),
        14,
    ),
    TableSpec(
        "products",
        ("id", "name", "category", "price"),
        {
            "name": lambda r: r.choice(["pen", "ink", "pad", "cup", "Mug", "pen"]),
            "category": lambda r: _maybe(r, r.choice(["office", "kitchen", "misc"])),
            "price": lambda r: _maybe(r, _money(r, 0, 40)),
        },
        (1, 12),
        8,
    ),
    TableSpec(
        "orders",
        ("id", "customer_id", "amount", "qty", "status", "created", "discount"),
        {
            "customer_id": lambda r: _maybe(r, r.randint(1, 26)),
            "amount": lambda r: _maybe(r, _money(r, 0, 500)),
            "qty": lambda r: _maybe(r, r.choice([0, 1, 1, 2, 3, 4, 7, 10])),
            "status": lambda r: _maybe(r, r.choice(["new", "paid", "shipped", "cancelled"])),
            "created": lambda r: _maybe(r, _BASE_DATE + datetime.timedelta(days=r.randint(0, 420))),
            "discount": lambda r: _maybe(r, r.choice([0.0, 0.1, 0.25, 0.5, r.random() * 0.3])),
        },
        (1, 50),
        30,
    ),
    TableSpec(
        "order_items",
        ("id", "order_id", "product_id", "qty", "price"),
        {
            "order_id": lambda r: _maybe(r, r.randint(1, 52), 0.05),
            "product_id": lambda r: _maybe(r, r.randint(1, 13), 0.05),
            "qty": lambda r: _maybe(r, r.randint(1, 5)),
            "price": lambda r: _maybe(r, _money(r, 0, 40)),
        },
        (1, 120),
        40,
    ),
)

# tables whose rows come from a random stream of their own (added after the tables above: the
# queries over those see the same rows as before)
OWN_STREAM_TABLES: tuple[TableSpec, ...] = (
    TableSpec(
        "events",
        ("id", "customer_id", "at", "day", "wall", "kind"),
        {
            "customer_id": lambda r: _maybe(r, r.randint(1, 26)),
            "at": lambda r: _maybe(r, _event_at(r)),
            "day": lambda r: _maybe(r, _event_at(r).date()),
            "wall": lambda r: _maybe(r, _event_wall(r)),
            "kind": lambda r: _maybe(r, r.choice(["click", "view", "buy"])),
        },
        (1, 40),
        24,
    ),
)


class TableModel:
    """The generator's model of one table: primary key -> row (all columns, table order)."""

    def __init__(self, spec: TableSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        self.rows: dict[int, tuple] = {}

    def _new_id(self) -> int | None:
        lo, hi = self.spec.id_range
        free = [i for i in range(lo, hi + 1) if i not in self.rows]
        return self.rng.choice(free) if free else None

    def _values(self, pk: int, base: tuple | None = None, change: set[str] | None = None) -> tuple:
        out = [pk]
        for i, c in enumerate(self.spec.columns[1:], start=1):
            if base is not None and c not in (change or ()):
                out.append(base[i])
            elif base is None and self.rows and self.rng.random() < 0.1:
                # copy a column value of an existing row: duplicate non-key values
                out.append(self.rng.choice(list(self.rows.values()))[i])
            else:
                out.append(self.spec.gens[c](self.rng))
        return tuple(out)

    def insert(self, cur, diffs: list) -> None:
        pk = self._new_id()
        if pk is None:
            return
        row = self._values(pk)
        cols = ", ".join(self.spec.columns)
        marks = ", ".join(["%s"] * len(row))
        cur.execute(f"INSERT INTO {self.spec.name} ({cols}) VALUES ({marks})", row)
        self.rows[pk] = row
        diffs.append((row, 1))

    def update(self, cur, diffs: list) -> None:
        if not self.rows:
            return
        old_pk = self.rng.choice(list(self.rows))
        old = self.rows[old_pk]
        data_cols = self.spec.columns[1:]
        change = set(self.rng.sample(data_cols, self.rng.randint(1, min(2, len(data_cols)))))
        if self.spec.name == "orders" and self.rng.random() < 0.5:
            change.add("customer_id")  # move the order to another customer
        new_pk = old_pk
        if self.rng.random() < 0.15:
            new_pk = self._new_id() or old_pk  # primary-key change
        new = self._values(new_pk, old, change)
        sets = ", ".join(f"{c} = %s" for c in self.spec.columns)
        cur.execute(f"UPDATE {self.spec.name} SET {sets} WHERE id = %s", (*new, old_pk))
        del self.rows[old_pk]
        self.rows[new_pk] = new
        diffs.append((old, -1))
        diffs.append((new, 1))

    def delete(self, cur, diffs: list) -> None:
        if not self.rows:
            return
        pk = self.rng.choice(list(self.rows))
        cur.execute(f"DELETE FROM {self.spec.name} WHERE id = %s", (pk,))
        diffs.append((self.rows.pop(pk), -1))

    def delete_all(self, cur, diffs: list) -> None:
        cur.execute(f"DELETE FROM {self.spec.name}")
        diffs.extend((r, -1) for r in self.rows.values())
        self.rows.clear()


# -- catalog and comparison -------------------------------------------------------------------

_CATALOG_SQL = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'v') AND c.relname = ANY(%s)
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY c.relname, a.attnum
"""


def catalog_from_postgres(conn: psycopg.Connection, tables: list[str]) -> DictCatalog:
    """A catalog of ``tables`` (schema public) with the types Postgres' ``format_type`` prints and
    their unique keys (the primary keys: the planner derives unique rows from them)."""
    mapping: dict[str, dict[str, str]] = {}
    for rel, col, type_name, not_null in conn.execute(_CATALOG_SQL, ("public", tables)):
        mapping.setdefault(rel, {})[col] = type_name + (" not null" if not_null else "")
    keys = unique_keys(conn, [f"public.{t}" for t in tables])
    return DictCatalog(mapping, keys={t.partition(".")[2]: k for t, k in keys.items()})


class OracleMismatch(AssertionError):
    """The incremental result differs from Postgres' result for the same SQL."""


FLOAT_TOLERANCE = 1e-9


def _norm_value(v: Any, kind: TypeKind) -> Any:
    if v is None:
        return None
    if isinstance(v, (list, tuple)):  # an array (psycopg: lists; the dataflow: tuples)
        return tuple(
            _norm_value(x, TypeKind.NUMERIC if isinstance(x, Decimal) else kind) for x in v
        )
    if kind in (TypeKind.REAL, TypeKind.DOUBLE) and isinstance(v, float):
        if math.isnan(v) or math.isinf(v) or v == 0:
            return v
        return float(f"{v:.8e}")  # a hashable key; close calls are resolved by _match_floats
    if kind is TypeKind.NUMERIC and isinstance(v, Decimal):
        return v.normalize() if v.is_finite() else v
    if kind is TypeKind.TIMESTAMPTZ and isinstance(v, datetime.datetime):
        # an aware datetime in a repeated hour never equals one of another zone (PEP 495)
        return v.astimezone(_UTC)
    return v


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
    return a == b


def _match_floats(missing: Counter, extra: Counter, raw: dict) -> tuple[Counter, Counter]:
    """Pair missing and extra rows that differ only by float rounding."""
    missing, extra = Counter(missing), Counter(extra)
    for m in list(missing):
        for e in list(extra):
            if missing[m] <= 0:
                break
            if extra[e] <= 0:
                continue
            rm, re_ = raw.get(("pg", m), m), raw.get(("df", e), e)
            if len(rm) == len(re_) and all(_close(a, b) for a, b in zip(rm, re_, strict=True)):
                n = min(missing[m], extra[e])
                missing[m] -= n
                extra[e] -= n
    return +missing, +extra


def _type_ok(v: Any, kind: TypeKind) -> bool:
    if v is None:
        return True
    want = {
        TypeKind.SMALLINT: int,
        TypeKind.INTEGER: int,
        TypeKind.BIGINT: int,
        TypeKind.NUMERIC: Decimal,
        TypeKind.REAL: float,
        TypeKind.DOUBLE: float,
        TypeKind.TEXT: str,
        TypeKind.VARCHAR: str,
        TypeKind.CHAR: str,
        TypeKind.BOOLEAN: bool,
        TypeKind.DATE: datetime.date,
        TypeKind.TIMESTAMP: datetime.datetime,
        TypeKind.TIMESTAMPTZ: datetime.datetime,
        TypeKind.INTERVAL: datetime.timedelta,
        TypeKind.TIME: datetime.time,
        TypeKind.ARRAY: tuple,
    }.get(kind)
    return want is None or type(v) is want


# -- the run ----------------------------------------------------------------------------------


@dataclass
class OracleReport:
    """What a run saw: batches compared, rows in the final result, batches where both failed."""

    sql: str
    seed: int
    batches: int = 0
    final_rows: int = 0
    max_rows: int = 0
    error_batches: int = 0
    errors: list[str] = field(default_factory=list)


def _input_rows(rows: list[tuple[tuple, int]], spec: TableSpec, cols: tuple[str, ...]) -> list:
    idx = [spec.columns.index(c) for c in cols]
    return [(tuple(r[i] for i in idx), w) for r, w in rows]


def _fail(sql: str, seed: int, batch: int, what: str) -> OracleMismatch:
    return OracleMismatch(f"{what}\n  seed {seed}, after batch {batch}\n  SQL: {sql}")


def _check_schema(conn: psycopg.Connection, view: ViewPlan, sql: str, seed: int) -> None:
    """The planner's output names and types must be those of a Postgres view over ``sql``."""
    conn.execute("DROP VIEW IF EXISTS oracle_view")
    conn.execute(f"CREATE VIEW oracle_view AS {sql}")
    pg = [(c, t) for _, c, t, _ in conn.execute(_CATALOG_SQL, ("public", ["oracle_view"]))]
    conn.execute("DROP VIEW oracle_view")
    ours = [(n, t.sql()) for n, t in zip(view.output_names, view.output_types, strict=True)]
    if ours != pg:
        raise _fail(sql, seed, 0, f"output columns differ:\n  Postgres {pg}\n  planner  {ours}")


def run_oracle(
    conn: psycopg.Connection,
    sql: str,
    seed: int,
    state_dir: str | Path,
    batches: int = 12,
    changes: int = 30,
    reopen_every: int = 0,
) -> OracleReport:
    """Run ``batches`` random transactions against Postgres and the view's dataflow; compare.

    ``conn`` must be an autocommit connection to an empty database (the schema is created here).
    ``reopen_every`` > 0 closes the state store and rebuilds the dataflow from disk every that many
    batches (state must survive a restart). Raises ``OracleMismatch``; returns an ``OracleReport``.
    """
    rng = random.Random(seed)
    own_rng = random.Random(seed + 1)
    with conn.cursor() as cur:
        cur.execute(DDL)
    specs = {s.name: s for s in TABLES + OWN_STREAM_TABLES}
    catalog = catalog_from_postgres(conn, list(specs))
    time_zone = conn.execute("SHOW TimeZone").fetchone()[0]
    view = plan_view(sql, catalog, time_zone)
    _check_schema(conn, view, sql, seed)
    kinds = [t.kind for t in view.output_types]
    models = {s.name: TableModel(s, rng) for s in TABLES}
    own_models = {s.name: TableModel(s, own_rng) for s in OWN_STREAM_TABLES}
    report = OracleReport(sql, seed)

    store = StateStore(state_dir)
    physical = build_dataflow(view, store)
    sink = ZSetSink()
    try:
        for t in range(1, batches + 1):
            diffs: dict[str, list] = {name: [] for name in specs}
            with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
                if t == 1:
                    for name, m in models.items():
                        for _ in range(m.spec.initial):
                            m.insert(cur, diffs[name])
                else:
                    for name, m in models.items():
                        if rng.random() < 0.02:
                            m.delete_all(cur, diffs[name])
                    for _ in range(rng.randint(changes // 2, changes)):
                        m = models[rng.choice(list(models))]
                        op = rng.random()
                        # tables refill after a whole-table delete: inserts win while they are small
                        if op < (0.7 if len(m.rows) < m.spec.initial // 2 else 0.35):
                            m.insert(cur, diffs[m.spec.name])
                        elif op < 0.75:
                            m.update(cur, diffs[m.spec.name])
                        else:
                            m.delete(cur, diffs[m.spec.name])
                _own_stream_changes(own_models, own_rng, t, changes, cur, diffs)
            df = physical.dataflow
            for input_name, cols in physical.inputs.items():
                table = input_name.split(".", 1)[1]
                rows = _input_rows(diffs[table], specs[table], cols)
                cut = rng.randint(0, len(rows))  # two pushes per time: several on_diffs calls
                for part in (rows[:cut], rows[cut:]):
                    if part:
                        df.push(input_name, DiffBatch.from_pairs(part))
            out = df.time_end(t)
            df.commit(t)
            sink.apply(out.diffs)
            _compare(conn, sql, seed, t, sink, df.errors(), kinds, report)
            report.batches = t
            if reopen_every and t % reopen_every == 0 and t < batches:
                store.close()
                store = StateStore(state_dir)
                if store.committed_time != t:
                    raise _fail(sql, seed, t, f"reopened store at time {store.committed_time}")
                physical = build_dataflow(view, store)
    finally:
        store.close()
    report.final_rows = sum(sink.rows.values())
    return report


def _own_stream_changes(
    models: dict[str, TableModel], rng: random.Random, t: int, changes: int, cur, diffs: dict
) -> None:
    """The changes of the tables with a random stream of their own, in batch ``t``."""
    for name, m in models.items():
        if t == 1:
            for _ in range(m.spec.initial):
                m.insert(cur, diffs[name])
            continue
        if rng.random() < 0.03:
            m.delete_all(cur, diffs[name])
        for _ in range(rng.randint(changes // 4, changes // 2)):
            op = rng.random()
            if op < (0.7 if len(m.rows) < m.spec.initial // 2 else 0.4):
                m.insert(cur, diffs[name])
            elif op < 0.75:
                m.update(cur, diffs[name])
            else:
                m.delete(cur, diffs[name])


def _compare(
    conn: psycopg.Connection,
    sql: str,
    seed: int,
    t: int,
    sink: ZSetSink,
    df_errors: dict[str, int],
    kinds: list[TypeKind],
    report: OracleReport,
) -> None:
    pg_error = None
    try:
        pg_rows = conn.execute(sql).fetchall()
    except psycopg.Error as e:
        pg_error = e.diag.message_primary or str(e)
        pg_rows = []
    if df_errors or pg_error:
        if not pg_error:
            raise _fail(sql, seed, t, f"the view has errors {df_errors} but Postgres succeeds")
        if not df_errors:
            raise _fail(sql, seed, t, f"Postgres fails ({pg_error!r}) but the view has no error")
        if pg_error not in df_errors:
            raise _fail(
                sql, seed, t, f"Postgres fails with {pg_error!r}, the view with {df_errors}"
            )
        report.error_batches += 1
        report.errors.append(pg_error)
        return
    for r in sink.rows:
        if len(r) != len(kinds):
            raise _fail(sql, seed, t, f"row {r!r} has {len(r)} columns, expected {len(kinds)}")
        for v, k in zip(r, kinds, strict=True):
            if not _type_ok(v, k):
                raise _fail(sql, seed, t, f"value {v!r} in row {r!r} is not a {k.value}")
    raw: dict = {}

    def norm(side: str, r: tuple) -> tuple:
        key = tuple(_norm_value(v, k) for v, k in zip(r, kinds, strict=True))
        raw[(side, key)] = r
        return key

    expected = Counter(norm("pg", r) for r in pg_rows)
    got: Counter = Counter()
    for r, n in sink.rows.items():
        got[norm("df", r)] += n
    report.max_rows = max(report.max_rows, len(pg_rows))
    if got == expected:
        return
    missing, extra = expected - got, got - expected
    if any(k in (TypeKind.REAL, TypeKind.DOUBLE) for k in kinds):
        missing, extra = _match_floats(missing, extra, raw)
        if not missing and not extra:
            return

    def sample(c: Counter, side: str) -> str:
        items = sorted(c.items(), key=repr)[:8]
        return "\n".join(f"    {raw.get((side, k), k)!r} x{n}" for k, n in items) or "    (none)"

    raise _fail(
        sql,
        seed,
        t,
        f"result differs from Postgres ({sum(expected.values())} rows expected, "
        f"{sum(got.values())} maintained)\n  missing (in Postgres, not in the view):\n"
        f"{sample(missing, 'pg')}\n  extra (in the view, not in Postgres):\n{sample(extra, 'df')}",
    )
