"""The refresh streams: RF1 (new orders with their lineitems), RF2 (delete orders with their
lineitems) and UF (price / quantity / status updates), each one writer transaction.

``RefreshStreams(sf, size)`` hands out streams of ``size`` orders (0.1% of ORDERS by default, as
the spec's refresh functions; the scaling mode uses a fixed 1,500). RF1 rows are generated in
advance (``bench.tpch.datagen.OrderGenerator``, keys from dbgen's update gaps) so a timed
transaction only COPYs them; RF2 and UF pick base orders that no earlier stream deleted. A
stream's ``apply(conn)`` runs its one transaction and returns the number of rows it changed (an
UPDATE counts one change per row: incview sees it as a -old +new pair).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import psycopg

from bench.tpch.datagen import OrderGenerator, counts, sparse_key

KINDS = ("RF1", "RF2", "UF")

UPDATE_LINEITEMS = """
UPDATE lineitem SET
    l_quantity = 1 + (l_quantity::int + 16) %% 50,
    l_extendedprice = round(l_extendedprice / l_quantity * (1 + (l_quantity::int + 16) %% 50), 2),
    l_discount = ((l_discount * 100)::int + 3) %% 11 / 100.0,
    l_returnflag = CASE l_returnflag WHEN 'R' THEN 'A' WHEN 'A' THEN 'R' ELSE 'N' END
WHERE l_orderkey = ANY(%s)
"""
UPDATE_ORDERS = """
UPDATE orders SET
    o_totalprice = t.total,
    o_orderstatus = CASE o_orderstatus WHEN 'O' THEN 'P' WHEN 'P' THEN 'F' ELSE 'O' END
FROM (SELECT l_orderkey, sum(round(l_extendedprice * (1 + l_tax) * (1 - l_discount), 2)) AS total
      FROM lineitem WHERE l_orderkey = ANY(%s) GROUP BY l_orderkey) t
WHERE o_orderkey = t.l_orderkey
"""


@dataclass
class Stream:
    kind: str  # RF1 | RF2 | UF
    keys: list[int]
    orders: list[tuple] = field(default_factory=list)  # RF1 only
    lineitems: list[tuple] = field(default_factory=list)

    def apply(self, conn: psycopg.Connection) -> tuple[int, float]:
        """Run the stream's transaction; returns (rows changed, seconds to commit)."""
        t0 = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur:
            if self.kind == "RF1":
                with cur.copy("COPY orders FROM STDIN") as copy:
                    for row in self.orders:
                        copy.write_row(row)
                with cur.copy("COPY lineitem FROM STDIN") as copy:
                    for row in self.lineitems:
                        copy.write_row(row)
                changed = len(self.orders) + len(self.lineitems)
            elif self.kind == "RF2":
                cur.execute("DELETE FROM lineitem WHERE l_orderkey = ANY(%s)", (self.keys,))
                changed = cur.rowcount
                cur.execute("DELETE FROM orders WHERE o_orderkey = ANY(%s)", (self.keys,))
                changed += cur.rowcount
            else:
                cur.execute(UPDATE_LINEITEMS, (self.keys,))
                changed = cur.rowcount
                cur.execute(UPDATE_ORDERS, (self.keys,))
                changed += cur.rowcount
        return changed, time.perf_counter() - t0


class RefreshStreams:
    """Hands out RF1 / RF2 / UF streams of ``size`` orders for a database of scale ``sf``."""

    def __init__(self, sf: float, size: int | None = None, seed: int = 7) -> None:
        self.base_orders = counts(sf)["orders"]
        self.size = size or max(1, round(self.base_orders * 0.001))
        self.rng = random.Random(seed)
        self.gen = OrderGenerator(sf, seed)
        self.deleted: set[int] = set()
        self.rf1_count = 0

    def next(self, kind: str) -> Stream:
        if kind == "RF1":
            return self.rf1()
        if kind == "RF2":
            return self.rf2()
        return self.update()

    def rf1(self) -> Stream:
        s = self.rf1_count
        self.rf1_count += 1
        seq = 1 + s % 3
        first = (s // 3) * self.size + 1
        keys = [sparse_key(i, seq) for i in range(first, first + self.size)]
        orders, lines = self.gen.orders(keys)
        return Stream("RF1", keys, orders, lines)

    def _pick(self) -> list[int]:
        if len(self.deleted) + self.size > self.base_orders:
            raise RuntimeError("no base orders left to delete")
        picked: set[int] = set()
        while len(picked) < self.size:
            k = sparse_key(self.rng.randint(1, self.base_orders))
            if k not in self.deleted:
                picked.add(k)
        return sorted(picked)

    def rf2(self) -> Stream:
        keys = self._pick()
        self.deleted.update(keys)
        return Stream("RF2", keys)

    def update(self) -> Stream:
        return Stream("UF", self._pick())
