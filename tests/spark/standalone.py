"""Spark's own standalone cluster on loopback for tests: a master and a worker started from the
pyspark installation's ``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and
``...worker.Worker``), each in its own process group so that killing a worker takes its
executors and their Python workers with it, as losing a machine would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark

from engine.postgres.embedded import free_port
from engine.spark.session import find_java_home

ROOT = Path(__file__).resolve().parents[2]


class StandaloneCluster:
    """A master on 127.0.0.1 and workers started and killed on demand; logs under ``work``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.work.mkdir(parents=True, exist_ok=True)
        self.spark_home = Path(pyspark.__file__).parent
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            "JAVA_HOME": str(find_java_home(work)),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(work / "logs"),
            # executors run the view's Python data sources: this interpreter and package
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": str(ROOT),
        }
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "a")  # noqa: SIM115 (the child keeps it open)
        try:
            return subprocess.Popen(
                [str(self.spark_home / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        finally:
            log.close()

    def start(self) -> StandaloneCluster:
        self.master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self._wait(lambda: self.status() is not None, "the master to answer")
        return self

    def start_worker(self, cores: int = 2, memory: str = "2g") -> None:
        """Start a worker and wait until the master lists it ALIVE."""
        before = self.alive_workers()
        n = len(self.workers)
        self.workers.append(
            self._start(
                f"worker{n}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(self.work / f"worker{n}"),
                "--webui-port",
                str(free_port()),
                self.url,
            )
        )
        self._wait(lambda: len(self.alive_workers()) > len(before), "the worker to register")

    def kill_worker(self) -> None:
        """SIGKILL the newest worker with its executors and their Python processes."""
        proc = self.workers[-1]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self._wait(lambda: not self.alive_workers(), "the master to drop the killed worker")

    def status(self) -> dict | None:
        """The master's JSON status (workers, active and completed applications)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def alive_workers(self) -> list[dict]:
        status = self.status() or {}
        return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]

    def apps(self) -> list[dict]:
        """Every application the master ran or runs."""
        status = self.status() or {}
        return status.get("activeapps", []) + status.get("completedapps", [])

    def log_tail(self, chars: int = 4000) -> str:
        logs = sorted(self.work.rglob("*.log")) + sorted(self.work.rglob("stderr"))
        return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-chars:]}" for p in logs)

    def _wait(self, ready, what: str, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"the Spark master exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s} s for {what}:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
