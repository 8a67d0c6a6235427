"""The Engine's running phase against a real Postgres: TRUNCATE, views on views, a large
transaction, lag in ``list_views`` and dropping the last view (runner="local").

Every check compares a result table with its query run by Postgres, as multisets (EXCEPT ALL
both ways, ``tests/e2e/test_engine_oracle.diff_rows``).
"""

from __future__ import annotations

import random
import time

import psycopg
import pytest

from engine.engine import Engine
from engine.errors import ViewError
from tests.e2e.test_engine_oracle import VIEWS, diff_rows, random_transaction, setup_tables


@pytest.mark.slow
def test_truncate_sends_the_view_back_to_population(pg_dsn, tmp_path):
    rng = random.Random(21)
    names = ("revenue_by_segment", "amounts", "idle_customers", "statuses")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            for name in names:
                eng.create_view(name, VIEWS[name])
            for batch in range(6):
                random_transaction(conn, rng, next_id)
                if batch % 2 == 0:  # TRUNCATE amid inserts, in the same transaction
                    with conn.transaction():
                        next_id[0] += 1
                        conn.execute("INSERT INTO orders VALUES (%s, 1, 5, 'open')", (next_id[0],))
                        conn.execute("TRUNCATE orders")
                        for _ in range(3):
                            next_id[0] += 1
                            conn.execute(
                                "INSERT INTO orders VALUES (%s, %s, %s, 'open')",
                                (next_id[0], rng.randrange(8), rng.choice([1, 5, None])),
                            )
                else:  # a TRUNCATE of the other table alone
                    conn.execute("TRUNCATE customers")
                    for i in range(8):
                        conn.execute("INSERT INTO customers VALUES (%s, %s, %s)", (i, f"c{i}", "a"))
                for _ in range(3):  # later transactions in the same catch_up
                    random_transaction(conn, rng, next_id)
                eng.catch_up()
                for name in names:
                    assert diff_rows(conn, name, VIEWS[name]) == (0, 0), f"{name} batch {batch}"
            assert {s.phase for s in eng.list_views()} == {"running"}
        # the state written by re-population survives a restart
        for _ in range(3):
            random_transaction(conn, rng, next_id)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.catch_up()
            for name in names:
                assert diff_rows(conn, name, VIEWS[name]) == (0, 0), f"{name} after restart"


def test_view_on_view_follows_its_upstream(pg_dsn, tmp_path):
    rng = random.Random(5)
    upstream = VIEWS["revenue_by_segment"]
    down_sql = "SELECT segment IS NULL AS no_segment, sum(total) AS total, sum(n) AS n FROM revenue_by_segment GROUP BY 1"
    down2_sql = "SELECT r.segment, r.n, c.name FROM revenue_by_segment r JOIN customers c ON c.segment = r.segment"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("revenue_by_segment", upstream)
            eng.create_view("rollup", down_sql)
            eng.create_view("reporting.joined", down2_sql)
            replident = conn.execute(
                "SELECT relreplident::text FROM pg_class WHERE relname = 'revenue_by_segment'"
            ).fetchone()[0]
            assert replident == "f"
            for batch in range(10):
                for _ in range(rng.randint(1, 4)):
                    random_transaction(conn, rng, next_id)
                if batch == 5:
                    conn.execute("TRUNCATE orders")  # upstream re-populates; downstream follows
                eng.catch_up()
                assert diff_rows(conn, "revenue_by_segment", upstream) == (0, 0)
                assert diff_rows(conn, "rollup", down_sql) == (0, 0), f"batch {batch}"
                assert diff_rows(conn, "reporting.joined", down2_sql) == (0, 0), f"batch {batch}"
            with pytest.raises(ViewError, match="read by view"):
                eng.drop_view("revenue_by_segment")
            for name in ("rollup", "reporting.joined", "revenue_by_segment"):
                eng.drop_view(name)
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pg_publication").fetchone()[0] == 0


@pytest.mark.slow
def test_a_large_transaction_is_applied_whole(pg_dsn, tmp_path):
    n = 200_000
    sql_agg = "SELECT status, count(*) AS n, sum(amount) AS s FROM orders GROUP BY status"
    sql_rows = "SELECT id, amount FROM orders WHERE customer_id = 3"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        setup_tables(conn, random.Random(1))
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("agg", sql_agg)
            eng.create_view("rows", sql_rows)
            conn.execute(
                "INSERT INTO orders SELECT 1000 + g, g %% 8, (g %% 97)::numeric, "
                "(ARRAY['open','paid','new'])[1 + g %% 3] FROM generate_series(1, %s) g",
                (n,),
            )
            eng.catch_up(timeout_s=300)
            assert diff_rows(conn, "agg", sql_agg) == (0, 0)
            assert diff_rows(conn, "rows", sql_rows) == (0, 0)
            conn.execute(
                "UPDATE orders SET amount = amount + 1, customer_id = (id % 5) WHERE id >= 1000"
            )
            eng.catch_up(timeout_s=300)
            assert diff_rows(conn, "agg", sql_agg) == (0, 0)
            assert diff_rows(conn, "rows", sql_rows) == (0, 0)
            expected = conn.execute(f"SELECT count(*) FROM ({sql_rows}) q").fetchone()[0]
            assert expected > n // 5
            assert {s.name: s.rows for s in eng.list_views()}["rows"] == expected


def test_lag_is_zero_when_caught_up_and_grows_while_changes_pend(pg_dsn, tmp_path):
    rng = random.Random(2)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("statuses", VIEWS["statuses"])
            eng.create_view("names", "SELECT name FROM customers")
            assert [s.lag_ms for s in eng.list_views()] == [0.0, 0.0]
            next_id[0] += 1
            conn.execute("INSERT INTO orders VALUES (%s, 2, 7, 'paid')", (next_id[0],))
            eng.catch_up()
            assert [s.lag_ms for s in eng.list_views()] == [0.0, 0.0]
            time.sleep(0.2)
            # the test server runs with synchronous_commit = off; a peek sees flushed WAL only
            conn.execute("SET synchronous_commit = on")
            next_id[0] += 1
            conn.execute("INSERT INTO orders VALUES (%s, 1, 5, 'open')", (next_id[0],))
            lags = {s.name: s.lag_ms for s in eng.list_views()}
            assert lags["names"] == 0.0  # its input did not change
            assert lags["statuses"] >= 200.0  # since the commit of the last applied transaction
            eng.catch_up()
            assert [s.lag_ms for s in eng.list_views()] == [0.0, 0.0]
            eng.drop_view("statuses")
            eng.drop_view("names")
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0


def test_an_interrupted_repopulation_is_finished_on_open(pg_dsn, tmp_path):
    """A crash between deleting a view's state and the end of its re-population leaves the
    marker file and phase populating: the next Engine re-populates the view and goes on."""
    rng = random.Random(9)
    sql = VIEWS["revenue_by_segment"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("rev", sql)
            random_transaction(conn, rng, next_id)
            eng.catch_up()
            view = eng.views["rev"]
            (view.dir / "repopulating").write_text(str(view.state_time))
            eng.catalog.set_phase("rev", "populating")
            view.reset_state()  # the crash: state gone, result table and catalog left
        conn.execute("TRUNCATE customers")
        for _ in range(4):
            random_transaction(conn, rng, next_id)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            assert [(s.name, s.phase) for s in eng.list_views()] == [("rev", "running")]
            eng.catch_up()
            assert diff_rows(conn, "rev", sql) == (0, 0)
            assert not (eng.views["rev"].dir / "repopulating").exists()


def test_the_slot_follows_the_views_in_the_background(pg_dsn, tmp_path):
    """catch_up returns once the result tables are written; the slot keeper then confirms the
    applied LSN to the slot (so Postgres can recycle the WAL), and close() leaves it there."""
    rng = random.Random(5)

    def confirmed(conn):
        row = conn.execute(
            "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots"
        ).fetchone()
        return int(row[0])

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("amounts", VIEWS["amounts"])
            for _ in range(3):
                random_transaction(conn, rng, next_id)
                eng.catch_up()
                applied = eng.views["amounts"].state_time
                deadline = time.monotonic() + 10
                while confirmed(conn) < applied:
                    assert time.monotonic() < deadline, "the slot did not follow the view"
                    time.sleep(0.01)
                assert diff_rows(conn, "amounts", VIEWS["amounts"]) == (0, 0)
            random_transaction(conn, rng, next_id)
            eng.catch_up()
            applied = eng.views["amounts"].state_time
        assert confirmed(conn) >= applied  # close() advanced synchronously
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.drop_view("amounts")
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0


def test_a_failing_sink_is_retried_and_the_view_recovers(pg_dsn, tmp_path):
    """A database-side write failure puts the view in sink_error and keeps its state; once the
    database accepts the write again, the next catch_up applies everything and the view runs."""
    rng = random.Random(8)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        next_id = setup_tables(conn, rng)
        with Engine(pg_dsn, tmp_path / "state", runner="local") as eng:
            eng.create_view("amounts", VIEWS["amounts"])
            conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT OR DELETE ON amounts "
                "FOR EACH STATEMENT EXECUTE FUNCTION refuse()"
            )
            for _ in range(2):
                random_transaction(conn, rng, next_id)
                next_id[0] += 1  # and a change the view certainly sees
                conn.execute("INSERT INTO orders VALUES (%s, 1, 7, 'open')", (next_id[0],))
                with pytest.raises(ViewError, match="writing the result table failed"):
                    eng.catch_up()
                (status,) = eng.list_views()
                assert status.phase == "sink_error" and "refuse" in status.last_error
            conn.execute("DROP TRIGGER refuse ON amounts")
            random_transaction(conn, rng, next_id)
            eng.catch_up()
            (status,) = eng.list_views()
            assert (status.phase, status.last_error) == ("running", None)
            assert diff_rows(conn, "amounts", VIEWS["amounts"]) == (0, 0)
