"""A bench's figures as JSON under ``bench/results/``: the file a target is tracked by.

Every bench that measures a target takes ``--json`` (write ``bench/results/<name>.json``) or
``--json PATH`` (write there instead: tests, scratch runs) and hands its figures to ``save``,
which also prints them. ``target`` summarizes one target in the figures themselves, so that the
file says what was asked and whether this run met it, next to the figure it judged.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def add_json_option(ap: argparse.ArgumentParser, name: str) -> None:
    """``--json [PATH]``: save the figures to ``PATH`` (default ``bench/results/<name>.json``)."""
    default = RESULTS / f"{name}.json"
    ap.add_argument(
        "--json",
        nargs="?",
        const=default,
        type=Path,
        metavar="PATH",
        help=f"print the figures as JSON and write them to PATH (default {default})",
    )


def target(
    figure: float, what: str, at_least: float | None = None, at_most: float | None = None
) -> dict:
    """One target judged on ``figure`` (``what``: the figure's name in the file): at least
    ``at_least`` and/or at most ``at_most``.

    >>> target(1.5e6, "decode_rows_per_s", at_least=1e6)
    {'figure': 'decode_rows_per_s', 'measured': 1500000.0, 'at_least': 1000000.0, 'met': True}
    >>> target(320, "lag_p50_ms", at_most=300)["met"]
    False
    """
    out: dict = {"figure": what, "measured": figure}
    met = True
    if at_least is not None:
        out["at_least"] = at_least
        met = met and figure >= at_least
    if at_most is not None:
        out["at_most"] = at_most
        met = met and figure <= at_most
    out["met"] = met
    return out


def save(path: Path, figures: dict, merge: bool = False) -> Path:
    """Write ``figures`` to ``path`` as indented JSON with sorted keys and print the same text;
    with ``merge``, the keys measured here replace theirs in the file's current contents (a bench
    run for part of its figures)."""
    if merge and path.exists():
        figures = {**json.loads(path.read_text()), **figures}
    text = json.dumps(figures, indent=2, sort_keys=True, default=str) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text, end="")
    return path
