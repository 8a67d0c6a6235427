"""Views created in SQL (``CALL incview.create_view``) become assets on the next load of the code
location (``incremental_views(..., include_database_views=True)``), with lineage from their SQL;
a view declared in code and in the database is one asset."""

import os
import time
from pathlib import Path

import psycopg
import pytest
from dagster import AssetKey, instance_for_test

from engine import Engine
from incview_dagster import database_views, incremental_views
from incview_dagster.commander_ops import COMMANDER_DAGSTER_JOB
from incview_dagster.jobs import COMMANDER_JOB
from tests.dagster.conftest import BIG_SEGMENTS, SEGMENT_TOTALS
from tests.dagster.test_sensors import _tick
from tests.engine_running import running

BIG_ORDERS_SQL = "SELECT o.id, o.amount, c.name FROM shop.orders o JOIN shop.customers c ON c.id = o.customer_id WHERE o.amount > 5"


def _create_in_sql(dsn: str, state_dir, views: dict[str, str]) -> None:
    """Run an engine (its commander answers) while ``views`` are created with CALL."""
    with (
        Engine(dsn, state_dir, runner="local") as eng,
        running(eng),
        psycopg.connect(dsn, autocommit=True, options="-c incview.command_timeout=30") as conn,
    ):
        for name, sql in views.items():
            conn.execute("CALL incview.create_view(%s, %s)", (name, sql))


@pytest.mark.slow
def test_sql_created_views_are_assets_with_lineage(incview, shop_dsn):
    _create_in_sql(
        shop_dsn,
        incview.state_path,
        {"shop.big_orders": BIG_ORDERS_SQL, SEGMENT_TOTALS.name: SEGMENT_TOTALS.sql},
    )
    assert [v.name for v in database_views(incview, [SEGMENT_TOTALS])] == ["shop.big_orders"]

    defs = incremental_views(
        [SEGMENT_TOTALS, BIG_SEGMENTS], resource=incview, include_database_views=True
    )
    graph = defs.resolve_asset_graph()
    views = {k for k in graph.get_all_asset_keys() if k.path[0] == "views"}
    big_orders = AssetKey(["views", "shop", "big_orders"])
    segment_totals = AssetKey(["views", "shop", "segment_totals"])
    # declared in code and in the database: one asset
    assert views == {big_orders, segment_totals, AssetKey(["views", "shop", "big_segments"])}
    assert set(graph.get(big_orders).parent_keys) == {
        AssetKey(["pg", "shop", "orders"]),
        AssetKey(["pg", "shop", "customers"]),
    }
    assert "CALL incview.create_view" in (graph.get(big_orders).description or "")
    assert graph.get(big_orders).kinds == {"spark", "postgres"}
    # the population job and the checks cover it as they cover views declared in code
    job = defs.resolve_job_def("incview_population")
    assert big_orders in job.asset_layer.executable_asset_keys
    checks = {k.name for k in graph.asset_check_keys if k.asset_key == big_orders}
    assert "matches_full_recompute" in checks

    # without the flag (the default), only the views declared in code
    plain = incremental_views([SEGMENT_TOTALS], resource=incview).resolve_asset_graph()
    assert big_orders not in plain.get_all_asset_keys()
    with pytest.raises(ValueError, match="resource"):
        incremental_views([SEGMENT_TOTALS], include_database_views=True)


def _same_rows(conn: psycopg.Connection, view: str, query: str) -> bool:
    got = sorted(conn.execute(f"SELECT * FROM {view}").fetchall(), key=repr)
    return got == sorted(conn.execute(query).fetchall(), key=repr)


def _wait(predicate, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_the_supervisor_keeps_a_commander_that_hands_views_to_their_jobs(incview, shop_dsn):
    """Under Dagster no process runs every view: the supervisor keeps the commander's process
    alive, which creates a view on CALL, hands it to its own streaming job at once (before the
    code location reloads), and takes it back from the job to drop it."""
    defs = incremental_views([SEGMENT_TOTALS], resource=incview, include_database_views=True)
    jobs = incview.streaming_jobs()
    with instance_for_test() as instance:
        result = _tick(defs, instance, incview)
        commander_runs = [r for r in result.run_requests if r.job_name == COMMANDER_DAGSTER_JOB]
        assert len(commander_runs) == 1
        # the declared view's population is requested beside it, of the population job
        assert {r.job_name for r in result.run_requests} == {
            COMMANDER_DAGSTER_JOB,
            "incview_population",
        }
        run = defs.resolve_job_def(COMMANDER_DAGSTER_JOB).execute_in_process(instance=instance)
        assert run.success
        assert jobs.status(COMMANDER_JOB).alive
        # alive: no second request
        result = _tick(defs, instance, incview, result.cursor)
        assert not [r for r in result.run_requests if r.job_name == COMMANDER_DAGSTER_JOB]

        with psycopg.connect(
            shop_dsn, autocommit=True, options="-c incview.command_timeout=60"
        ) as conn:
            conn.execute("CALL incview.create_view(%s, %s)", ("shop.big_orders", BIG_ORDERS_SQL))
            # populated, and run by its own job (the commander holds no view)
            assert _same_rows(conn, "shop.big_orders", BIG_ORDERS_SQL)
            assert jobs.status("shop.big_orders").alive
            conn.execute("INSERT INTO shop.orders VALUES (20, 2, 40), (21, 3, 6)")
            conn.execute("UPDATE shop.customers SET name = 'bo' WHERE id = 2")
            conn.execute("DELETE FROM shop.orders WHERE id = 13")
            _wait(
                lambda: _same_rows(conn, "shop.big_orders", BIG_ORDERS_SQL),
                "the view's job to apply the changes",
            )

            # the next load: an asset the supervisor finds healthy (its job runs it)
            reloaded = incremental_views(
                [SEGMENT_TOTALS], resource=incview, include_database_views=True
            )
            result = _tick(reloaded, instance, incview)
            assert not [
                r for r in result.run_requests if r.tags.get("incview/view") == "shop.big_orders"
            ]
            pid = jobs.status("shop.big_orders").pid

            conn.execute("CALL incview.drop_view('shop.big_orders')")
            assert not jobs.status("shop.big_orders").alive
            assert not _pid_alive(pid)
            assert conn.execute("SELECT to_regclass('shop.big_orders')").fetchone() == (None,)
            # dropped in SQL: the stale asset is not re-created by the supervisor
            result = _tick(reloaded, instance, incview, result.cursor)
            assert not [
                r for r in result.run_requests if r.tags.get("incview/view") == "shop.big_orders"
            ]
    assert jobs.stop(COMMANDER_JOB, 30)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )
