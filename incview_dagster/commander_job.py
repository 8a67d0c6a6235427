"""The commander's long-lived process under Dagster: answers ``CALL incview.create_view``.

Under Dagster each view runs in its own streaming job (``incview_dagster.jobs``), so no process
runs every view and ``incview run``'s commander has no home. This process is that home: an
``Engine`` that opens no view (``views=[]``) and runs only the commander (``engine.commander``).
Each view it creates is populated here, released, and handed to its own streaming job, which the
supervisor sensor then watches like any other once the code location loads it
(``incremental_views(..., include_database_views=True)``); a view is taken from its job before it
is dropped. Both happen under the view's launcher lock, the one population and recovery runs
take. The supervisor sensor keeps this process alive (job ``incview_commander``).

Run as ``python -m incview_dagster.commander_job --state-dir DIR --runner local|spark``, with the
DSN in ``INCVIEW_DSN`` and Spark settings in ``INCVIEW_SPARK_CONF`` (``StreamingJobLauncher``
does that). Stops cleanly on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from engine import Engine
from incview_dagster.jobs import StreamingJobLauncher

log = logging.getLogger(__name__)


class LauncherHandoff:
    """``engine.commander.ViewHandoff`` to the views' streaming jobs."""

    def __init__(self, launcher: StreamingJobLauncher, stop_timeout_s: float = 90.0) -> None:
        self.launcher = launcher
        self.stop_timeout_s = stop_timeout_s

    @contextmanager
    def holding(self, name: str) -> Iterator[None]:
        with self.launcher.lock(name):
            yield

    def take_over(self, name: str) -> None:
        job = self.launcher.start(name)
        log.info("view %s: its streaming job runs it (pid %s)", name, job.pid)

    def give_back(self, name: str) -> None:
        if self.launcher.stop(name, self.stop_timeout_s):
            log.info("view %s: stopped its streaming job", name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m incview_dagster.commander_job",
        description="Answer CALL incview.create_view/drop_view/explain; each view created runs "
        "in its own streaming job.",
    )
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--runner", choices=("local", "spark"), default="spark")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    dsn = os.environ.get("INCVIEW_DSN") or None
    spark_conf = json.loads(os.environ.get("INCVIEW_SPARK_CONF") or "{}")
    launcher = StreamingJobLauncher(args.state_dir, dsn, args.runner, spark_conf)
    with Engine(dsn, args.state_dir, runner=args.runner, views=[], spark_conf=spark_conf) as eng:
        print("answering CALL incview.create_view(...); Ctrl-C stops", flush=True)
        eng.run([], commands=LauncherHandoff(launcher))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
