"""The supervisor and recovery sensors against real Postgres, real streaming jobs and a real
(temporary) Dagster instance."""

import json
import os
import signal
import time

import psycopg
import pytest
from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    DagsterRunStatus,
    RunRequest,
    SkipReason,
    build_run_status_sensor_context,
    build_sensor_context,
    instance_for_test,
    materialize,
)

from incview_dagster import IncView, incremental_views
from incview_dagster.sensors import latest_run_failed
from tests.dagster.conftest import BIG_SEGMENTS, SEGMENT_TOTALS

SEG_KEY = AssetKey(["views", "shop", "segment_totals"])
BIG_KEY = AssetKey(["views", "shop", "big_segments"])


def _defs(incview, views=(SEGMENT_TOTALS, BIG_SEGMENTS), **kwargs):
    return incremental_views(list(views), resource=incview, **kwargs)


def _tick(defs, instance, incview, cursor=None):
    sensor = defs.resolve_sensor_def("incview_supervisor")
    context = build_sensor_context(
        instance=instance, resources={"incview": incview}, cursor=cursor, definitions=defs
    )
    return sensor(context)


def _requests(result):
    return {tuple(r.asset_selection[0].path): r for r in result.run_requests or []}


def _populate(incview, *views):
    for view in views:
        incview.populate(view)


def test_supervisor_requests_population_of_new_views_once_their_sources_exist(incview):
    missing = IncView("shop.refunded", "SELECT order_id FROM shop.refunds")
    defs = _defs(incview, (SEGMENT_TOTALS, missing))
    with instance_for_test() as instance:
        result = _tick(defs, instance, incview)
        requests = _requests(result)
        assert set(requests) == {("views", "shop", "segment_totals")}
        request = requests[("views", "shop", "segment_totals")]
        assert request.tags["incview/reason"] == "population"
        assert request.tags["incview/view"] == "shop.segment_totals"
        assert not any(isinstance(e, AssetObservation) for e in result.asset_events)


@pytest.mark.slow
def test_supervisor_recovers_a_dead_job_and_reports_health(incview, shop_dsn):
    defs = _defs(incview, heartbeat_timeout_s=10)
    _populate(incview, SEGMENT_TOTALS, BIG_SEGMENTS)
    jobs = incview.streaming_jobs()
    deadline = time.monotonic() + 30
    while not all(r.heartbeat for r in incview.view_records().values()):
        assert time.monotonic() < deadline, "no heartbeat from the streaming jobs"
        time.sleep(0.2)
    with instance_for_test() as instance:
        # healthy: no run requested, one observation per view
        result = _tick(defs, instance, incview)
        assert not result.run_requests
        observations = {
            tuple(e.asset_key.path): e
            for e in result.asset_events
            if isinstance(e, AssetObservation)
        }
        seg = observations[("views", "shop", "segment_totals")].metadata
        assert seg["job_state"].value == "running"
        assert seg["dagster/row_count"].value == 2
        assert seg["state_bytes"].value > 0
        assert seg["lag_ms"].value < 10_000
        cursor = result.cursor

        # a change the view's result does not show (a customer's name): applied, no
        # materialization (downstream automation must not run for nothing)
        seen = json.loads(cursor)["changed"]["shop.segment_totals"]
        last = incview.view_records()["shop.segment_totals"].last_lsn
        with psycopg.connect(shop_dsn, autocommit=True) as conn:
            conn.execute("UPDATE shop.customers SET name = 'anne' WHERE id = 1")
        while incview.view_records()["shop.segment_totals"].last_lsn == last:
            assert time.monotonic() < deadline + 30, "the streaming job applied nothing"
            time.sleep(0.2)
        assert incview.view_records()["shop.segment_totals"].last_change_lsn == seen
        result = _tick(defs, instance, incview, cursor)
        mats = [e for e in result.asset_events if isinstance(e, AssetMaterialization)]
        assert SEG_KEY not in {m.asset_key for m in mats}
        cursor = result.cursor

        # a change of the result table: a run-less materialization
        with psycopg.connect(shop_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO shop.orders VALUES (20, 2, 1)")
        while incview.view_records()["shop.segment_totals"].last_change_lsn == seen:
            assert time.monotonic() < deadline + 60, "the streaming job changed nothing"
            time.sleep(0.2)
        result = _tick(defs, instance, incview, cursor)
        mats = [e for e in result.asset_events if isinstance(e, AssetMaterialization)]
        assert SEG_KEY in {m.asset_key for m in mats}
        cursor = result.cursor

        # the job dies: a recovery of that view only
        os.kill(jobs.status(SEGMENT_TOTALS.name).pid, signal.SIGKILL)
        while jobs.status(SEGMENT_TOTALS.name).alive:
            time.sleep(0.05)
        result = _tick(defs, instance, incview, cursor)
        requests = _requests(result)
        assert set(requests) == {("views", "shop", "segment_totals")}
        # its state is intact: restarted from there first, not re-populated
        assert requests[("views", "shop", "segment_totals")].tags["incview/reason"] == "resume"

        # while a run for it exists, nothing more is requested
        job_def = defs.resolve_job_def("incview_population")
        for status in (
            DagsterRunStatus.NOT_STARTED,
            DagsterRunStatus.STARTED,
            DagsterRunStatus.CANCELING,
        ):
            run = instance.create_run_for_job(
                job_def, asset_selection=frozenset({SEG_KEY}), status=status
            )
            result = _tick(defs, instance, incview, result.cursor)
            assert not result.run_requests, status
            assert isinstance(result.skip_reason, SkipReason)
            assert run.run_id in result.skip_reason.skip_message
            instance.report_run_canceled(run)

        # no run exists any more, but the supervisor's own recovery backs off
        result = _tick(defs, instance, incview, result.cursor)
        assert not result.run_requests
        assert "recovery backoff" in result.skip_reason.skip_message


def _failed_run(instance, defs, incview, view, tags=None):
    result = materialize(
        [
            a
            for a in defs.assets
            if getattr(a, "key", None) == AssetKey(["views", *view.name.split(".")])
        ],
        resources={"incview": incview},
        instance=instance,
        raise_on_error=False,
        tags=tags or {},
    )
    assert not result.success
    return result


@pytest.mark.slow
def test_recovery_sensor_requests_recovery_with_backoff_until_the_cap(incview):
    broken = IncView("shop.broken", "SELECT id FROM shop.no_such_table")
    defs = _defs(incview, (broken,), max_recovery_attempts=2, recovery_backoff_s=0.5)
    sensor = defs.resolve_sensor_def("incview_recovery")
    with instance_for_test() as instance:
        attempts = []
        tags = {}
        for _ in range(3):
            result = _failed_run(instance, defs, incview, broken, tags)
            context = build_run_status_sensor_context(
                sensor_name="incview_recovery",
                dagster_event=result.get_run_failure_event(),
                dagster_instance=instance,
                dagster_run=result.dagster_run,
                resources={"incview": incview},
            ).for_run_failure()
            out = sensor(context)
            attempts.append(out)
            if isinstance(out, RunRequest):
                tags = dict(out.tags)
        first, second, third = attempts
        assert isinstance(first, RunRequest) and first.tags["incview/attempt"] == "1"
        assert first.asset_selection == [AssetKey(["views", "shop", "broken"])]
        assert isinstance(second, RunRequest) and second.tags["incview/attempt"] == "2"
        assert second.tags["incview/not_before"] > first.tags["incview/not_before"]
        assert isinstance(third, SkipReason) and "gave up after 2" in third.skip_message
        # the supervisor leaves a view whose latest run failed to the recovery sensor
        assert latest_run_failed(instance, AssetKey(["views", "shop", "broken"])) is not None


@pytest.mark.slow
def test_a_dead_job_resumes_from_its_state_then_is_repopulated_if_it_dies_again(incview, shop_dsn):
    """The supervisor's first recovery of a killed job is a resume run: the job restarts from
    the view's state (no re-population) and applies what happened while it was down; a resumed
    job that dies again is re-populated."""
    defs = _defs(incview, (SEGMENT_TOTALS,), heartbeat_timeout_s=10, recovery_backoff_s=0)
    _populate(incview, SEGMENT_TOTALS)
    jobs = incview.streaming_jobs()
    query = SEGMENT_TOTALS.sql
    with instance_for_test() as instance, psycopg.connect(shop_dsn, autocommit=True) as conn:
        cursor = _tick(defs, instance, incview).cursor
        os.kill(jobs.status(SEGMENT_TOTALS.name).pid, signal.SIGKILL)
        while jobs.status(SEGMENT_TOTALS.name).alive:
            time.sleep(0.05)
        conn.execute("INSERT INTO shop.orders VALUES (30, 1, 7), (31, 2, 9)")  # while it is down
        conn.execute("DELETE FROM shop.orders WHERE id = 30")
        result = _tick(defs, instance, incview, cursor)
        (request,) = result.run_requests
        assert request.tags["incview/reason"] == "resume"
        # a re-population deletes the state directory (Engine._View.reset_state): a file of
        # ours in it survives only a resume
        witness = incview.state_path / "views" / SEGMENT_TOTALS.name / "state" / "test-witness"
        witness.write_text("kept")
        run = materialize(
            [a for a in defs.assets if getattr(a, "key", None) == SEG_KEY],
            resources={"incview": incview},
            instance=instance,
            tags=request.tags,
        )
        (mat,) = run.asset_materializations_for_node("__".join(SEG_KEY.path))
        assert mat.metadata["incview/action"].value == "resumed"
        assert witness.read_text() == "kept"
        deadline = time.monotonic() + 60
        while True:
            extra = conn.execute(
                f"SELECT (SELECT count(*) FROM (({query}) EXCEPT ALL "
                f"SELECT * FROM shop.segment_totals) a) + (SELECT count(*) FROM "
                f"(SELECT * FROM shop.segment_totals EXCEPT ALL ({query})) b)"
            ).fetchone()[0]
            if extra == 0:
                break
            assert time.monotonic() < deadline, "the resumed job did not catch up"
            time.sleep(0.2)
        # it dies again: this time a re-population
        cursor = result.cursor
        os.kill(jobs.status(SEGMENT_TOTALS.name).pid, signal.SIGKILL)
        while jobs.status(SEGMENT_TOTALS.name).alive:
            time.sleep(0.05)
        (request,) = _tick(defs, instance, incview, cursor).run_requests
        assert request.tags["incview/reason"] == "recovery"
