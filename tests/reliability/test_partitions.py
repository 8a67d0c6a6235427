"""Fault: views over partitioned tables and inheritance parents (both runners, a real Postgres).

``SELECT ... FROM parent`` reads every partition (range, list with a DEFAULT, sub-partitioned,
a partition whose columns are in another order) and every inheritance child (with extra columns,
grandchildren). The oracle: after each batch of random inserts, updates (of the partition key
too, moving rows between partitions; moves between inheritance children) and deletes, every view
equals its query run by Postgres. Then the set of partitions/children changes under running
views (CREATE ... PARTITION OF, ATTACH of a table holding rows, DETACH, DROP, a new INHERITS
child, NO INHERIT, INHERIT of a table holding rows): the views follow, re-populated. ``FROM ONLY``
and a child without REPLICA IDENTITY FULL are refused with a clear error, leaving nothing behind.
"""

from __future__ import annotations

import random
import signal
import time

import psycopg
import pytest

from engine import Engine, UnsupportedSQL, ViewError
from tests.e2e.test_engine_oracle import diff_rows
from tests.reliability.incview_process import incview_run
from tests.reliability.runners import RUNNERS, use_runner

SCHEMA = """
CREATE TABLE r (k int, v int, g text) PARTITION BY RANGE (k);
CREATE TABLE r1 PARTITION OF r FOR VALUES FROM (0) TO (100);
CREATE TABLE r2 PARTITION OF r FOR VALUES FROM (100) TO (200);
CREATE TABLE r3 PARTITION OF r FOR VALUES FROM (200) TO (300);

CREATE TABLE l (k int, v int, g text) PARTITION BY LIST (g);
CREATE TABLE l_ab PARTITION OF l FOR VALUES IN ('a', 'b');
CREATE TABLE l_c PARTITION OF l FOR VALUES IN ('c');
CREATE TABLE l_other PARTITION OF l DEFAULT;

CREATE TABLE s (k int, v int, g text) PARTITION BY RANGE (k);
CREATE TABLE s1 PARTITION OF s FOR VALUES FROM (0) TO (150) PARTITION BY LIST (g);
CREATE TABLE s1_a PARTITION OF s1 FOR VALUES IN ('a');
CREATE TABLE s1_other PARTITION OF s1 DEFAULT;
CREATE TABLE s2 (g text, v int, k int);  -- its columns in another order
ALTER TABLE s ATTACH PARTITION s2 FOR VALUES FROM (150) TO (300);

CREATE TABLE p (k int, v int, g text);
CREATE TABLE p_c1 () INHERITS (p);
CREATE TABLE p_c2 (extra text) INHERITS (p);
CREATE TABLE p_c1a (more int) INHERITS (p_c1);
"""

LEAVES = ["r1", "r2", "r3", "l_ab", "l_c", "l_other", "s1_a", "s1_other", "s2"]
INHERITANCE = ["p", "p_c1", "p_c2", "p_c1a"]
GROUPS = ["a", "b", "c", "d", None]


def _views(source: str) -> dict[str, str]:
    return {
        f"{source}_rows": f"SELECT k, v, g FROM {source}",
        f"{source}_sums": f"SELECT g, count(*) AS n, sum(v) AS total FROM {source} GROUP BY g",
    }


VIEWS = {
    **_views("r"),
    **_views("l"),
    **_views("s"),
    **_views("p"),
    # a partition or child read by itself as well as through its parent
    "r2_rows": "SELECT k, v FROM r2",
    "p_c1_rows": "SELECT k, v, g FROM p_c1",  # with its child p_c1a
    "r_join_p": "SELECT r.k, r.v, p.v AS pv FROM r JOIN p ON p.k = r.k",
}


def _setup(conn: psycopg.Connection, rng: random.Random) -> None:
    conn.execute(SCHEMA)
    for t in LEAVES + INHERITANCE:
        conn.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    for source in ("r", "l", "s"):
        _insert(conn, rng, source, 30)
    for t in INHERITANCE:
        _insert(conn, rng, t, 10)


def _insert(conn: psycopg.Connection, rng: random.Random, table: str, n: int) -> None:
    rows = [(rng.randrange(300), rng.randint(-5, 50), rng.choice(GROUPS)) for _ in range(n)]
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} (k, v, g) VALUES (%s, %s, %s)", rows)


def _random_batch(conn: psycopg.Connection, rng: random.Random) -> None:
    """A few transactions over every source: inserts, updates of the value, of the range key
    and of the list key (rows change partition), deletes; rows moved between children."""
    for _ in range(rng.randint(2, 4)):
        with conn.transaction():
            for _ in range(rng.randint(1, 5)):
                source = rng.choice(["r", "l", "s", "p", *INHERITANCE])
                x = rng.random()
                lo = rng.randrange(300)
                where = "k BETWEEN %s AND %s"
                if x < 0.3:
                    _insert(conn, rng, source, rng.randint(1, 4))
                elif x < 0.45:
                    conn.execute(f"UPDATE {source} SET v = v + 1 WHERE {where}", (lo, lo + 40))
                elif x < 0.6:  # the range key: rows move to another range partition
                    conn.execute(
                        f"UPDATE {source} SET k = (k + 97) %% 300 WHERE {where}", (lo, lo + 30)
                    )
                elif x < 0.75:  # the list key: rows move to another list partition
                    conn.execute(
                        f"UPDATE {source} SET g = %s WHERE {where}",
                        (rng.choice(GROUPS), lo, lo + 30),
                    )
                elif x < 0.85 and source in INHERITANCE:  # a row moves to another child
                    target = rng.choice(INHERITANCE)
                    conn.execute(
                        f"WITH gone AS (DELETE FROM ONLY {source} WHERE {where} RETURNING k, v, g)"
                        f" INSERT INTO {target} (k, v, g) SELECT * FROM gone",
                        (lo, lo + 20),
                    )
                else:
                    conn.execute(f"DELETE FROM {source} WHERE {where}", (lo, lo + 15))


def _assert_equal(conn: psycopg.Connection, views: dict[str, str], when: str) -> None:
    for name, sql in views.items():
        assert diff_rows(conn, name, sql) == (0, 0), f"{name} {when}"


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
def test_views_over_partitions_and_children_equal_their_queries(pg_dsn, tmp_path, request, runner):
    rng = random.Random(9)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _setup(conn, rng)
        with Engine(pg_dsn, tmp_path / "state", runner=use_runner(request, runner)) as eng:
            for name, sql in VIEWS.items():
                eng.create_view(name, sql)
            _assert_equal(conn, VIEWS, "after population")
            for batch in range(8):
                _random_batch(conn, rng)
                if batch == 4:  # TRUNCATE of one partition, and of a parent with its children
                    conn.execute("TRUNCATE r2")
                    conn.execute("TRUNCATE p_c1")
                eng.catch_up()
                _assert_equal(conn, VIEWS, f"after batch {batch}")
            statuses = eng.list_views()
            assert {s.phase for s in statuses} == {"running"}
            assert {s.lag_ms for s in statuses} == {0.0}
            # applied change by change: the partitions never changed, nothing was re-populated
            assert {s.last_error for s in statuses} == {None}
            # a pending change of a partition is pending for the views of its parent (lag > 0)
            conn.execute("SET synchronous_commit = on")  # peekable at once
            conn.execute("INSERT INTO s1_a VALUES (1, 1, 'a')")
            lags = {s.name: s.lag_ms for s in eng.list_views()}
            assert lags["s_rows"] > 0 and lags["s_sums"] > 0
            assert lags["r_rows"] == 0 and lags["r2_rows"] == 0


def _last_error(eng: Engine, name: str) -> str | None:
    return next(s.last_error for s in eng.list_views() if s.name == name)


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
def test_partitions_attached_detached_created_while_running(
    pg_dsn, tmp_path, caplog, request, runner
):
    rng = random.Random(5)
    views = {**_views("r"), **_views("p")}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _setup(conn, rng)
        conn.execute("CREATE TABLE r_old (k int, v int, g text)")  # holds rows, then attached
        conn.execute("INSERT INTO r_old SELECT 400 + i, i, 'a' FROM generate_series(1, 20) i")
        conn.execute("CREATE TABLE p_old (k int, v int, g text, note text)")  # then inherits
        conn.execute("INSERT INTO p_old SELECT i, i, 'b', 'x' FROM generate_series(1, 15) i")
        with Engine(pg_dsn, tmp_path / "state", runner=use_runner(request, runner)) as eng:
            for name, sql in views.items():
                eng.create_view(name, sql)

            # a new partition (no REPLICA IDENTITY set: the engine sets FULL) and rows in it
            conn.execute("CREATE TABLE r4 PARTITION OF r FOR VALUES FROM (300) TO (400)")
            conn.execute("INSERT INTO r SELECT 300 + i, i, 'c' FROM generate_series(0, 30) i")
            eng.catch_up()
            _assert_equal(conn, views, "after CREATE TABLE ... PARTITION OF")
            assert "r4 added" in _last_error(eng, "r_rows")
            row = conn.execute("SELECT relreplident::text FROM pg_class WHERE relname = 'r4'")
            assert row.fetchone()[0] == "f"
            conn.execute("UPDATE r SET v = v * 2, k = k - 250 WHERE k BETWEEN 300 AND 320")
            eng.catch_up()
            _assert_equal(conn, views, "after updates moving rows out of the new partition")

            # a new partition with a primary key, updated before the engine notices it: the
            # update is logged with the key only (no old row); the view re-populates
            conn.execute("CREATE TABLE r5 PARTITION OF r FOR VALUES FROM (500) TO (600)")
            conn.execute("ALTER TABLE r5 ADD PRIMARY KEY (k)")
            conn.execute("INSERT INTO r SELECT 500 + i, i, 'd' FROM generate_series(0, 9) i")
            conn.execute("UPDATE r SET v = v + 1000 WHERE k BETWEEN 500 AND 504")
            conn.execute("DELETE FROM r WHERE k = 509")
            eng.catch_up()
            _assert_equal(conn, views, "after updates of a new partition without FULL")
            if runner == "local":  # on Spark the CDC source's task logs it, in its worker
                assert "an UPDATE of public.r5 (below public.r) arrived without the old row" in (
                    caplog.text
                )
            conn.execute("UPDATE r SET v = v - 1 WHERE k BETWEEN 500 AND 502")
            eng.catch_up()
            _assert_equal(conn, views, "after updates of the new partition, now FULL")

            # ATTACH of a table that already holds rows: they appear
            conn.execute("ALTER TABLE r ATTACH PARTITION r_old FOR VALUES FROM (400) TO (500)")
            eng.catch_up()
            _assert_equal(conn, views, "after ATTACH PARTITION")
            conn.execute("UPDATE r SET v = -v WHERE k > 410")
            conn.execute("DELETE FROM r_old WHERE k < 405")
            eng.catch_up()
            _assert_equal(conn, views, "after changes of the attached partition")

            # DETACH: its rows leave the view, its later changes do not reach it
            conn.execute("ALTER TABLE r DETACH PARTITION r1")
            eng.catch_up()
            _assert_equal(conn, views, "after DETACH PARTITION")
            assert "r1 removed" in _last_error(eng, "r_rows")
            conn.execute("INSERT INTO r1 VALUES (1, 1, 'a')")
            conn.execute("UPDATE r2 SET v = v + 100")
            eng.catch_up()
            _assert_equal(conn, views, "after changes of the detached partition")

            # DROP of a partition
            conn.execute("DROP TABLE r3")
            conn.execute("INSERT INTO r VALUES (150, 3, 'd')")
            eng.catch_up()
            _assert_equal(conn, views, "after DROP of a partition")

            # a new inheritance child with rows written before the engine notices it
            conn.execute("CREATE TABLE p_c3 (more text) INHERITS (p)")
            conn.execute("INSERT INTO p_c3 SELECT i, i, 'c', 'm' FROM generate_series(1, 10) i")
            eng.catch_up()
            _assert_equal(conn, views, "after a new inheritance child")
            conn.execute("UPDATE p_c3 SET v = v + 7 WHERE k < 5")
            conn.execute("DELETE FROM p_c3 WHERE k = 9")
            eng.catch_up()
            _assert_equal(conn, views, "after changes of the new child")

            # a table holding rows starts inheriting; a child stops inheriting
            conn.execute("ALTER TABLE p_old INHERIT p")
            conn.execute("ALTER TABLE p_c2 NO INHERIT p")
            eng.catch_up()
            _assert_equal(conn, views, "after INHERIT and NO INHERIT")
            conn.execute("UPDATE p SET v = v - 1")  # reaches p_old, not p_c2
            conn.execute("UPDATE p_c2 SET v = 1000")
            eng.catch_up()
            _assert_equal(conn, views, "after changes through the new tree")
            assert {s.phase for s in eng.list_views()} == {"running"}

            # dropping the views unpublishes the tables, the last one the publication and slot
            eng.drop_view("r_rows")
            eng.drop_view("r_sums")
            members = conn.execute(
                "SELECT prrelid::regclass::text FROM pg_publication_rel ORDER BY 1"
            ).fetchall()
            assert [m for (m,) in members] == ["p", "p_c1", "p_c1a", "p_c3", "p_old"]
            eng.drop_view("p_rows")
            eng.drop_view("p_sums")
            assert conn.execute("SELECT count(*) FROM pg_publication").fetchone()[0] == 0
            slots = conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
            )
            assert slots.fetchone()[0] == 0


def test_only_and_children_without_replica_identity_are_refused(pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        for t in LEAVES + ["p", "p_c1"]:
            conn.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            with pytest.raises(UnsupportedSQL, match="FROM ONLY is not supported"):
                eng.create_view("only_p", "SELECT k FROM ONLY p")
            with pytest.raises(ViewError) as e:
                eng.create_view("all_p", "SELECT k FROM p")
            assert "p_c1a" in str(e.value) and "p_c2" in str(e.value)
            assert "ALTER TABLE public.p_c2 REPLICA IDENTITY FULL;" in str(e.value)
            assert eng.list_views() == []
            for name in ("only_p", "all_p"):
                row = conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
                assert row[0] is None, name
            # the partitioned tables' leaves all have it: accepted
            eng.create_view("all_s", "SELECT k, g FROM s")
            _assert_equal(conn, {"all_s": "SELECT k, g FROM s"}, "after population")


@pytest.mark.slow  # a child process (``incview run``): ~6 s
def test_incview_run_follows_the_partitions(pg_dsn, tmp_path):
    """``incview run`` (runner local) over a partitioned table and an inheritance parent: a
    partition created while no engine ran, a table holding rows attached and a new child with
    rows while it runs; each time the views come back equal to their queries by themselves."""
    rng = random.Random(3)
    views = {**_views("r"), **_views("p")}
    state = tmp_path / "state"
    log = tmp_path / "run.log"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _setup(conn, rng)
        with Engine(pg_dsn, state, runner="local") as eng:
            for name, sql in views.items():
                eng.create_view(name, sql)
        conn.execute("CREATE TABLE r4 PARTITION OF r FOR VALUES FROM (300) TO (400)")
        conn.execute("INSERT INTO r SELECT 300 + i, i, 'c' FROM generate_series(0, 30) i")
        with incview_run(pg_dsn, state, log) as proc:

            def wait_equal(when: str, timeout_s: float = 60) -> None:
                deadline = time.monotonic() + timeout_s
                while time.monotonic() < deadline:
                    assert proc.poll() is None, log.read_text()
                    if all(diff_rows(conn, n, q) == (0, 0) for n, q in views.items()):
                        return
                    time.sleep(0.3)
                raise AssertionError(f"not equal {when} after {timeout_s} s\n{log.read_text()}")

            wait_equal("after a partition was created while no engine ran")
            conn.execute("CREATE TABLE r_old (LIKE r)")
            conn.execute("INSERT INTO r_old SELECT 400 + i, i, 'a' FROM generate_series(1, 20) i")
            conn.execute("ALTER TABLE r ATTACH PARTITION r_old FOR VALUES FROM (400) TO (500)")
            wait_equal("after ATTACH PARTITION")
            conn.execute("CREATE TABLE p_c3 () INHERITS (p)")
            conn.execute("INSERT INTO p_c3 SELECT i, i, 'c' FROM generate_series(1, 10) i")
            wait_equal("after a new inheritance child")
            conn.execute("UPDATE p SET v = v + 1 WHERE k < 5")  # p_c3 has FULL by now
            conn.execute("UPDATE r SET k = k - 100, v = 0 WHERE k BETWEEN 400 AND 410")
            wait_equal("after updates of the new partition and child")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()


def test_a_foreign_partition_stops_only_the_views_of_its_table(pg_dsn, tmp_path):
    """A foreign table attached as a partition: its rows never pass through logical decoding,
    so the views of that partitioned table go to ``error`` naming it (and stay there after a
    restart, until dropped); the other views keep running. Refused at create_view, too."""
    views = {**_views("r"), **_views("p")}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _setup(conn, random.Random(2))
        conn.execute("CREATE EXTENSION file_fdw")
        conn.execute("CREATE SERVER files FOREIGN DATA WRAPPER file_fdw")
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name, sql in views.items():
                eng.create_view(name, sql)
            conn.execute(
                "CREATE FOREIGN TABLE r_far PARTITION OF r FOR VALUES FROM (600) TO (700) "
                "SERVER files OPTIONS (filename '/dev/null', format 'csv')"
            )
            conn.execute("INSERT INTO p VALUES (1, 2, 'a')")
            eng.catch_up()
            status = {s.name: s for s in eng.list_views()}
            for name in ("r_rows", "r_sums"):
                assert status[name].phase == "error"
                assert "public.r_far is a foreign table" in status[name].last_error
                assert "drop the view and create it again" in status[name].last_error
            _assert_equal(conn, _views("p"), "beside the broken views")
            with pytest.raises(ViewError, match="r_far is a foreign table"):
                eng.create_view("r_again", "SELECT k FROM r")
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            conn.execute("INSERT INTO p VALUES (3, 4, 'b')")
            eng.catch_up()
            phases = {s.name: s.phase for s in eng.list_views()}
            assert phases == {
                "r_rows": "error",
                "r_sums": "error",
                "p_rows": "running",
                "p_sums": "running",
            }
            _assert_equal(conn, _views("p"), "after a restart")
            eng.drop_view("r_rows")
            eng.drop_view("r_sums")
            conn.execute("DROP FOREIGN TABLE r_far")
            eng.create_view("r_rows", views["r_rows"])  # the same name again: maintained
            conn.execute("INSERT INTO r VALUES (5, 6, 'c')")
            eng.catch_up()
            assert {s.phase for s in eng.list_views()} == {"running"}
            _assert_equal(conn, {"r_rows": views["r_rows"], **_views("p")}, "re-created")
