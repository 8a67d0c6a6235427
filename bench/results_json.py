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


def target(figure: float, at_least: float, what: str) -> dict:
    """One "at least" target judged on ``figure`` (``what``: the figure's name in the file).

    >>> target(1.5e6, 1e6, "decode_rows_per_s")
    {'figure': 'decode_rows_per_s', 'at_least': 1000000.0, 'measured': 1500000.0, 'met': True}
    """
    return {"figure": what, "at_least": at_least, "measured": figure, "met": figure >= at_least}


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
