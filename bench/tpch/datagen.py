"""TPC-H data: the base tables at a scale factor, and new orders for the refresh streams.

Base data comes from ``tpchgen-cli`` (a pip-installable, offline Rust port of dbgen whose output
matches dbgen's) when its executable is found next to the running Python or on PATH; otherwise
from ``write_base_csv``, our own generator following the spec's distributions (TPC-H 3.0.1 clause
4.2.3; comments are random words rather than the spec's text grammar). Both write one CSV file per
table with a header line, which ``bench.tpch.load`` COPYs.

``OrderGenerator`` makes orders with their lineitems by the spec's rules (customer keys not
divisible by 3, 1-7 lineitems, supplier chosen among the part's four, prices from the part's
retail price, ship/commit/receipt dates, return flag and line status against CURRENTDATE,
order status and total price derived from the lineitems); the refresh stream RF1 uses it with
keys from the sparse gaps that dbgen leaves for updates (``sparse_key``). This module only writes
files and returns rows: no database access.
"""

from __future__ import annotations

import csv
import os
import random
import shutil
import subprocess
import sys
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

STARTDATE = date(1992, 1, 1)
CURRENTDATE = date(1995, 6, 17)
ENDDATE = date(1998, 12, 31)
PRIORITIES = ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")
INSTRUCTIONS = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD")
REGIONS = ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")
NATIONS = (  # (name, region) in nationkey order, clause 4.2.3
    ("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4),
    ("ETHIOPIA", 0), ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2),
    ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2), ("JORDAN", 4), ("KENYA", 0), ("MOROCCO", 0),
    ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2), ("ROMANIA", 3), ("SAUDI ARABIA", 4),
    ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3), ("UNITED STATES", 1),
)  # fmt: skip
TYPE_SYLLABLES = (
    ("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"),
    ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"),
    ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER"),
)
CONTAINERS = (
    ("SM", "LG", "MED", "JUMBO", "WRAP"),
    ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"),
)
COLORS = [
    "almond",
    "antique",
    "aquamarine",
    "azure",
    "beige",
    "bisque",
    "black",
    "blanched",
    "blue",
    "blush",
    "brown",
    "burlywood",
    "burnished",
    "chartreuse",
    "chiffon",
    "chocolate",
    "coral",
    "cornflower",
    "cornsilk",
    "cream",
    "cyan",
    "dark",
    "deep",
    "dim",
    "dodger",
    "drab",
    "firebrick",
    "floral",
    "forest",
    "frosted",
    "gainsboro",
    "ghost",
    "goldenrod",
    "green",
    "grey",
    "honeydew",
    "hot",
    "indian",
    "ivory",
    "khaki",
    "lace",
    "lavender",
    "lawn",
    "lemon",
    "light",
    "lime",
    "linen",
    "magenta",
    "maroon",
    "medium",
    "metallic",
    "midnight",
    "mint",
    "misty",
    "moccasin",
    "navajo",
    "navy",
    "olive",
    "orange",
    "orchid",
    "pale",
    "papaya",
    "peach",
    "peru",
    "pink",
    "plum",
    "powder",
    "puff",
    "purple",
    "red",
    "rose",
    "rosy",
    "royal",
    "saddle",
    "salmon",
    "sandy",
    "seashell",
    "sienna",
    "sky",
    "slate",
    "smoke",
    "snow",
    "spring",
    "steel",
    "tan",
    "thistle",
    "tomato",
    "turquoise",
    "violet",
    "wheat",
    "white",
    "yellow",
]
WORDS = [
    "furiously",
    "quickly",
    "carefully",
    "blithely",
    "slyly",
    "ironic",
    "final",
    "regular",
    "express",
    "pending",
    "bold",
    "even",
    "special",
    "requests",
    "deposits",
    "accounts",
    "packages",
    "theodolites",
    "pinto",
    "beans",
    "foxes",
    "ideas",
    "platelets",
    "asymptotes",
    "instructions",
    "dependencies",
    "courts",
    "sleep",
    "wake",
    "nag",
    "haggle",
    "detect",
    "integrate",
    "boost",
    "among",
    "above",
    "across",
    "after",
    "against",
    "along",
]

DAY = timedelta(days=1)
CENT = Decimal("0.01")


def tpchgen_cli() -> str | None:
    """Path of the ``tpchgen-cli`` executable, or None."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    if beside.exists():
        return str(beside)
    return shutil.which("tpchgen-cli")


def generate_base_csv(sf: float, directory: Path, seed: int = 1) -> str:
    """Write ``<table>.csv`` for the eight tables into ``directory``; returns the generator used."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = tpchgen_cli()
    if exe is not None and not os.environ.get("TPCH_OWN_GENERATOR"):
        subprocess.run(
            [exe, "csv", "-s", f"{sf:g}", "-o", str(directory), "--overwrite", "-n", "2"],
            check=True,
            capture_output=True,
        )
        return "tpchgen-cli"
    write_base_csv(sf, directory, seed)
    return "bench.tpch.datagen"


# -- keys and counts ---------------------------------------------------------------------------
def counts(sf: float) -> dict[str, int]:
    return {
        "supplier": max(1, int(sf * 10_000)),
        "part": max(1, int(sf * 200_000)),
        "customer": max(1, int(sf * 150_000)),
        "orders": max(1, int(sf * 1_500_000)),
    }


def sparse_key(i: int, seq: int = 0) -> int:
    """dbgen's MK_SPARSE: order index ``i`` -> key; base data uses seq 0 (keys 1-7, 32-39, ...),
    update sets seq 1..3, so their keys never collide with the base data's."""
    return ((i >> 3) << 5) | ((seq & 3) << 3) | (i & 7)


def retail_price(partkey: int) -> Decimal:
    return Decimal(90000 + ((partkey // 10) % 20001) + 100 * (partkey % 1000)) / 100


def part_supplier(partkey: int, i: int, suppliers: int) -> int:
    """The i-th (0..3) supplier of a part (clause 4.2.3, PS_SUPPKEY)."""
    return (partkey + i * (suppliers // 4 + (partkey - 1) // suppliers)) % suppliers + 1


def _text(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    out = []
    size = 0
    while size < n:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def _money(rng: random.Random, lo: int, hi: int) -> Decimal:
    return Decimal(rng.randint(lo, hi)) / 100


def _phone(rng: random.Random, nationkey: int) -> str:
    return (
        f"{nationkey + 10}-{rng.randint(100, 999)}-{rng.randint(100, 999)}-"
        f"{rng.randint(1000, 9999)}"
    )


class OrderGenerator:
    """Orders with their lineitems by the spec's rules for a database of scale factor ``sf``."""

    def __init__(self, sf: float, seed: int) -> None:
        self.rng = random.Random(seed)
        c = counts(sf)
        self.customers = c["customer"]
        self.parts = c["part"]
        self.suppliers = c["supplier"]
        self.clerks = max(1, int(sf * 1000))
        self.last_orderdate = (ENDDATE - STARTDATE).days - 151

    def order(self, key: int) -> tuple[tuple, list[tuple]]:
        rng = self.rng
        cust = rng.randint(1, self.customers)
        while cust % 3 == 0 and self.customers > 2:
            cust = rng.randint(1, self.customers)
        odate = STARTDATE + rng.randint(0, self.last_orderdate) * DAY
        lines = []
        total = Decimal(0)
        statuses = set()
        for n in range(1, rng.randint(1, 7) + 1):
            partkey = rng.randint(1, self.parts)
            suppkey = part_supplier(partkey, rng.randint(0, 3), self.suppliers)
            qty = rng.randint(1, 50)
            price = retail_price(partkey) * qty
            disc = Decimal(rng.randint(0, 10)) / 100
            tax = Decimal(rng.randint(0, 8)) / 100
            ship = odate + rng.randint(1, 121) * DAY
            commit = odate + rng.randint(30, 90) * DAY
            receipt = ship + rng.randint(1, 30) * DAY
            flag = rng.choice("RA") if receipt <= CURRENTDATE else "N"
            status = "O" if ship > CURRENTDATE else "F"
            statuses.add(status)
            total += (price * (1 + tax) * (1 - disc)).quantize(CENT)
            lines.append(
                (key, partkey, suppkey, n, Decimal(qty), price, disc, tax, flag, status, ship,
                 commit, receipt, rng.choice(INSTRUCTIONS), rng.choice(MODES), _text(rng, 10, 43))
            )  # fmt: skip
        ostatus = statuses.pop() if len(statuses) == 1 else "P"
        order = (
            key, cust, ostatus, total, odate, rng.choice(PRIORITIES),
            f"Clerk#{rng.randint(1, self.clerks):09d}", 0, _text(rng, 19, 78),
        )  # fmt: skip
        return order, lines

    def orders(self, keys: list[int]) -> tuple[list[tuple], list[tuple]]:
        orders: list[tuple] = []
        lines: list[tuple] = []
        for k in keys:
            o, ls = self.order(k)
            orders.append(o)
            lines.extend(ls)
        return orders, lines


def write_base_csv(sf: float, directory: Path, seed: int = 1) -> None:
    """Our own generator for the eight tables (used when tpchgen-cli is not installed)."""
    rng = random.Random(seed)
    c = counts(sf)

    def writer(table: str, columns: str):
        f = open(directory / f"{table}.csv", "w", newline="")  # noqa: SIM115
        w = csv.writer(f)
        w.writerow(columns.split(","))
        return f, w

    f, w = writer("region", "r_regionkey,r_name,r_comment")
    for i, name in enumerate(REGIONS):
        w.writerow((i, name, _text(rng, 31, 115)))
    f.close()
    f, w = writer("nation", "n_nationkey,n_name,n_regionkey,n_comment")
    for i, (name, region) in enumerate(NATIONS):
        w.writerow((i, name, region, _text(rng, 31, 114)))
    f.close()
    f, w = writer(
        "part",
        "p_partkey,p_name,p_mfgr,p_brand,p_type,p_size,p_container,p_retailprice,p_comment",
    )
    for k in range(1, c["part"] + 1):
        m = rng.randint(1, 5)
        w.writerow(
            (k, " ".join(rng.sample(COLORS, 5)), f"Manufacturer#{m}",
             f"Brand#{m}{rng.randint(1, 5)}", " ".join(rng.choice(s) for s in TYPE_SYLLABLES),
             rng.randint(1, 50), " ".join(rng.choice(s) for s in CONTAINERS),
             retail_price(k), _text(rng, 5, 22))
        )  # fmt: skip
    f.close()
    f, w = writer("supplier", "s_suppkey,s_name,s_address,s_nationkey,s_phone,s_acctbal,s_comment")
    for k in range(1, c["supplier"] + 1):
        n = rng.randint(0, 24)
        w.writerow(
            (k, f"Supplier#{k:09d}", _text(rng, 10, 40), n, _phone(rng, n),
             _money(rng, -99999, 999999), _text(rng, 25, 100))
        )  # fmt: skip
    f.close()
    f, w = writer("partsupp", "ps_partkey,ps_suppkey,ps_availqty,ps_supplycost,ps_comment")
    for p in range(1, c["part"] + 1):
        for i in range(4):
            w.writerow(
                (p, part_supplier(p, i, c["supplier"]), rng.randint(1, 9999),
                 _money(rng, 100, 100000), _text(rng, 49, 198))
            )  # fmt: skip
    f.close()
    f, w = writer(
        "customer",
        "c_custkey,c_name,c_address,c_nationkey,c_phone,c_acctbal,c_mktsegment,c_comment",
    )
    for k in range(1, c["customer"] + 1):
        n = rng.randint(0, 24)
        w.writerow(
            (k, f"Customer#{k:09d}", _text(rng, 10, 40), n, _phone(rng, n),
             _money(rng, -99999, 999999), rng.choice(SEGMENTS), _text(rng, 29, 116))
        )  # fmt: skip
    f.close()
    gen = OrderGenerator(sf, seed + 1)
    fo, wo = writer(
        "orders",
        "o_orderkey,o_custkey,o_orderstatus,o_totalprice,o_orderdate,o_orderpriority,"
        "o_clerk,o_shippriority,o_comment",
    )
    fl, wl = writer(
        "lineitem",
        "l_orderkey,l_partkey,l_suppkey,l_linenumber,l_quantity,l_extendedprice,l_discount,"
        "l_tax,l_returnflag,l_linestatus,l_shipdate,l_commitdate,l_receiptdate,l_shipinstruct,"
        "l_shipmode,l_comment",
    )
    for i in range(1, c["orders"] + 1):
        o, ls = gen.order(sparse_key(i))
        wo.writerow(o)
        wl.writerows(ls)
    fo.close()
    fl.close()
