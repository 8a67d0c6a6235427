"""The benchmark's output: a Markdown table (printed and written to bench/results/) and a PNG
chart (matplotlib, when installed). Reads ``RunResult`` / scaling rows; measures nothing.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.tpch.benchmark import RunResult, ViewResult, median
from bench.tpch.queries import (
    ALL_POPULATION_CEILING,
    APPLY_FLOOR,
    APPLY_TARGETS,
    POPULATION_CEILING,
    POPULATION_TARGETS,
)
from bench.tpch.streams import KINDS


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:,.0f}" if x >= 0.1 else f"{x * 1000:.1f}"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.1f}x"


def _change(a: float | None, b: float | None) -> str:
    """``a`` against ``b`` in percent, signed."""
    return "-" if not a or not b else f"{(a / b - 1) * 100:+.0f}%"


def _writer(res: RunResult, kind: str) -> str:
    """A stream kind's writer medians: without | paused -> attached (its change) -> catching up."""
    paused, attached = median(res.writer_paused[kind]), median(res.writer_idle[kind])
    return (
        f"{kind} {_ms(median(res.writer_without[kind]))} | {_ms(paused)} -> {_ms(attached)} "
        f"({_change(attached, paused)}) -> {_ms(median(res.writer_with[kind]))}"
    )


#: issue 14: writer transactions with incview attached within 10% of without
WRITER_CEILING = 1.10


def _writer_target(res: RunResult) -> str:
    """Issue 14's writer target, judged on the paired figures: attached against paused."""
    changes = {
        k: a / p
        for k in KINDS
        if (a := median(res.writer_idle[k])) and (p := median(res.writer_paused[k]))
    }
    if not changes:
        return ""
    kind = max(changes, key=changes.__getitem__)
    verdict = "holds" if changes[kind] <= WRITER_CEILING else "MISSES"
    return (
        f"Attached against paused, worst {kind} {_change(changes[kind], 1.0)}: target "
        f"within {(WRITER_CEILING - 1) * 100:.0f}% {verdict}."
    )


def _target(vr: ViewResult) -> str:
    """Issue 14's per-view targets: the worse of RF1/RF2 REFRESH / apply, population / CTAS."""
    if vr.error or not vr.apply_s["RF1"]:
        return ""
    goal = APPLY_TARGETS.get(vr.view.label, APPLY_FLOOR)
    worst = min(
        (median(vr.refresh_s[k]) or 0) / (median(vr.apply_s[k]) or float("inf"))
        for k in ("RF1", "RF2")
    )
    said = [f"apply {'holds' if worst >= goal else 'MISSES'} (>= {goal:g}x: {worst:.1f}x)"]
    if vr.populate_s and vr.ctas_s:
        ceiling = POPULATION_TARGETS.get(vr.view.label, POPULATION_CEILING)
        ratio = vr.populate_s / vr.ctas_s
        said.append(f"population {'holds' if ratio <= ceiling else 'MISSES'} (<= {ceiling:g}x)")
    return "; ".join(said)


def markdown(res: RunResult) -> str:
    lines = [
        f"## TPC-H SF {res.sf:g}, runner `{res.runner}`",
        "",
        f"Data: {res.generator}, {res.table_rows.get('orders', 0):,} orders, "
        f"{res.table_rows.get('lineitem', 0):,} lineitems (loaded in {res.load_s:.1f} s). "
        "Stream sizes (rows changed, median): "
        + ", ".join(f"{k} {statistics.median(v):,.0f}" for k, v in res.stream_changes.items() if v)
        + f". Medians of {len(res.all_apply_s['RF1'])} run(s) per stream.",
        "",
        "Times in ms unless marked s. *apply* = commit -> `catch_up()` returned, for the view "
        "alone (the catch_up of all views less the other views' dataflow and sink time); "
        "*REFRESH* = `REFRESH MATERIALIZED VIEW` on the same data; x = REFRESH / apply.",
        "",
        "| view | populate s | CTAS s | CMV s | pop/CTAS | pop. peak RSS MB | "
        + " | ".join(f"{k} apply | {k} REFRESH | {k} x" for k in KINDS)
        + " | rows | state MB | equal | target |",
        "|---" * (10 + 3 * len(KINDS)) + "|",
    ]
    live = [vr for vr in res.views if not vr.error]
    for vr in res.views:
        if vr.error:
            error = (vr.error.splitlines() or [""])[0][:100]
            cells = [vr.view.label, f"refused: {error}", _s(vr.ctas_s), _s(vr.cmv_s), "", ""]
            for k in KINDS:
                cells += ["-", _ms(median(vr.refresh_s[k])), ""]
            cells += ["", "", "", ""]
            lines.append("| " + " | ".join(cells) + " |")
            continue
        cells = [
            vr.view.label,
            _s(vr.populate_s),
            _s(vr.ctas_s),
            _s(vr.cmv_s),
            _ratio(vr.populate_s, vr.ctas_s),
            f"{vr.populate_peak_mb:,.0f}" if vr.populate_peak_mb else "-",
        ]
        for k in KINDS:
            a, r = median(vr.apply_s[k]), median(vr.refresh_s[k])
            cells += [_ms(a), _ms(r), _ratio(r, a)]
        cells += [
            f"{vr.rows:,}" if vr.rows is not None else "-",
            f"{(vr.state_bytes or 0) / 2**20:.1f}",
            "yes" if vr.equal else f"NO ({vr.diff})",
            _target(vr),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    all_refresh = {
        k: [sum(x) for x in zip(*(vr.refresh_s[k] for vr in live), strict=True)] for k in KINDS
    }
    # the views incview maintains: refused views are left out of the sums
    cells = ["**all views**", _s(sum(v.populate_s or 0 for v in live))]
    cells += [_s(sum(v.ctas_s or 0 for v in live)), _s(sum(v.cmv_s or 0 for v in live))]
    cells.append(_ratio(sum(v.populate_s or 0 for v in res.views if not v.error),
                        sum(v.ctas_s or 0 for v in res.views if not v.error)))  # fmt: skip
    cells.append("")
    for k in KINDS:
        a, r = median(res.all_apply_s[k]), median(all_refresh[k])
        cells += [_ms(a), _ms(r), _ratio(r, a)]
    pop = sum(v.populate_s or 0 for v in live)
    ctas = sum(v.ctas_s or 0 for v in live)
    goal = (
        f"population {'holds' if pop <= ALL_POPULATION_CEILING * ctas else 'MISSES'} "
        f"(<= {ALL_POPULATION_CEILING:g}x)"
        if ctas
        else ""
    )
    cells += ["", f"{res.state_bytes / 2**20:.1f}", "yes" if res.all_equal else "NO", goal]
    lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Where the time went in the median catch_up of all views (ms):", ""]
    lines += [f"- {k}: {b}" for k, b in res.breakdowns.items()]
    rate = res.sustained_changes / res.sustained_s if res.sustained_s else 0
    lines += [
        "",
        f"- Sustained: {res.sustained_changes:,} changes (RF1+RF2+UF streams back to back from "
        f"a writer process, committed in {res.writer_s:.1f} s) all applied {res.sustained_s:.1f} s "
        f"after the first commit: **{rate:,.0f} changes/s** with {len(res.views) - len(res.refused)} "
        "views attached.",
        "- Writer transaction, median ms without incview (no slot, before the populations) | "
        "incview attached and paused (the slot there, the engine not applying) -> attached, the "
        "engine caught up before each transaction (paired rounds, their order alternating; one "
        "stream at a time from the bench process, no REFRESH between, after the server and the "
        "engine settled: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in res.settle_s.items())
        + ", and a checkpoint) -> attached while the engine catches up (the sustained run's "
        "writer process; 2 cores shared): "
        + ", ".join(_writer(res, k) for k in KINDS)
        + f". {_writer_target(res)}",
        f"- Peak RSS: engine process {res.peak_mb.get('engine', 0):,.0f} MB"
        + (
            f" (sampled: its own, anonymous memory at most {res.peak_mb['engine_anon']:,.0f} MB; "
            f"pages of mapped files, its libraries and the state's tables read through a memory "
            f"map, i.e. page cache, at most {res.peak_mb['engine_files']:,.0f} MB)"
            if res.peak_mb.get("engine_anon")
            else ""
        )
        + (
            f", Spark JVM {res.peak_mb.get('jvm', 0):,.0f} MB, other child processes "
            f"{res.peak_mb.get('workers', 0):,.0f} MB (together "
            f"{sum(res.peak_mb.get(k, 0) for k in ('engine', 'jvm', 'workers')):,.0f} MB)"
            if res.runner == "spark"
            else ""
        )
        + (
            f"; the engine's memory budget for the views' state: {res.memory_mb:,} MB"
            if res.memory_mb
            else "; no memory budget (each view's state keeps caches of its own)"
        )
        + f". State on disk: {res.state_bytes / 2**20:,.1f} MB"
        + (
            f" = {res.state_bytes / res.source_bytes:.2f}x the source tables' "
            f"{res.source_bytes / 2**20:,.1f} MB in Postgres (heap, TOAST, indexes); target "
            f"<= 2x {'holds' if res.state_bytes <= 2 * res.source_bytes else 'MISSES'}."
            if res.source_bytes
            else "."
        ),
    ]
    if res.runner == "spark":
        lines.append(
            f"- SparkSession start: {res.spark_start_s:.1f} s, once per engine before the first "
            "population (not in any view's populate time); the streaming query's start and "
            f"first batch (a no-op UPDATE): {res.spark_first_batch_s:.1f} s, before the streams."
        )
    if res.refused:
        lines += ["", "Refused by the engine:", ""]
        lines += [f"- {v.view.label}: `{v.error}`" for v in res.refused]
    return "\n".join(lines) + "\n"


def scaling_markdown(rows: list[dict]) -> str:
    lines = [
        "## Scaling: fixed stream (1,500 orders with lineitems in, 1,500 out), all views",
        "",
        "| SF | lineitems | RF1 apply ms | RF2 apply ms | apply / SF-first | REFRESH all ms "
        "(per stream) | REFRESH / apply | settled s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = None
    for r in rows:
        apply = (r["rf1_apply"] + r["rf2_apply"]) / 2
        base = base or apply
        lines.append(
            f"| {r['sf']:g} | {r['lineitems']:,} | {_ms(r['rf1_apply'])} | {_ms(r['rf2_apply'])} "
            f"| {apply / base:.2f}x | {_ms(r['refresh'])} | {r['refresh'] / apply:.1f}x "
            f"| {r['settle_s']:.0f} |"
        )
    lines += [
        "",
        "Medians of the streams after the populations settled (*settled s*: the wait for the "
        "engine's background compactions and Postgres' autovacuum to end, then a checkpoint).",
        "",
        "Per view, apply alone (RF1/RF2 mean) and REFRESH, ms:",
        "",
    ]
    labels = list(rows[0]["per_view"]) if rows else []
    lines.append("| SF | " + " | ".join(labels) + " |")
    lines.append("|---" * (1 + len(labels)) + "|")
    for r in rows:
        cells = [f"{r['sf']:g}"] + [
            f"{_ms(a)} / {_ms(b)}" for a, b in (r["per_view"][x] for x in labels)
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def chart(res: RunResult, path: Path) -> Path | None:
    """Per view: apply (RF1, RF2, UF) vs REFRESH, log scale. None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    live = [v for v in res.views if not v.error]
    labels = [v.view.label for v in live]
    series = [(f"incview {k}", [median(v.apply_s[k]) for v in live]) for k in KINDS]
    series.append(
        ("REFRESH MATERIALIZED VIEW", [median(sum(v.refresh_s.values(), [])) for v in live])
    )
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, [(v or 0) * 1000 for v in values], width, label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log scale)")
    ax.set_title(f"TPC-H SF {res.sf:g}, runner {res.runner}: applying a refresh stream vs REFRESH")
    ax.legend()
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
