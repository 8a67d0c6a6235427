"""Test harness shipped with the engine: drive collections with diffs and check them.

* ``ZSetSink``: accumulates a stream of output diffs into the current multiset and refuses a
  negative multiplicity (a sign of a wrong retraction).
* ``RandomTable``: a random writer for one input: inserts (with NULLs and duplicate rows from
  a user row factory), deletes of rows that exist, updates as delete + insert; like a table.
* ``OracleRun``: feeds random changes to a dataflow time after time and, after every TimeEnd,
  compares the accumulated output with a from-scratch recomputation of the operator over the
  accumulated inputs. With ``reopen_every`` it closes the state store and rebuilds the dataflow
  from disk between times, proving that state survives a restart.
* ``SideBySide``: the same inputs through two implementations of a collection (the row one and
  a columnar one), each in its own dataflow and state directory, reopened from disk on demand.

No pytest here: tests import these and assert.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.dataflow.batch import DiffBatch, Row
from engine.dataflow.graph import Dataflow, Node, TimeOutput
from engine.dataflow.state.store import StateStore


class ZSetSink:
    """The multiset an output stream describes, kept up to date diff by diff."""

    def __init__(self) -> None:
        self.rows: dict[Row, int] = {}

    def apply(self, batch: DiffBatch) -> None:
        for r, w in batch:
            n = self.rows.get(r, 0) + w
            if n < 0:
                raise AssertionError(f"row {r!r} would have multiplicity {n}")
            if n:
                self.rows[r] = n
            else:
                self.rows.pop(r, None)

    def counter(self) -> Counter:
        return Counter(self.rows)


class RandomTable:
    """A random writer for one input; ``step()`` returns the diffs of one transaction."""

    def __init__(
        self,
        make_row: Callable[[random.Random], Row],
        rng: random.Random,
        max_changes: int = 8,
        delete_ratio: float = 0.4,
    ) -> None:
        self.make_row = make_row
        self.rng = rng
        self.max_changes = max_changes
        self.delete_ratio = delete_ratio
        self.rows: list[Row] = []

    def step(self) -> DiffBatch:
        out = DiffBatch()
        for _ in range(self.rng.randint(0, self.max_changes)):
            if self.rows and self.rng.random() < self.delete_ratio:
                r = self.rows.pop(self.rng.randrange(len(self.rows)))
                out.rows.append(r)
                out.weights.append(-1)
            else:
                if self.rows and self.rng.random() < 0.15:
                    r = self.rng.choice(self.rows)  # exact duplicate row
                else:
                    r = self.make_row(self.rng)
                self.rows.append(r)
                out.rows.append(r)
                out.weights.append(1)
        return out


def pick(rng: random.Random, values: Sequence, null_ratio: float = 0.15):
    """A random element of ``values`` or None (SQL NULL) with probability ``null_ratio``."""
    return None if rng.random() < null_ratio else rng.choice(values)


BuildFn = Callable[[Dataflow, list[Node]], Node]


@dataclass
class OracleRun:
    """Randomized check: incremental output == ``reference`` recomputed from scratch.

    ``build(dataflow, inputs) -> output node`` wires the collection(s) under test;
    ``reference(list_of_input_row_lists) -> list of output rows`` is the from-scratch semantics.
    ``compare`` maps each output row before comparing (e.g. rounding floats).
    """

    build: BuildFn
    reference: Callable[[list[list[Row]]], list[Row]]
    tables: list[RandomTable]
    state_dir: Path
    reopen_every: int = 0
    compare: Callable[[Row], Row] = lambda r: r
    outputs: list[TimeOutput] = field(default_factory=list)

    def _open(self) -> tuple[StateStore, Dataflow]:
        store = StateStore(self.state_dir)
        df = Dataflow(store)
        inputs = [df.input(f"in{i}") for i in range(len(self.tables))]
        df.build(self.build(df, inputs))
        return store, df

    def run(self, times: int) -> int:
        """Run ``times`` transactions; returns how many diffs were fed. Raises AssertionError."""
        store, df = self._open()
        sink = ZSetSink()
        fed = 0
        try:
            for t in range(1, times + 1):
                for i, table in enumerate(self.tables):
                    batch = table.step()
                    fed += len(batch)
                    df.push(f"in{i}", batch)
                out = df.time_end(t)
                df.commit(t)
                self.outputs.append(out)
                sink.apply(out.diffs)
                expected = Counter(
                    map(self.compare, self.reference([list(tb.rows) for tb in self.tables]))
                )
                got = Counter({self.compare(r): n for r, n in sink.rows.items()})
                if got != expected:
                    missing = expected - got
                    extra = got - expected
                    raise AssertionError(
                        f"after time {t}: missing {dict(list(missing.items())[:5])}, "
                        f"extra {dict(list(extra.items())[:5])}\n"
                        f"inputs: {[tb.rows[:20] for tb in self.tables]}"
                    )
                if self.reopen_every and t % self.reopen_every == 0:
                    store.close()
                    store, df = self._open()
                    assert store.committed_time == t
        finally:
            store.close()
        return fed


def run_once(build: BuildFn, batches: list[list[DiffBatch]], state_dir: Path) -> list[TimeOutput]:
    """Feed ``batches[t][i]`` to input i at time t+1; returns every time's output."""
    store = StateStore(state_dir)
    try:
        df = Dataflow(store)
        n = len(batches[0]) if batches else 0
        inputs = [df.input(f"in{i}") for i in range(n)]
        df.build(build(df, inputs))
        outs = []
        for t, per_input in enumerate(batches, start=1):
            for i, b in enumerate(per_input):
                df.push(f"in{i}", b)
            outs.append(df.time_end(t))
            df.commit(t)
        return outs
    finally:
        store.close()


class SideBySide:
    """One dataflow per kind (e.g. "row", "col"), each on ``root / kind``; ``build(kind, df)``
    adds that kind's collection and inputs. Use as a context manager: the stores close at exit."""

    def __init__(self, root: Path, build: Callable[[str, Dataflow], None], kinds=("row", "col")):
        self.root, self.build, self.kinds = root, build, tuple(kinds)
        self.stores: dict[str, StateStore] = {}
        self.flows: dict[str, Dataflow] = {}
        for kind in self.kinds:
            self._open(kind)

    def _open(self, kind: str) -> None:
        store = StateStore(self.root / kind)
        df = Dataflow(store)
        self.build(kind, df)
        self.stores[kind], self.flows[kind] = store, df

    def reopen(self) -> None:
        """Close every store and rebuild every dataflow from its state on disk."""
        for kind in self.kinds:
            self.stores[kind].close()
            self._open(kind)

    def reopen_every(self, t: int, n: int) -> None:
        if n and t % n == 0:
            self.reopen()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()

    def __enter__(self) -> SideBySide:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
