"""``incview run`` as a child process for the fault tests: started, logged, always stopped."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def incview_run(
    dsn: str, state: Path, log: Path, runner: str = "local"
) -> Iterator[subprocess.Popen]:
    """``python -m engine.cli ... run`` with its output in ``log``; killed on exit if alive."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engine.cli",
                "--dsn",
                dsn,
                "--state-dir",
                str(state),
                "--runner",
                runner,
                "run",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
