"""Materializing a view asset: population in the run, the streaming job launched outside it."""

import time

import psycopg
import pytest
from dagster import instance_for_test, materialize

from incview_dagster import build_view_assets
from tests.dagster.conftest import BIG_SEGMENTS, SEGMENT_TOTALS, SHOP_SQL


def _wait_for(predicate, timeout_s=30.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.mark.slow
def test_population_run_creates_result_table_metadata_and_streaming_job(incview, shop_dsn):
    assets = build_view_assets([SEGMENT_TOTALS, BIG_SEGMENTS])
    with instance_for_test() as instance:
        result = materialize(assets, resources={"incview": incview}, instance=instance)
        assert result.success
        mats = {tuple(m.asset_key.path): m for m in result.get_asset_materialization_events()}
        seg = mats[("views", "shop", "segment_totals")].materialization.metadata
        assert seg["dagster/row_count"].value == 2
        assert seg["incview/action"].value == "created"
        assert "sum(o.amount)" in seg["incview/sql"].value
        assert "Optimized logical plan" in seg["incview/explain"].value
        assert seg["incview/state_dir"].value.endswith("views/shop.segment_totals")
        assert seg["incview/population_s"].value >= 0
        columns = [c.name for c in seg["dagster/column_schema"].schema.columns]
        assert columns == ["segment", "orders", "total"]
        assert (
            mats[("views", "shop", "big_segments")]
            .materialization.metadata["dagster/row_count"]
            .value
            == 1
        )  # retail 23 > 10, online 3 is not

    with psycopg.connect(shop_dsn, autocommit=True) as conn:
        assert sorted(conn.execute("SELECT * FROM shop.segment_totals").fetchall()) == [
            ("online", 1, 3),
            ("retail", 3, 23),
        ]
        # the run is over; the streaming jobs it launched keep the views up to date
        jobs = incview.streaming_jobs()
        for view in (SEGMENT_TOTALS, BIG_SEGMENTS):
            assert jobs.status(view.name).alive, jobs.log_path(view.name).read_text()
        _wait_for(
            lambda: all(r.heartbeat is not None for r in incview.view_records().values()),
            what="the streaming jobs' heartbeats",
        )
        conn.execute("INSERT INTO shop.orders VALUES (15, 2, 40)")
        _wait_for(
            lambda: (
                conn.execute(
                    "SELECT total FROM shop.big_segments WHERE segment = 'online'"
                ).fetchall()
                == [(43,)]
            ),
            what="the insert to reach the view on a view",
        )

    # materializing again = recovery: the job is stopped, the view re-populated, the job restarted
    old_pid = incview.streaming_jobs().status(SEGMENT_TOTALS.name).pid
    with instance_for_test() as instance:
        result = materialize(
            assets,
            resources={"incview": incview},
            instance=instance,
            selection=[SEGMENT_TOTALS.name.replace("shop.", "views/shop/")],
        )
    assert result.success
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert meta["incview/action"].value == "repopulated"
    assert meta["dagster/row_count"].value == 2
    status = incview.streaming_jobs().status(SEGMENT_TOTALS.name)
    assert status.alive and status.pid != old_pid


@pytest.mark.slow
def test_changed_sql_redefines_the_view_unless_another_view_reads_it(incview, shop_dsn):
    from incview_dagster import IncView

    def run(*views):
        with instance_for_test() as instance:
            result = materialize(
                build_view_assets(list(views)),
                resources={"incview": incview},
                instance=instance,
                raise_on_error=False,
            )
        return result

    assert run(SEGMENT_TOTALS).success
    changed = IncView(
        SEGMENT_TOTALS.name, "SELECT segment, count(*) AS n FROM shop.customers GROUP BY segment"
    )
    result = run(changed)
    assert result.success
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert meta["incview/action"].value == "redefined"
    assert [c.name for c in meta["dagster/column_schema"].schema.columns] == ["segment", "n"]
    with psycopg.connect(shop_dsn, autocommit=True) as conn:
        assert sorted(conn.execute("SELECT * FROM shop.segment_totals").fetchall()) == [
            ("online", 1),
            ("retail", 2),
        ]
    assert incview.view_records()[SEGMENT_TOTALS.name].sql == changed.sql

    # a view reading it would lose its input: the redefinition is refused with the reason
    reader = IncView("shop.segment_count", "SELECT sum(n) AS total FROM shop.segment_totals")
    assert run(changed, reader).success
    result = run(SEGMENT_TOTALS)
    assert not result.success
    error = result.get_step_failure_events()[0].step_failure_data.error
    assert error.cause.cls_name == "ViewError"
    assert "view(s) shop.segment_count read it" in error.cause.message


@pytest.mark.slow
def test_without_a_dsn_the_embedded_postgres_under_the_state_dir_is_used():
    import shutil
    import tempfile
    from pathlib import Path

    from engine.postgres.embedded import EmbeddedPostgres
    from incview_dagster import IncViewResource

    # a directory the postgres OS user can reach when the tests run as root (pytest's is 0700)
    base = Path(tempfile.mkdtemp(prefix="incview-dagster-embedded-", dir="/tmp"))
    base.chmod(0o755)
    state_dir = base / "incview"
    incview = IncViewResource(dsn=None, state_dir=str(state_dir), runner="local")
    try:
        with incview.connect() as conn, conn.transaction():
            conn.execute(SHOP_SQL)
        with instance_for_test() as instance:
            result = materialize(
                build_view_assets([SEGMENT_TOTALS]),
                resources={"incview": incview},
                instance=instance,
            )
        assert result.success
        assert (state_dir / "postgres" / "data" / "PG_VERSION").exists()
        # the run's Engine did not stop the server: the streaming job and the sensor use it
        _wait_for(
            lambda: incview.view_records()[SEGMENT_TOTALS.name].heartbeat is not None,
            what="the job's heartbeat through the embedded server",
        )
    finally:
        incview.streaming_jobs().stop_all(timeout_s=30)
        if (state_dir / "postgres" / "data" / "PG_VERSION").exists():
            EmbeddedPostgres(state_dir / "postgres").stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_the_resources_memory_budget_reaches_the_population_and_the_job(shop_dsn, tmp_path):
    """``IncViewResource(memory_mb=...)``: the run's engine and the streaming job it launches
    keep the view's state within that budget; the view stays up to date."""
    from incview_dagster import IncViewResource

    resource = IncViewResource(
        dsn=shop_dsn, state_dir=str(tmp_path / "incview"), runner="local", memory_mb=40
    )
    try:
        with resource.open_engine([]) as eng:
            assert eng.memory_budget is not None and eng.memory_budget.total_bytes == 40 << 20
        with instance_for_test() as instance:
            result = materialize(
                build_view_assets([SEGMENT_TOTALS]), resources={"incview": resource},
                instance=instance,
            )  # fmt: skip
            assert result.success
        jobs = resource.streaming_jobs()
        assert jobs.job_env()["INCVIEW_MEMORY_MB"] == "40"
        log = jobs.log_path(SEGMENT_TOTALS.name)
        _wait_for(
            lambda: "within a memory budget of 40 MB" in log.read_text(),
            what="the job to start within its budget",
        )
        with psycopg.connect(shop_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO shop.orders VALUES (16, 3, 100)")
            _wait_for(
                lambda: (
                    conn.execute(
                        "SELECT total FROM shop.segment_totals WHERE segment = 'retail'"
                    ).fetchall()
                    == [(123,)]
                ),
                what="the insert to reach the view",
            )
    finally:
        resource.streaming_jobs().stop_all(timeout_s=30)
