"""``incview run`` as a child process for the fault tests: started, logged, always stopped."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def incview_cli(
    dsn: str,
    state: Path,
    log: Path,
    *args: str,
    runner: str = "local",
    prefix: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """``python -m engine.cli ... <args>`` started with its output in ``log`` (the caller waits
    for it or kills it); ``prefix`` is put before the command (e.g. ``ip netns exec NS``), ``env``
    adds to its environment."""
    with open(log, "a") as out:
        return subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "engine.cli",
                "--dsn",
                dsn,
                "--state-dir",
                str(state),
                "--runner",
                runner,
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        )


@contextlib.contextmanager
def incview_run(dsn: str, state: Path, log: Path, **options) -> Iterator[subprocess.Popen]:
    """``python -m engine.cli ... run`` with its output in ``log`` (``options``: those of
    ``incview_cli``); killed on exit if alive."""
    log.write_text("")
    proc = incview_cli(dsn, state, log, "run", **options)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
