"""Fault: huge source transactions, applied with a bounded number of diffs in memory (runner local).

The engine runs with a tiny ``max_buffered_changes`` (2,000) so that 50k-row transactions take
every spilling path: the CDC reader puts the transaction's diffs on disk in chunks, the views
receive them chunk by chunk as one time, the GROUP BY's buffered input is compacted, the sink's
consolidator spills the projection's output and the sink streams it into Postgres. Checked: each
result table equals its query (as multisets) after an insert of 50k rows, a delete of half of
them with updates, and a transaction that changes the table's shape half-way; the counters show
that the spills happened; a result-table write that fails after 40k of 50k rows, or an
``incview run`` killed (SIGKILL) at that point, leaves the table as it was, and the retry (the
restarted engine) applies the whole transaction.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from engine import Engine, ViewError
from engine.applying import buffered_changes_setting
from engine.engine_names import MAX_BUFFERED_CHANGES, MAX_BUFFERED_CHANGES_ENV
from engine.spark_runner import CDC_READS_CONF
from tests.e2e.test_engine_oracle import diff_rows
from tests.reliability.incview_process import incview_run

VIEWS = {
    "big_rows": "SELECT id, amount, note FROM big WHERE grp >= 0",
    "big_groups": "SELECT grp, count(*) AS n, sum(amount) AS total FROM big GROUP BY grp",
}
BOUND = 2_000
ROWS = 50_000


def _equal(conn: psycopg.Connection) -> dict[str, tuple[int, int]]:
    return {name: diff_rows(conn, name, sql) for name, sql in VIEWS.items()}


def _applied(conn: psycopg.Connection, eng: Engine) -> dict[str, int]:
    """Catch ``eng`` up, check that every view equals its query; the engine's spill counters."""
    eng.catch_up(timeout_s=300)
    assert _equal(conn) == {name: (0, 0) for name in VIEWS}
    return eng.spill_counts()


def _insert(conn: psycopg.Connection, start: int, end: int) -> None:
    conn.execute(
        "INSERT INTO big (id, grp, amount, note) SELECT i, i %% 50, (i %% 997) * 1.25, "
        "'note ' || i FROM generate_series(%s::int, %s::int) i",
        (start, end),
    )


def _engine_with_views(conn: psycopg.Connection, dsn: str, tmp_path, runner: str) -> Engine:
    """Table ``big`` (100 rows) and an Engine bound to ``BOUND`` diffs holding ``VIEWS``."""
    conn.execute("CREATE TABLE big (id int, grp int, amount numeric(12,2), note text)")
    conn.execute("ALTER TABLE big REPLICA IDENTITY FULL")
    _insert(conn, 1, 100)
    eng = Engine(dsn, tmp_path / "state", runner=runner, max_buffered_changes=BOUND)
    for name, sql in VIEWS.items():
        eng.create_view(name, sql)
    return eng


@pytest.mark.slow  # ~6 s
def test_huge_transactions_are_applied_in_bounded_chunks(pg_dsn, tmp_path):
    with (
        psycopg.connect(pg_dsn, autocommit=True) as conn,
        _engine_with_views(conn, pg_dsn, tmp_path, "local") as eng,
    ):
        _insert(conn, 101, ROWS)  # one transaction of ~50k inserts
        spills = _applied(conn, eng)
        assert spills["cdc_transactions"] == 1
        assert spills["cdc_chunks"] >= (ROWS - 100) // BOUND - 1
        assert spills["sink_times"] == 1  # the projection's 50k output rows
        assert spills["compactions"] >= 1  # the GROUP BY's buffered input

        with conn.transaction():  # half deleted, and updates that cancel out partly
            conn.execute("DELETE FROM big WHERE id % 2 = 0")
            conn.execute("UPDATE big SET amount = amount + 1 WHERE id % 3 = 0")
            conn.execute("UPDATE big SET amount = amount - 1 WHERE id % 9 = 0")
        assert _applied(conn, eng)["cdc_transactions"] == 2
        assert eng.spill_counts()["sink_times"] == 2

        # the table's shape changes half-way through a huge transaction: rows spilled
        # before the change are re-shaped to the final columns by name
        with conn.transaction():
            _insert(conn, ROWS + 1, ROWS + 10_000)
            conn.execute("ALTER TABLE big ADD COLUMN extra int")
            conn.execute("UPDATE big SET extra = 1, grp = grp + 1 WHERE id > %s", (ROWS,))
            _insert(conn, ROWS + 10_001, ROWS + 20_000)
        assert _applied(conn, eng)["cdc_transactions"] == 3
        assert {s.phase for s in eng.list_views()} == {"running"}


@pytest.mark.slow
def test_a_failure_in_the_middle_of_a_huge_transaction_leaves_nothing_half_applied(
    pg_dsn, tmp_path
):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int, grp int, amount numeric(12,2), note text)")
        conn.execute("ALTER TABLE big REPLICA IDENTITY FULL")
        _insert(conn, 1, 100)
        name, sql = "big_rows", VIEWS["big_rows"]
        with Engine(pg_dsn, tmp_path / "state", runner="local", max_buffered_changes=BOUND) as eng:
            eng.create_view(name, sql)
            # the 40,000th row written into the result table fails the sink's transaction
            conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER refuse AFTER INSERT ON big_rows FOR EACH ROW "
                "WHEN (NEW.id = 40000) EXECUTE FUNCTION refuse()"
            )
            _insert(conn, 101, ROWS)
            with pytest.raises(ViewError, match="writing the result table failed"):
                eng.catch_up(timeout_s=300)
            # rolled back as a whole: the 100 rows of before, none of the transaction's
            assert conn.execute("SELECT count(*), max(id) FROM big_rows").fetchone() == (100, 100)
            (status,) = eng.list_views()
            assert status.phase == "sink_error" and "refuse" in status.last_error
            assert eng.spill_counts()["sink_times"] == 1

            conn.execute("DROP TRIGGER refuse ON big_rows")
            eng.catch_up(timeout_s=300)
            assert diff_rows(conn, name, sql) == (0, 0)
            (status,) = eng.list_views()
            assert (status.phase, status.last_error) == ("running", None)
            assert eng.spill_counts()["sink_times"] == 2  # the time replayed, spilled again


def test_the_bound_comes_from_the_keyword_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv(MAX_BUFFERED_CHANGES_ENV, raising=False)
    assert buffered_changes_setting(None) == MAX_BUFFERED_CHANGES
    assert buffered_changes_setting(0) == 0  # no bound
    monkeypatch.setenv(MAX_BUFFERED_CHANGES_ENV, "5000")
    assert buffered_changes_setting(None) == 5000
    assert buffered_changes_setting(70) == 70  # the keyword wins
    monkeypatch.setenv(MAX_BUFFERED_CHANGES_ENV, "lots")
    with pytest.raises(ValueError, match="INCVIEW_MAX_BUFFERED_CHANGES must be a whole number"):
        buffered_changes_setting(None)
    with pytest.raises(ValueError, match="max_buffered_changes must be"):
        buffered_changes_setting(-1)


@pytest.mark.slow  # ~5-10 s: a child process
def test_sigkill_while_the_sink_writes_a_huge_transaction(pg_dsn, tmp_path, monkeypatch):
    """``incview run`` is killed (SIGKILL) while its sink's transaction is half-way through a
    spilled 50k-row time (a trigger holds it at the 40,000th row): the result table keeps what
    it had, and a restarted engine applies the whole transaction."""
    state = tmp_path / "state"
    name, sql = "big_rows", VIEWS["big_rows"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int, grp int, amount numeric(12,2), note text)")
        conn.execute("ALTER TABLE big REPLICA IDENTITY FULL")
        _insert(conn, 1, 100)
        with Engine(pg_dsn, state, runner="local") as eng:
            eng.create_view(name, sql)
        conn.execute(
            "CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$"
        )
        conn.execute(
            "CREATE TRIGGER stall AFTER INSERT ON big_rows FOR EACH ROW "
            "WHEN (NEW.id = 40000) EXECUTE FUNCTION stall()"
        )
        monkeypatch.setenv(MAX_BUFFERED_CHANGES_ENV, str(BOUND))
        log = tmp_path / "run.log"
        with incview_run(pg_dsn, state, log) as proc:
            _insert(conn, 101, ROWS)
            deadline = time.monotonic() + 60
            stalled = None
            while stalled is None:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the sink never reached the 40,000th row"
                time.sleep(0.1)
                stalled = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                    "AND datname = current_database()"
                ).fetchone()
            proc.kill()
            proc.wait()
        # the killed process's backend still sleeps inside the sink's transaction: end it
        conn.execute("SELECT pg_terminate_backend(%s)", stalled)
        assert conn.execute("SELECT count(*), max(id) FROM big_rows").fetchone() == (100, 100)
        conn.execute("DROP TRIGGER stall ON big_rows")
        # the killed sink was reading a spilled output: its scratch store is left behind ...
        spill = state / "views" / name / "state.spill"
        assert list(spill.glob("time-*"))
        with Engine(pg_dsn, state, runner="local") as eng:
            assert not list(spill.glob("time-*"))  # ... and removed when the view opens
            eng.catch_up(timeout_s=300)
            assert diff_rows(conn, name, sql) == (0, 0)
            (status,) = eng.list_views()
            assert status.phase == "running"


def test_a_huge_transaction_of_partitions_reaches_the_parents_views(pg_conn, pg_dsn, tmp_path):
    """Spilled chunks of a partition's changes count for the partitioned table above it too."""
    pg_conn.execute(
        "CREATE TABLE m (id int, k int, v int) PARTITION BY RANGE (k);"
        "CREATE TABLE m0 PARTITION OF m FOR VALUES FROM (0) TO (50);"
        "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (50) TO (100);"
        "ALTER TABLE m0 REPLICA IDENTITY FULL; ALTER TABLE m1 REPLICA IDENTITY FULL;"
        "ALTER TABLE m REPLICA IDENTITY FULL"
    )
    views = {
        "by_k": "SELECT k, count(*) AS n, sum(v) AS s FROM m GROUP BY k",
        "low": "SELECT id, v FROM m0",
    }
    with Engine(pg_dsn, tmp_path / "state", runner="local", max_buffered_changes=BOUND) as eng:
        for name, sql in views.items():
            eng.create_view(name, sql)
        pg_conn.execute("INSERT INTO m SELECT i, i % 100, i FROM generate_series(1, 20000) i")
        pg_conn.execute("UPDATE m SET k = (k + 30) % 100 WHERE id % 3 = 0")  # moves partitions
        eng.catch_up(timeout_s=120)
        assert eng.reader.spilled_transactions >= 2
        assert {n: diff_rows(pg_conn, n, sql) for n, sql in views.items()} == {
            "by_k": (0, 0),
            "low": (0, 0),
        }


@pytest.mark.slow
@pytest.mark.parametrize("reads", ["driver", "executors"])
def test_huge_transactions_on_the_spark_runner(spark, pg_dsn, tmp_path, reads):
    """The same bound on the Spark runner. Reads on the driver (a local master's default):
    its reader spills the transaction as it decodes it. On executors: the CDC source's task
    spills it and ships it in chunks, the driver puts it on disk past the bound as the
    micro-batch streams in (``toLocalIterator``). Either way the views take it chunk by chunk
    as one time and the sink spills its output; the one read serves every view."""
    spark.conf.set(CDC_READS_CONF, reads)
    try:
        with (
            psycopg.connect(pg_dsn, autocommit=True) as conn,
            _engine_with_views(conn, pg_dsn, tmp_path, "spark") as eng,
        ):
            _insert(conn, 101, ROWS)  # one transaction of ~50k inserts
            spills = _applied(conn, eng)
            assert spills["cdc_transactions"] == 1  # read once for every view
            assert spills["sink_times"] >= 1 and spills["compactions"] >= 1
            with conn.transaction():
                conn.execute("DELETE FROM big WHERE id % 2 = 0")
                conn.execute("UPDATE big SET amount = amount + 1 WHERE id % 3 = 0")
            assert _applied(conn, eng)["cdc_transactions"] == 2
            assert {s.phase for s in eng.list_views()} == {"running"}
    finally:
        spark.conf.unset(CDC_READS_CONF)
