"""psycopg dumpers writing intervals with their three fields (``engine.pg_interval``).

psycopg's own interval dumpers take a ``timedelta`` as days and seconds: a ``PgInterval`` of
'1 mon 2 days' would reach Postgres as '32 days'. ``register(conn)`` makes a connection write
every timedelta and ``PgInterval`` as Postgres' (months, days, microseconds), in binary and in
text (COPY of either format), so a result table holds what the view computed.
"""

from __future__ import annotations

import datetime
import struct

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

from engine.pg_interval import PgInterval, fields

INTERVAL_OID = 1186
_pack = struct.Struct("!qii").pack  # microseconds, days, months


class IntervalBinaryDumper(Dumper):
    format = Format.BINARY
    oid = INTERVAL_OID

    def dump(self, obj: datetime.timedelta) -> bytes:
        months, days, micros = fields(obj)
        return _pack(micros, days, months)


class IntervalTextDumper(Dumper):
    format = Format.TEXT
    oid = INTERVAL_OID

    def dump(self, obj: datetime.timedelta) -> bytes:
        months, days, micros = fields(obj)
        return f"{months} mons {days} days {micros} microseconds".encode()


def register(conn: psycopg.Connection) -> None:
    for cls in (datetime.timedelta, PgInterval):
        conn.adapters.register_dumper(cls, IntervalBinaryDumper)
        conn.adapters.register_dumper(cls, IntervalTextDumper)
