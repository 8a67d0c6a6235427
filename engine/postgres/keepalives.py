"""TCP keepalives on every connection the engine opens, so that a silent network cut is noticed.

When the network between incview and Postgres silently drops packets (a firewall drops the
connection, a cable or a VM's link goes away, a failover moves the address), a socket waiting
for the server's answer waits forever: no error arrives, and ``incview run`` would hang instead of
going to its outage handling. libpq's TCP keepalives (probes after ``keepalives_idle`` seconds of
silence, every ``keepalives_interval`` seconds, ``keepalives_count`` times) and
``tcp_user_timeout`` (data sent and not acknowledged) turn such a cut into a connection error
within about half a minute; the engine then retries with backoff like after a restart.

The server needs the same on its side: a backend whose client vanished in the middle of a peek
of the slot keeps the slot (and incview's advisory lock on it) until it notices, which with the
operating system's defaults takes hours. The session settings ``tcp_keepalives_*`` and
``tcp_user_timeout`` (user-settable, sent in the connection's ``options``) make it notice within
the same half minute, so the reconnected engine gets the slot back.

``with_keepalives(dsn)`` adds these settings to a connection string (URL or key=value form) unless
it already sets them: a user's own choice wins. Connections over a Unix socket ignore them.
"""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

# about 25 s from the last packet to the error: 10 s idle, then 3 probes 5 s apart
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",  # ms: data sent that the server did not acknowledge
}


# the server's side (session settings, in the ``options`` connection parameter)
SERVER_KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "30000",
}


def with_keepalives(dsn: str) -> str:
    """``dsn`` with incview's TCP keepalive settings for the ones it does not set itself."""
    given = conninfo_to_dict(dsn)
    missing = {k: v for k, v in KEEPALIVES.items() if k not in given}
    options = str(given.get("options") or "")
    server = [f"-c {k}={v}" for k, v in SERVER_KEEPALIVES.items() if k not in options]
    if server:
        missing["options"] = " ".join([options, *server]).strip()
    if not missing:
        return dsn
    return make_conninfo(dsn, **missing)
