"""The nodes of a vectorized expression: a function of one batch's input columns, and its type.

``Inputs`` reads each input column of a batch once, as the kind the expressions expect
(``vectors.from_arrow``; ``NeedsRows`` for an Arrow type that does not hold it); a ``VNode`` is
``run(inputs) -> Vec`` and the SQL type of the values. This module must not compile anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.dataflow.columnar.vectors import Kind, Vec, from_arrow
from engine.sql.types import SqlType
from engine.sql.vector_casts import kind_of


class Inputs:
    """One batch's input columns, each read once as the kind the expressions expect."""

    def __init__(self, columns: list, n: int, kinds: dict[int, Kind]) -> None:
        self.columns = columns
        self.n = n
        self.kinds = kinds
        self._vecs: dict[int, Vec] = {}

    def column(self, i: int) -> Vec:
        v = self._vecs.get(i)
        if v is None:
            v = self._vecs[i] = from_arrow(self.columns[i], self.kinds[i])
        return v


@dataclass(frozen=True)
class VNode:
    run: Callable[[Inputs], Vec]
    type: SqlType

    @property
    def kind(self) -> Kind | None:
        return kind_of(self.type)
