"""The demo in Dagster's UI, seen in a real browser: headless Chromium driven by playwright.

Starts ``dagster dev`` on the repository's demo definitions (``incview_dagster.dev_server``)
against the test's fresh Postgres database, materializes ``demo_tables`` and the four demo views
with their checks in one run (GraphQL), then loads pages in headless Chromium (Debian's
``chromium`` at ``/usr/bin/chromium``, driven by the ``playwright`` package of the dev extra,
which downloads no browser) and checks what a person sees: the asset graph with the view assets,
their source assets and the lineage edges between them; a view's page with its materialization
metadata (rows, lag, state size) and its ``matches_full_recompute`` check passed. Screenshots are
saved under the test's tmp dir and their paths printed. The runner is ``local`` (env
``INCVIEW_UI_RUNNER`` overrides): what is on trial is the UI, and Spark's start-up in the run and
in four streaming jobs would take minutes on two cores (``test_dagster_dev.py`` runs a demo view
on Spark through dagster dev). Skipped, with the reason, when Chromium or playwright is missing.
"""

import contextlib
import importlib.util
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from incview_dagster import IncViewResource
from incview_dagster.dev_server import LOCATION, DagsterDev, demo_env
from tests.dagster.test_dagster_dev import LAUNCH, LOGS, RUN

CHROMIUM = os.environ.get("INCVIEW_CHROMIUM", "/usr/bin/chromium")
VIEWS = ("revenue_by_segment", "orders_with_customers", "top3_orders_per_customer", "product_sales")
TABLES = ("customers", "products", "orders", "order_items")
# lineage from the views' SQL: (source table, view)
EDGES = {
    ("order_items", "revenue_by_segment"),
    ("orders", "revenue_by_segment"),
    ("customers", "revenue_by_segment"),
    ("orders", "orders_with_customers"),
    ("customers", "orders_with_customers"),
    ("orders", "top3_orders_per_customer"),
    ("products", "product_sales"),
    ("order_items", "product_sales"),
}
RUN_TIMEOUT_S = 180


def _find_chromium() -> tuple[str | None, str]:
    """The Chromium binary and "", or None and what is missing (checked at collection, so a
    machine without it skips before the test's Postgres server or dagster dev start)."""
    path = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if not path:
        return None, (
            f"no Chromium at {CHROMIUM} nor on PATH: apt-get install -y chromium "
            "(scripts/test.sh does it as root), or set INCVIEW_CHROMIUM"
        )
    if importlib.util.find_spec("playwright") is None:
        return None, "the playwright package is not installed: pip install -e '.[dev]'"
    return path, ""


CHROMIUM_PATH, MISSING = _find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM_PATH is None, reason=MISSING)


def _materialize_demo(dev: DagsterDev) -> str:
    views = [["views", "demo", v] for v in VIEWS]
    selector = {
        "repositoryLocationName": LOCATION,
        "repositoryName": "__repository__",
        "jobName": "__ASSET_JOB",
        "assetSelection": [{"path": k} for k in [*(["pg", "demo", t] for t in TABLES), *views]],
        "assetCheckSelection": [
            {"assetKey": {"path": k}, "name": name}
            for k in views
            for name in ("matches_full_recompute", "lag_within")
        ],
    }
    # one process for the whole run: a subprocess per step (13 of them) costs ~6 s each here
    run_config = {"execution": {"config": {"in_process": {}}}}
    launched = dev.graphql(LAUNCH, params={"selector": selector, "runConfigData": run_config})[
        "launchRun"
    ]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    status = None
    while time.monotonic() < deadline:
        status = dev.graphql(RUN, runId=run_id)["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(1)
    events = dev.graphql(LOGS, runId=run_id)["logsForRun"]["events"]
    failures = [e["error"] for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert status == "SUCCESS", (status, failures, dev.log_tail())
    return run_id


class Page:
    """The browser on the Dagster UI: open a path, wait for texts, save screenshots."""

    def __init__(self, page, base_url: str, shots: Path) -> None:
        self.page = page
        self.base_url = base_url
        self.shots = shots
        self.saved: list[Path] = []

    def open(self, path: str) -> None:
        self.page.goto(self.base_url + path, wait_until="domcontentloaded")

    def text(self) -> str:
        return self.page.inner_text("body")

    def wait_for(self, *texts: str, timeout_s: float = 45) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            body = self.text()
            if all(t in body for t in texts):
                return body
            if time.monotonic() > deadline:
                self.shot("timeout")
                missing = [t for t in texts if t not in body]
                raise AssertionError(f"{missing} not on {self.page.url}:\n{body[:3000]}")
            time.sleep(0.5)

    def wait_count(self, text: str, count: int, timeout_s: float = 45) -> str:
        """The body once ``text`` shows ``count`` times (the asset cards' live data, such as
        their checks' status, loads after their names)."""
        deadline = time.monotonic() + timeout_s
        while (body := self.text()).count(text) < count:
            if time.monotonic() > deadline:
                self.shot("timeout")
                raise AssertionError(f"{text!r} not {count} times on {self.page.url}:\n{body}")
            time.sleep(0.5)
        return body

    def wait_gone(self, text: str, timeout_s: float = 45) -> None:
        deadline = time.monotonic() + timeout_s
        while text in self.text():
            if time.monotonic() > deadline:
                self.shot("timeout")
                raise AssertionError(f"{text!r} still on {self.page.url}")
            time.sleep(0.5)

    def graph(self, timeout_s: float = 30) -> dict:
        """The asset graph's nodes and edges (``_GRAPH_JS``) once it has edges drawn."""
        deadline = time.monotonic() + timeout_s
        while (graph := self.page.evaluate(_GRAPH_JS)) is None:
            if time.monotonic() > deadline:
                self.shot("timeout")
                raise AssertionError(f"no asset graph with edges on {self.page.url}")
            time.sleep(0.5)
        return graph

    def zoom_out(self, clicks: int) -> None:
        """The asset graph's zoom-out button, so that the whole graph fits a screenshot."""
        for _ in range(clicks):
            with contextlib.suppress(Exception):
                self.page.locator("button:has([aria-label='zoom_out'])").first.click(timeout=2000)
                time.sleep(0.3)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{len(self.saved) + 1:02d}-{name}.png"
        self.page.screenshot(path=str(path))
        (self.shots / f"{len(self.saved) + 1:02d}-{name}.html").write_text(self.page.content())
        self.saved.append(path)
        return path


@pytest.mark.slow
def test_the_demo_in_dagsters_ui_in_a_real_browser(pg_dsn, tmp_path, capsys):
    chromium = CHROMIUM_PATH
    from playwright.sync_api import sync_playwright

    runner = os.environ.get("INCVIEW_UI_RUNNER", "local")
    state_dir = tmp_path / "incview"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    home = tmp_path / "dagster_home"
    home.mkdir()
    # no "Join the Dagster community" dialog: it opens a second after a page's first data, so a
    # slow machine's first page had it cover the graph after a Skip click had given up (CI, stop 25)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\nnux:\n  enabled: false\n")
    dev = DagsterDev(home, demo_env(pg_dsn, state_dir, runner, None))
    resource = IncViewResource(dsn=pg_dsn, state_dir=str(state_dir), runner=runner)
    saved: list[Path] = []
    try:
        dev.start()
        _materialize_demo(dev)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=chromium,
                # root in a container: no sandbox; a small /dev/shm
                args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
            )
            try:
                page = Page(
                    browser.new_page(viewport={"width": 1680, "height": 1200}), dev.url, shots
                )
                saved = page.saved
                explore(page)
            finally:
                browser.close()
    finally:
        with capsys.disabled():
            print(f"\nscreenshots of the Dagster UI ({len(saved)}):")
            for path in saved:
                print(f"  {path}")
        dev.stop()
        resource.streaming_jobs().stop_all(timeout_s=60)


# Every asset node (a foreignObject holding the node's card) and every lineage edge (a path with an
# arrow head) of the asset graph's SVG, edges given by the nodes their ends touch: the edge's
# first point on a node's right side, its last point (plus the arrow head) on a node's left side.
_GRAPH_JS = """
() => {
  const svg = [...document.querySelectorAll('svg')].find(s => s.querySelector('path[marker-end]'));
  if (!svg) return null;
  const nodes = [...svg.querySelectorAll('foreignObject')]
    .filter(f => !f.classList.contains('group') && f.firstElementChild)
    .map(f => ({name: f.firstElementChild.innerText.trim().split('\\n')[0].trim(),
                x: f.x.baseVal.value,
                y: f.y.baseVal.value, w: f.width.baseVal.value, h: f.height.baseVal.value}))
    .filter(n => n.name);
  const near = (p, side) => {
    let best = null, dist = Infinity;
    for (const n of nodes) {
      const x = side === 'right' ? n.x + n.w : n.x;
      const dy = p.y < n.y ? n.y - p.y : (p.y > n.y + n.h ? p.y - n.y - n.h : 0);
      const d = Math.abs(p.x - x) + dy;
      if (d < dist) { dist = d; best = n; }
    }
    return dist < 40 ? best.name : null;
  };
  const edges = [...svg.querySelectorAll('path[marker-end]')].map(p => {
    const len = p.getTotalLength();
    return [near(p.getPointAtLength(0), 'right'), near(p.getPointAtLength(len), 'left')];
  });
  return {nodes: nodes.map(n => n.name), edges};
}
"""


def explore(page: Page) -> None:
    """The pages a person looks at, asserted on what they show."""
    # the asset graph: groups collapsed at first; "Expand all groups" from its context menu
    page.open("/asset-groups")
    page.wait_for("demo_sources", "Materialize all")
    page.page.locator("svg[class*=svgContainer]").click(button="right", position={"x": 40, "y": 40})
    page.page.get_by_role("menuitem", name=re.compile("Expand all groups")).click()
    page.wait_for(*VIEWS, *TABLES)
    body = page.wait_count("2 / 2 Passed", len(VIEWS))  # each view's two checks
    time.sleep(1)  # the edges' layout animation
    graph = page.graph()
    assert set(graph["nodes"]) == {*VIEWS, *TABLES}, graph
    assert {tuple(e) for e in graph["edges"]} == EDGES, graph["edges"]
    assert body.count("2 / 2 Passed") == len(VIEWS), body  # and no more
    page.zoom_out(3)
    page.shot("asset-graph-with-lineage")

    # one view's page: its latest materialization's metadata
    view = "/assets/views/demo/revenue_by_segment"
    page.open(f"{view}?view=overview")
    body = page.wait_for("Row count", "incview/lag_ms", "incview/state_bytes", "incview/sql")
    assert re.search(r"Row count\s+4\b", body), body[:3000]  # 4 customer segments
    assert re.search(r"incview/state_bytes\s+\S+\s+\d[\d,]*", body), body[:3000]
    page.shot("view-metadata")
    page.page.get_by_text("incview/state_bytes").scroll_into_view_if_needed()
    page.shot("view-metadata-table")

    # its checks: matches_full_recompute passed
    page.open(f"{view}?view=checks")
    page.wait_for("matches_full_recompute", "lag_within", "Succeeded")
    page.page.get_by_text("matches_full_recompute").first.click()
    body = page.wait_for("Evaluation result", "Passed", "missing_rows")
    page.shot("check-matches-full-recompute")

    # its lineage: the three source tables upstream
    page.open(f"{view}?view=lineage")
    page.wait_for("revenue_by_segment", "order_items", "orders", "customers", "Materialized")
    page.wait_gone("Loading...")
    time.sleep(1)
    graph = page.graph()
    upstream = {(t, "revenue_by_segment") for t in ("order_items", "orders", "customers")}
    assert {tuple(e) for e in graph["edges"]} == upstream, graph
    page.shot("view-lineage")
