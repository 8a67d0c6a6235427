"""The timestamptz kernels (engine.sql.zoned_time) against Postgres itself, value by value.

For several zones (DST forward and back, a 30-minute DST, negative DST, offsets of :30 and :45)
a few hundred instants and wall-clock times around their transitions go to Postgres in ONE query
per zone and kernel family (arrays in, one row per value out), under ``SET TimeZone``; every
kernel must give exactly Postgres' answer: casts both ways, every date_trunc unit (also with an
explicit zone), every extract/date_part field, timestamptz +/- intervals of months, days and
hours, AT TIME ZONE and the text form.
"""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from engine.sql import functions as F
from engine.sql import zoned_time as Z

ZONES = [
    "America/New_York",
    "Europe/Paris",
    "Australia/Lord_Howe",  # DST of 30 minutes
    "Europe/Dublin",  # "negative" DST in the tz database
    "Asia/Kolkata",  # +05:30, no DST
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/Sao_Paulo",  # DST until 2019, at midnight
]
UNITS = [
    "microseconds",
    "milliseconds",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "quarter",
    "year",
    "decade",
    "century",
    "millennium",
]
FIELDS = sorted(F.TIMESTAMP_FIELDS | Z.ZONE_FIELDS)
INTERVALS = [  # (Postgres text, months, days, microseconds)
    ("1 day", 0, 1, 0),
    ("-1 day", 0, -1, 0),
    ("24 hours", 0, 0, 86_400_000_000),
    ("1 month", 0 + 1, 0, 0),
    ("1 mon 1 day 1 hour", 1, 1, 3_600_000_000),
    ("-2 months -3 days 00:30:00", -2, -3, 1_800_000_000),
    ("7 days 90 minutes", 0, 7, 5_400_000_000),
]


def _transitions(zone: datetime.tzinfo) -> list[datetime.datetime]:
    """UTC instants where ``zone``'s offset changes, 1995-2026 (found hour by hour)."""
    out = []
    t = datetime.datetime(1995, 1, 1, tzinfo=datetime.UTC)
    end = datetime.datetime(2026, 12, 31, tzinfo=datetime.UTC)
    step = datetime.timedelta(hours=1)
    prev = t.astimezone(zone).utcoffset()
    while t < end:
        t += step
        off = t.astimezone(zone).utcoffset()
        if off != prev:
            out.append(t)
            prev = off
    return out


def _instants(zone_name: str) -> list[datetime.datetime]:
    zone = Z.load_zone(zone_name)
    trans = _transitions(zone)
    picked = trans[:: max(1, len(trans) // 8)][:8] + trans[-4:]
    out = []
    for t in picked:
        for minutes in (-90, -61, -60, -59, -30, -1, 0, 1, 29, 30, 59, 60, 61, 90, 1440, -1440):
            out.append(
                t + datetime.timedelta(minutes=minutes, microseconds=123_456 * (minutes % 3))
            )
    for y in (1901, 1970, 1999, 2000, 2024):  # month/year ends, a leap day, before DST existed
        for m, d in ((1, 1), (2, 29 if y % 4 == 0 and y != 1901 else 28), (12, 31), (3, 31)):
            out.append(datetime.datetime(y, m, d, 23, 59, 59, 999_999, tzinfo=datetime.UTC))
    start = datetime.datetime(2023, 12, 25, 0, 17, tzinfo=datetime.UTC)
    out += [start + datetime.timedelta(days=3 * i, hours=7 * i) for i in range(130)]
    return out


def _locals(zone_name: str) -> list[datetime.datetime]:
    """Wall-clock times in and around the gaps and overlaps of ``zone_name``."""
    zone = Z.load_zone(zone_name)
    out = []
    for t in _transitions(zone)[::3][:10]:
        wall = t.astimezone(zone).replace(tzinfo=None)
        for minutes in (-75, -45, -31, -30, -15, -1, 0, 1, 15, 29, 30, 45, 75):
            out.append(wall + datetime.timedelta(minutes=minutes))
    start = datetime.datetime(2024, 12, 30, 23, 30)
    out += [start + datetime.timedelta(days=5 * i, minutes=37 * i) for i in range(40)]
    return out


@pytest.fixture(scope="module")
def conn(pg_server):
    name = pg_server.create_database("zoned")
    try:
        with pg_server.connect(name, autocommit=True) as c:
            yield c
    finally:
        pg_server.drop_database(name)


def _rows(conn, zone_name: str, sql: str, params) -> list[tuple]:
    with conn.transaction():
        conn.execute("SELECT set_config('TimeZone', %s, true)", (zone_name,))
        return conn.execute(sql, params).fetchall()


def _same(ours, pg, what) -> None:
    if isinstance(pg, datetime.datetime) and pg.tzinfo is not None:
        # an aware datetime in a repeated hour never equals one of another zone (PEP 495):
        # compare instants in UTC
        assert ours.tzinfo is not None, what
        ours, pg = ours.astimezone(datetime.UTC), pg.astimezone(datetime.UTC)
    assert ours == pg and type(ours) is type(pg), f"{what}: incview {ours!r}, Postgres {pg!r}"


@pytest.mark.parametrize("zone_name", ZONES)
def test_instant_kernels_match_postgres(conn, zone_name):
    zone = Z.load_zone(zone_name)
    values = _instants(zone_name)
    assert len(values) >= 150
    cols = ["v::timestamp", "v::date", "v::text"]
    cols += [f"date_trunc('{u}', v)" for u in UNITS]
    cols += ["date_trunc('day', v, 'Asia/Kolkata')", "date_trunc('month', v, 'America/New_York')"]
    cols += [f"extract({f} FROM v)" for f in FIELDS]
    cols += [f"date_part('{f}', v)" for f in FIELDS]
    cols += [f"v + interval '{iv[0]}'" for iv in INTERVALS]
    cols += [f"v - interval '{iv[0]}'" for iv in INTERVALS]
    cols += ["v AT TIME ZONE 'Europe/Paris'", "(v AT TIME ZONE 'UTC')"]
    sql = f"SELECT {', '.join(cols)} FROM unnest(%s::timestamptz[]) WITH ORDINALITY u(v, i) ORDER BY i"
    rows = _rows(conn, zone_name, sql, (values,))
    paris, utc = Z.load_zone("Europe/Paris"), Z.load_zone("UTC")
    for v, row in zip(values, rows, strict=True):
        ours = [Z.to_local(v, zone), Z.tz_to_date(v, zone), Z.tz_text(v, zone)]
        ours += [Z.date_trunc(u, v, zone) for u in UNITS]
        ours += [
            Z.date_trunc("day", v, Z.load_zone("Asia/Kolkata")),
            Z.date_trunc("month", v, Z.load_zone("America/New_York")),
        ]
        ours += [Z.extract(f, v, zone) for f in FIELDS]
        ours += [Z.date_part(f, v, zone) for f in FIELDS]
        ours += [Z.plus_interval(v, m, d, us, zone) for _, m, d, us in INTERVALS]
        ours += [Z.plus_interval(v, -m, -d, -us, zone) for _, m, d, us in INTERVALS]
        ours += [Z.to_local(v, paris), Z.to_local(v, utc)]
        for col, a, b in zip(cols, ours, row, strict=True):
            _same(a, b, f"{col} with v = {v.isoformat()} in {zone_name}")


@pytest.mark.parametrize("zone_name", ZONES)
def test_wall_clock_kernels_match_postgres(conn, zone_name):
    zone = Z.load_zone(zone_name)
    values = _locals(zone_name)
    assert values
    sql = (
        "SELECT w::timestamptz, w::date::timestamptz, date_trunc('month', w::date), "
        "w AT TIME ZONE 'America/New_York', (w::text)::timestamptz "
        "FROM unnest(%s::timestamp[]) WITH ORDINALITY u(w, i) ORDER BY i"
    )
    rows = _rows(conn, zone_name, sql, (values,))
    ny = Z.load_zone("America/New_York")
    for w, row in zip(values, rows, strict=True):
        ours = (
            Z.from_local(w, zone),
            Z.date_to_tz(w.date(), zone),
            Z.date_trunc("month", Z.date_to_tz(w.date(), zone), zone),
            Z.from_local(w, ny),
            Z.text_to_tz(F.timestamp_text(w), zone),
        )
        for i, (a, b) in enumerate(zip(ours, row, strict=True)):
            _same(a, b, f"column {i} with w = {w} in {zone_name}")


def test_text_input_with_offsets(conn):
    texts = [
        "2024-03-10 02:30:00+05",
        "2024-03-10 02:30:00-03:30",
        "2024-11-03 01:30:00.25Z",
        "2024-11-03T01:30:00 UTC",
        "  2024-11-03 01:30  ",
        "2024-01-01",
    ]
    rows = _rows(
        conn,
        "America/New_York",
        "SELECT t::timestamptz FROM unnest(%s::text[]) WITH ORDINALITY u(t, i) ORDER BY i",
        (texts,),
    )
    ny = Z.load_zone("America/New_York")
    for t, (pg,) in zip(texts, rows, strict=True):
        _same(Z.text_to_tz(t, ny), pg, t)


def test_epoch_is_exact():
    v = datetime.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=datetime.UTC)
    assert Z.extract("epoch", v, Z.load_zone("Asia/Kolkata")) == Decimal("1704067200.000001")


def test_unknown_zone_is_refused():
    with pytest.raises(ValueError, match="Mars/Olympus"):
        Z.load_zone("Mars/Olympus")
