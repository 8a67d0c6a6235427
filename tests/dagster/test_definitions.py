"""The repo's ``definitions.py`` loads without a database and passes ``dagster definitions
validate``; it shows the demo's tables, the four views with lineage, their checks and sensors."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, Definitions

REPO = Path(__file__).resolve().parents[2]


def _load_definitions_module(monkeypatch):
    monkeypatch.delenv("INCVIEW_DEMO_VIEWS", raising=False)
    spec = importlib.util.spec_from_file_location(
        "incview_demo_definitions", REPO / "definitions.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_definitions_load_without_a_database(monkeypatch):
    monkeypatch.setenv("INCVIEW_DSN", "host=127.0.0.1 port=1 dbname=nowhere")  # never connected
    defs = _load_definitions_module(monkeypatch).defs
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    views = {k for k in graph.get_all_asset_keys() if k.path[0] == "views"}
    assert views == {
        AssetKey(["views", "demo", n])
        for n in (
            "revenue_by_segment",
            "orders_with_customers",
            "top3_orders_per_customer",
            "product_sales",
        )
    }
    assert set(graph.get(AssetKey(["views", "demo", "revenue_by_segment"])).parent_keys) == {
        AssetKey(["pg", "demo", t]) for t in ("order_items", "orders", "customers")
    }
    checks = {(k.asset_key.path[-1], k.name) for k in graph.asset_check_keys}
    assert ("product_sales", "matches_full_recompute") in checks
    assert ("product_sales", "lag_within") in checks
    sensors = {s.name: s for s in defs.sensors}
    assert set(sensors) == {"incview_supervisor", "incview_recovery"}
    assert all(s.default_status.value == "RUNNING" for s in sensors.values())


@pytest.mark.slow
def test_dagster_definitions_validate_passes(tmp_path):
    dagster = str(Path(sys.executable).parent / "dagster")
    done = subprocess.run(
        [dagster, "definitions", "validate", "-w", str(REPO / "workspace.yaml")],
        cwd=REPO,
        env={
            "PATH": str(Path(sys.executable).parent),
            "DAGSTER_HOME": str(tmp_path),
            "HOME": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All code locations passed validation" in done.stdout + done.stderr
