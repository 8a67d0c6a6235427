"""The benches that track a target write their figures as JSON (``--json [PATH]``,
``bench.results_json``): small runs against the test Postgres, each file read back. No figure
is judged here (that is the bench's to print): the tests check that what was measured is what
the file says, and that each target is judged on the figure it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cdc_decode, sink
from bench.results_json import save, target

ROOT = Path(__file__).resolve().parents[2]


def _figure(figures: dict, dotted: str) -> float:
    for part in dotted.split("."):
        figures = figures[part]
    return figures  # type: ignore[return-value]


def test_save_writes_sorted_json_and_merges(tmp_path, capsys):
    path = tmp_path / "sub" / "x.json"
    save(path, {"b": 1, "a": {"z": 2.5}})
    assert json.loads(path.read_text()) == {"a": {"z": 2.5}, "b": 1}
    assert capsys.readouterr().out == path.read_text()  # what was written is what was printed
    save(path, {"b": 3, "c": 4}, merge=True)  # a partial run replaces only its own figures
    assert json.loads(path.read_text()) == {"a": {"z": 2.5}, "b": 3, "c": 4}
    save(path, {"c": 5})
    assert json.loads(path.read_text()) == {"c": 5}


def test_target_judges_its_bounds():
    assert target(10.0, "f", at_least=10)["met"] and not target(9.99, "f", at_least=10)["met"]
    assert target(300, "f", at_most=300)["met"] and not target(301, "f", at_most=300)["met"]
    assert not target(5, "f", at_least=1, at_most=4)["met"]


def test_cdc_decode_figures_and_cli(pg_dsn, tmp_path):
    figures = cdc_decode.run(pg_dsn, rows=3000, updates=400, small=2, runs=1)
    t = figures["target"]
    assert t["at_least"] == cdc_decode.DECODE_TARGET
    assert t["measured"] == _figure(figures, t["figure"]) > 0
    assert t["met"] == (t["measured"] >= t["at_least"])
    assert figures["workload"]["transactions"] == 3 + 4 + 2  # 1,000-row inserts, 100-row updates
    assert set(figures["poll_loop_diffs_per_s"]) == {"rows", "columnar"}

    out = tmp_path / "cdc.json"
    cmd = [sys.executable, "-m", "bench.cdc_decode", "--dsn", pg_dsn, "--rows", "1000"]
    cmd += ["--updates", "100", "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["workload"]["inserts"] == 1000 and saved["target"]["measured"] > 0


def test_sink_figures_judge_every_kind_of_the_arrow_path(pg_dsn):
    figures = sink.run(pg_dsn, rows=2000, batch=400, batches=1, rounds=1, paths=list(sink.PATHS))
    assert set(figures["diffs_per_s"]) == set(sink.PATHS)
    for kind in sink.KINDS:
        t = figures["targets"][kind]
        assert t["measured"] == figures["diffs_per_s"]["arrow"][kind] > 0
        assert t["met"] == (t["measured"] >= sink.ARROW_TARGET)
    assert figures["population"]["new_table_rows_per_s"] > 0


def test_expressions_cli_writes_each_case(tmp_path):
    out = tmp_path / "expr.json"
    cmd = [sys.executable, "-m", "bench.expressions", "--rows", "2000", "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["rows"] == 2000
    cases = [v for v in saved.values() if isinstance(v, dict)]
    assert len(cases) == 3
    for c in cases:
        assert c["compiled_rows_per_s"] > 0 and c["hand_written_rows_per_s"] > 0
        assert c["met"] == (c["compiled_rows_per_s"] >= 2e6 or c["x_hand_written_time"] <= 3)


@pytest.mark.slow
def test_postgres_e2e_cli_writes_its_figures(pg_dsn, tmp_path):
    out = tmp_path / "e2e.json"
    cmd = [sys.executable, "-m", "bench.postgres_e2e", "--dsn", pg_dsn, "--rows", "3000"]
    cmd += ["--seconds", "1", "--rate", "50", "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["equal"] is True
    assert (
        saved["throughput"]["target"]["measured"] == saved["throughput"]["sustained_changes_per_s"]
    )
    assert saved["refresh_batch"]["target"]["measured"] == saved["refresh_batch"]["x_refresh"]
    assert saved["lag"]["transactions"] > 0


@pytest.mark.slow
def test_population_figures_judge_each_view_against_its_ctas(pg_dsn):
    from bench import population

    figures = population.run(pg_dsn, rows=20_000)
    for name, limit in population.LIMITS.items():
        x = figures["populate_s"][f"{name}_arrow"] / figures["ctas_s"][name]
        t = figures["targets"][name]
        assert t["measured"] == figures["x_ctas"][name] == pytest.approx(x)
        assert t["at_most"] == limit and t["met"] == (x <= limit)


@pytest.mark.slow
def test_memory_budget_figures_and_cli(pg_dsn, tmp_path):
    """Both settings ran in their own processes, views equal, memory figures read back."""
    out = tmp_path / "mem.json"
    cmd = [sys.executable, "-m", "bench.memory_budget", "--dsn", pg_dsn, "--views", "2"]
    cmd += ["--rows", "4000", "--rounds", "1", "--updates", "300", "--memory-mb", "32"]
    proc = subprocess.run(cmd + ["--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["settings"] == {"views": 2, "rows": 4000, "rounds": 1, "updates": 300}
    assert [saved[k]["memory_mb"] for k in ("no_budget", "budget_32_mb")] == [0, 32]
    for k in ("no_budget", "budget_32_mb"):
        r = saved[k]
        assert r["equal"] is True
        assert r["own_mb_at_start"] > 0 and r["own_mb_after_updates"] > 0
        assert f"{r['own_mb_after_updates']:,.0f} MB after 1 x 300 updates" in proc.stdout


def test_join_floor_cli_writes_its_figures(tmp_path):
    path = tmp_path / "join_floor.json"
    args = ["--rows", "20000", "--batch", "1000", "--batches", "2", "--json", str(path)]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.join_floor", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(path.read_text())
    ms, per_s = figures["ms_per_batch"], figures["diffs_per_s"]
    # half the diffs update lines, half orders, -old +new: ~a key per two diffs
    assert 400 <= ms["keys_read"] <= 500
    assert all(ms[p] > 0 for p in ("whole", "read", "write", "consolidate"))
    floor = 1000 / (ms["read"] + ms["write"] + ms["consolidate"]) * 1000
    assert per_s["floor_read_write_consolidate"] == pytest.approx(floor)
    assert per_s["floor_without_reads"] > per_s["floor_read_write_consolidate"]
    assert figures["floor_allows_target"] == (floor >= 500_000)
    assert figures["target"]["measured"] == _figure(figures, figures["target"]["figure"])


def test_read_floor_reads_what_the_population_reads(pg_conn):
    from bench.tpch import read_floor
    from bench.tpch.queries import Q5
    from bench.tpch.schema import create_tables

    create_tables(pg_conn)
    statements = [s.as_string(pg_conn) for s in read_floor.reads(pg_conn, Q5)]
    tables = {s.split(" FROM ")[1].split(" ")[0].split(")")[0] for s in statements}
    names = ("customer", "orders", "lineitem", "supplier", "nation", "region")
    assert tables == {f'"public"."{t}"' for t in names}
    (orders,) = [s for s in statements if '"orders"' in s]
    assert "o_orderdate" in orders.split(" WHERE ")[1]  # the year's filter pushed into the read
    (lines,) = [s for s in statements if '"lineitem"' in s]
    assert " WHERE " not in lines  # every line is kept: a later order may join it
    assert lines.endswith("TO '/dev/null' (FORMAT binary)")
    figures = read_floor.measure(pg_conn, {"Q5"})
    assert set(figures) == {"Q5"}
    q5 = figures["Q5"]
    assert q5["read_x_ctas"] == pytest.approx(q5["read_s"] / q5["ctas_s"])
    assert q5["read_within_ceiling"]["at_most"] == 10.0
