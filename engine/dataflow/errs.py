"""Scalar evaluation errors as data (Materialize's errs stream, seed 002).

``evaluate`` runs a compiled batch function over a batch's rows. The fast path is one call over
the whole list; if it raises, the batch is re-run row by row and each failing row becomes an
error diff ``(message,)`` carrying that row's weight, so that deleting the row later retracts the
error. ``EvalError`` is what compiled SQL expressions raise with a Postgres-like message; other
arithmetic exceptions are translated.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from typing import Any

from engine.dataflow.batch import DiffBatch, Row


class EvalError(Exception):
    """A SQL runtime error (division by zero, invalid cast...) raised by a compiled expression."""


_KNOWN = (EvalError, ZeroDivisionError, ArithmeticError, decimal.InvalidOperation, ValueError)


def error_message(exc: BaseException) -> str:
    if isinstance(exc, EvalError):
        return str(exc)
    if isinstance(exc, (ZeroDivisionError, decimal.DivisionByZero)):
        return "division by zero"
    if isinstance(exc, OverflowError):
        return "value out of range"
    return f"{type(exc).__name__}: {exc}"


BatchFn = Callable[[list[Row]], list[Any]]


def evaluate(fn: BatchFn, batch: DiffBatch) -> tuple[list[Any], DiffBatch, DiffBatch]:
    """Apply ``fn`` to ``batch.rows``; returns (results, the input diffs that evaluated, error diffs).

    ``results[i]`` belongs to the i-th diff of the second value; failing rows are left out of both.
    """
    try:
        return fn(batch.rows), batch, DiffBatch()
    except _KNOWN:
        pass
    results: list[Any] = []
    ok = DiffBatch()
    errs = DiffBatch()
    for row, w in zip(batch.rows, batch.weights, strict=True):
        try:
            (value,) = fn([row])
        except _KNOWN as e:
            errs.rows.append((error_message(e),))
            errs.weights.append(w)
            continue
        results.append(value)
        ok.rows.append(row)
        ok.weights.append(w)
    return results, ok, errs
