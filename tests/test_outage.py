"""``engine.outage``: a lost database told from other failures, also from a Spark task's text."""

from __future__ import annotations

import psycopg

from engine.errors import ViewError
from engine.outage import is_outage, is_outage_text


def test_a_lost_connection_is_an_outage_through_its_causes():
    try:
        try:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        except psycopg.Error as e:
            raise ViewError("writing the result table failed") from e
    except ViewError as wrapped:
        assert is_outage(wrapped)
    assert not is_outage(psycopg.errors.UniqueViolation("duplicate key"))
    assert not is_outage(ValueError("a bug"))


def test_a_spark_tasks_traceback_tells_an_outage_from_a_bug():
    died = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: ... "
        'File "/work/engine/postgres/cdc.py", line 599, in peek\n'
        "psycopg.errors.AdminShutdown: terminating connection due to administrator command"
    )
    assert is_outage_text(died)
    assert is_outage_text("psycopg.OperationalError: connection failed: Connection refused")
    assert not is_outage_text("ZeroDivisionError: division by zero")
    assert not is_outage_text("psycopg.errors.UndefinedTable: relation does not exist")
    assert not is_outage_text(None)
