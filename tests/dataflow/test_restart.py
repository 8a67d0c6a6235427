"""Kill -9 and reopen: a view's state directory resumes exactly where its commits say.

A child process drives join -> reduce with the production commit order (sink first, then state)
and SIGKILLs itself at a chosen point: mid-time, after the sink wrote a time but before the state
commit, or right after a commit. The parent reopens the state directory, replays from the
state's committed time (the sink skips times it already holds, as the Postgres sink does by
LSN), and the sink's content must equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.dataflow.aggregates import Aggregate
from engine.dataflow.batch import DiffBatch
from engine.dataflow.collections.join import InnerJoinCollection
from engine.dataflow.collections.reduce import ReduceCollection
from engine.dataflow.graph import Dataflow
from engine.dataflow.state.store import StateStore

TIMES = 40


def changes(t: int) -> dict[str, DiffBatch]:
    """The deterministic source transactions of time t (a replayable change log)."""
    rng = random.Random(t)
    orders = DiffBatch()
    for _ in range(rng.randint(1, 6)):
        o = (rng.randrange(30), rng.randrange(8), rng.randrange(100))
        orders.rows.append(o)
        orders.weights.append(1)
    if t > 3:  # delete what an earlier time inserted
        prev = changes(t - 3)["orders"]
        orders.rows.append(prev.rows[0])
        orders.weights.append(-1)
    customers = DiffBatch.inserts([(t % 8, f"c{t}")]) if t <= 8 else DiffBatch()
    return {"orders": orders, "customers": customers}


def build(store: StateStore) -> Dataflow:
    df = Dataflow(store)
    joined = df.add(InnerJoinCollection([1], [0]), df.input("orders"), df.input("customers"))
    totals = df.add(ReduceCollection([4], [Aggregate("sum", 2), Aggregate("count_star")]), joined)
    return df.build(totals)


class FileSink:
    """Durable sink keyed by time, like the Postgres sink keyed by LSN: replays are no-ops."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.times = set()
        if path.exists():
            for line in path.read_text().splitlines():
                self.times.add(json.loads(line)["t"])

    def write(self, t: int, out: DiffBatch) -> None:
        if t in self.times:
            return
        with self.path.open("a") as f:
            f.write(json.dumps({"t": t, "rows": [[list(r), w] for r, w in out]}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.times.add(t)

    def content(self) -> dict:
        acc: dict = {}
        for line in self.path.read_text().splitlines():
            for r, w in json.loads(line)["rows"]:
                acc[tuple(r)] = acc.get(tuple(r), 0) + w
        return {r: w for r, w in acc.items() if w}


def drive(
    state_dir: Path, sink_path: Path, kill_at: int | None = None, kill_point: str = ""
) -> None:
    sink = FileSink(sink_path)
    with StateStore(state_dir) as store:
        df = build(store)
        start = (store.committed_time or 0) + 1
        for t in range(start, TIMES + 1):
            for name, batch in changes(t).items():
                df.push(name, batch)
                if t == kill_at and kill_point == "mid-time":
                    os.kill(os.getpid(), signal.SIGKILL)
            out = df.time_end(t)
            sink.write(t, out.diffs)
            if t == kill_at and kill_point == "after-sink":
                os.kill(os.getpid(), signal.SIGKILL)
            df.commit(t)
            if t == kill_at and kill_point == "after-commit":
                os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("kill_point", ["mid-time", "after-sink", "after-commit"])
def test_sigkill_and_reopen_equals_uninterrupted_run(tmp_path, kill_point):
    drive(tmp_path / "ref_state", tmp_path / "ref_sink")
    expected = FileSink(tmp_path / "ref_sink").content()
    assert expected  # the pipeline produces something to compare

    for kill_at in (7, 23):
        state, sink = tmp_path / f"state{kill_at}", tmp_path / f"sink{kill_at}"
        repo = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
        child = subprocess.run(
            [sys.executable, __file__, str(state), str(sink), str(kill_at), kill_point],
            capture_output=True,
            text=True,
            env=env,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr
        with StateStore(state) as store:
            committed = store.committed_time
        assert committed == (kill_at if kill_point == "after-commit" else kill_at - 1)
        drive(state, sink)  # restart: replay from the committed time
        assert FileSink(sink).content() == expected


if __name__ == "__main__":
    drive(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
