"""The demo: a shop's orders and customers, three views kept up to date while a writer runs.

Views (maintained incrementally by the dataflow, state in RocksDB under a temp directory):
  * revenue_by_segment: orders JOIN customers, GROUP BY segment: sum(amount), count(*), max(amount)
  * top3_orders_per_customer: ORDER BY amount DESC LIMIT 3 per customer
  * customers_without_orders: NOT EXISTS (orders of the customer)
A writer inserts, updates and deletes for ``seconds``; every few seconds each view's size, its
last apply time and whether it equals the query recomputed from scratch are printed.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.anti_join import AntiJoinCollection
from engine.dataflow.collections.join import InnerJoinCollection
from engine.dataflow.collections.map import MapCollection
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.collections.top_k import TopKCollection
from engine.dataflow.graph import Dataflow
from engine.dataflow.state.store import StateStore
from engine.dataflow.testing import ZSetSink

SEGMENTS = ["retail", "wholesale", "online", None]


def _views(root: Path) -> dict[str, tuple[StateStore, Dataflow]]:
    views = {}

    def make(name, build):
        store = StateStore(root / name)
        df = Dataflow(store)
        orders, customers = df.input("orders"), df.input("customers")
        df.build(build(df, orders, customers))
        views[name] = (store, df)

    # orders: (id, customer_id, amount, status); customers: (id, name, segment)
    make(
        "revenue_by_segment",
        lambda df, o, c: df.add(
            ReduceCollection(
                [6], [Aggregate("sum", 2), Aggregate("count_star"), Aggregate("max", 2)]
            ),
            df.add(InnerJoinCollection([1], [0]), o, c),
        ),
    )
    make(
        "top3_orders_per_customer",
        lambda df, o, c: df.add(TopKCollection([1], [2, 0], [True, False], limit=3), o),
    )
    make(
        "customers_without_orders",
        lambda df, o, c: df.add(
            MapCollection(lambda rows: [(r[0], r[1]) for r in rows], "id, name"),
            df.add(AntiJoinCollection([0], [1]), c, o),
        ),
    )
    return views


def _recompute(name: str, orders: list[tuple], customers: list[tuple]) -> Counter:
    if name == "revenue_by_segment":
        seg = {}
        by_id = {}
        for c in customers:
            by_id.setdefault(c[0], []).append(c)
        for o in orders:
            for c in by_id.get(o[1], ()):
                s = seg.setdefault(c[2], [0, 0, None])
                s[0] += o[2]
                s[1] += 1
                s[2] = o[2] if s[2] is None else max(s[2], o[2])
        return Counter((k, v[0], v[1], v[2]) for k, v in seg.items())
    if name == "top3_orders_per_customer":
        per = {}
        for o in orders:
            per.setdefault(o[1], []).append(o)
        out = Counter()
        for rows in per.values():
            rows.sort(key=lambda o: (-o[2], o[0]))
            out.update(rows[:3])
        return out
    ids = {o[1] for o in orders}
    return Counter((c[0], c[1]) for c in customers if c[0] not in ids)


def run_demo(seconds: float = 15.0, seed: int = 1, report_every: float = 3.0) -> int:
    rng = random.Random(seed)
    customers = [(i, f"customer {i}", rng.choice(SEGMENTS)) for i in range(200)]
    orders: list[tuple] = []
    next_order = 0
    print(
        "incview demo (in-process dataflow; the Postgres-backed demo arrives with the Postgres slice)"
    )
    print("views: revenue_by_segment (join + group by), top3_orders_per_customer (top-k),")
    print("       customers_without_orders (NOT EXISTS)\n")
    with tempfile.TemporaryDirectory(prefix="incview-demo-") as tmp:
        views = _views(Path(tmp))
        sinks = {name: ZSetSink() for name in views}
        apply_ms = {name: 0.0 for name in views}
        t = 0
        ok = True

        def apply(o: DiffBatch, c: DiffBatch) -> None:
            nonlocal t
            t += 1
            for name, (_, df) in views.items():
                start = time.perf_counter()
                df.push("orders", o)
                df.push("customers", c)
                out = df.time_end(t)
                sinks[name].apply(out.diffs)
                df.commit(t)
                apply_ms[name] = (time.perf_counter() - start) * 1000

        seed_orders = []
        for _ in range(300):
            seed_orders.append(
                (next_order, rng.randrange(250), Decimal(rng.randrange(100, 100000)) / 100, "new")
            )
            next_order += 1
        orders.extend(seed_orders)
        apply(DiffBatch.inserts(seed_orders), DiffBatch.inserts(customers))
        start = last_report = time.monotonic()
        changes = 0
        while time.monotonic() - start < seconds:
            o, c = DiffBatch(), DiffBatch()
            for _ in range(rng.randint(1, 20)):
                x = rng.random()
                if x < 0.45 or not orders:
                    row = (
                        next_order,
                        rng.randrange(250),
                        Decimal(rng.randrange(100, 100000)) / 100,
                        "new",
                    )
                    next_order += 1
                    orders.append(row)
                    o.rows.append(row)
                    o.weights.append(1)
                elif x < 0.8:
                    i = rng.randrange(len(orders))
                    old = orders[i]
                    new = (old[0], old[1], Decimal(rng.randrange(100, 100000)) / 100, "paid")
                    orders[i] = new
                    o.rows += [old, new]
                    o.weights += [-1, 1]
                elif x < 0.95:
                    old = orders.pop(rng.randrange(len(orders)))
                    o.rows.append(old)
                    o.weights.append(-1)
                else:
                    i = rng.randrange(len(customers))
                    old = customers[i]
                    new = (old[0], old[1], rng.choice(SEGMENTS))
                    customers[i] = new
                    c.rows += [old, new]
                    c.weights += [-1, 1]
            changes += len(o) + len(c)
            apply(o, c)
            now = time.monotonic()
            if now - last_report >= report_every or now - start >= seconds:
                last_report = now
                print(f"t={t:>6}  {changes:>7} changes  {now - start:5.1f} s")
                for name in views:
                    equal = sinks[name].counter() == _recompute(name, orders, customers)
                    ok &= equal
                    print(
                        f"  {name:<28} rows={sum(sinks[name].rows.values()):>6}  "
                        f"last apply {apply_ms[name]:6.2f} ms  equals query: {'yes' if equal else 'NO'}"
                    )
        for store, _ in views.values():
            store.close()
    print("\nall views equal their queries" if ok else "\nSOME VIEW DIFFERS FROM ITS QUERY")
    return 0 if ok else 1
