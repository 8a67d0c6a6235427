"""``matches_full_recompute`` and ``lag_within`` on a correct and on a tampered view."""

import os

import psycopg
import pytest
from dagster import AssetKey, AssetSelection, instance_for_test, materialize

from incview_dagster import build_view_assets, build_view_checks
from incview_dagster.translator import IncViewTranslator
from tests.dagster.conftest import SEGMENT_TOTALS

KEY = AssetKey(["views", "shop", "segment_totals"])


def _run_checks(incview, **lag_settings):
    translator = IncViewTranslator()
    defs = [
        *build_view_assets([SEGMENT_TOTALS], translator),
        *build_view_checks(SEGMENT_TOTALS, translator, **lag_settings),
    ]
    with instance_for_test() as instance:
        result = materialize(
            defs,
            resources={"incview": incview},
            instance=instance,
            selection=AssetSelection.checks_for_assets(KEY),
        )
        assert result.success
        return {e.check_name: e for e in result.get_asset_check_evaluations()}


@pytest.mark.slow
def test_checks_pass_on_a_correct_view_and_fail_with_a_diff_sample_when_tampered(incview, shop_dsn):
    incview.populate(SEGMENT_TOTALS)
    checks = _run_checks(incview, startup_wait_s=30)
    assert checks["matches_full_recompute"].passed
    assert checks["matches_full_recompute"].metadata["missing_rows"].value == 0
    lag = checks["lag_within"]
    assert lag.passed, lag.description
    assert lag.metadata["job_state"].value == "running"
    assert lag.metadata["lag_ms"].value <= 60_000

    # tamper with the result table behind incview's back (the job is stopped first, so nothing
    # repairs it meanwhile); the comparison finds both sides of the difference
    jobs = incview.streaming_jobs()
    pid = jobs.status(SEGMENT_TOTALS.name).pid
    jobs.stop(SEGMENT_TOTALS.name)
    with psycopg.connect(shop_dsn, autocommit=True) as conn:
        conn.execute("UPDATE shop.segment_totals SET total = 999 WHERE segment = 'online'")
    checks = _run_checks(incview, heartbeat_timeout_s=5, startup_wait_s=0)
    recompute = checks["matches_full_recompute"]
    assert not recompute.passed
    assert recompute.metadata["missing_rows"].value == 1
    assert recompute.metadata["extra_rows"].value == 1
    sample = recompute.metadata["diff_sample"].value
    assert sample["columns"] == ["segment", "orders", "total"]
    assert sample["missing"] == [["online", 1, "3"]] or sample["missing"] == [["online", 1, 3]]
    assert sample["extra"] in ([["online", 1, "999"]], [["online", 1, 999]])
    assert "999" in recompute.metadata["extra_sample"].value
    lag = checks["lag_within"]
    assert not lag.passed
    assert lag.metadata["job_state"].value == "dead"
    assert "not running" in lag.description
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
