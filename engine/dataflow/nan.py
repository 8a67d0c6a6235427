"""One shared NaN object per type, so that rows holding NaN are equal, as they are in Postgres.

Postgres' NaN equals itself (and sorts above every number); Python's ``float('nan')`` does not,
and every parse, unpickle or arithmetic result makes a new NaN object that hashes apart from the
others. Tuples compare and hash their items by identity first, though: two rows holding THE SAME
NaN object are equal and hash alike, so dict-based consolidation (``DiffBatch.consolidate``, the
sink's per-time consolidation, a collection's ``acc`` dict) cancels ``+row(NaN)`` against
``-row(NaN)``. The rule, then: every float NaN inside the engine is ``NAN`` and every numeric NaN
is ``NUMERIC_NAN``. The places that create values keep it: the CDC value parsers, the population
COPY loader, the expression runtime's float results, aggregate and window results, and rows read
back from state (``loads``: unpickling makes new float objects). This module must not know about
SQL, plans or state layouts; it only hands out the objects and canonicalizes values.

>>> row = (1, float("nan"))
>>> row == (1, float("nan"))
False
>>> canonical_row(row) == canonical_row((1, float("nan")))
True
"""

from __future__ import annotations

import math
import pickle
from decimal import Decimal
from typing import Any

#: the one float NaN of the engine (Postgres' 'NaN'::float8 and 'NaN'::real)
NAN: float = math.nan
#: the one numeric NaN of the engine (Postgres' 'NaN'::numeric)
NUMERIC_NAN: Decimal = Decimal("NaN")

_loads = pickle.loads
# How a float NaN and a Decimal NaN look inside a pickle: 'G' + the big-endian double (the last
# seven bytes of both signs of the default NaN, 7ff8... and fff8...) and the Decimal's string.
_PICKLED_FLOAT_NAN = b"\xf8\x00\x00\x00\x00\x00\x00"
_PICKLED_DECIMAL_NAN = b"NaN"


def canonical_float(v: float) -> float:
    """``NAN`` for any float NaN, else ``v`` itself."""
    return NAN if v != v else v


def canonical_value(v: Any) -> Any:
    """``NAN``/``NUMERIC_NAN`` for a float/Decimal NaN, containers (tuples, lists) walked, else ``v``."""
    t = type(v)
    if t is float:
        return NAN if v != v else v
    if t is Decimal:
        return NUMERIC_NAN if v.is_nan() else v
    if t is tuple:
        return tuple(map(canonical_value, v))
    if t is list:
        return list(map(canonical_value, v))
    return v


def canonical_row(row: tuple) -> tuple:
    """``row`` with every NaN replaced by the shared object (the same tuple when it holds none)."""
    for v in row:
        if v != v:  # only NaN differs from itself among SQL values
            return tuple(map(canonical_value, row))
    return row


def may_hold_nan(raw: bytes) -> bool:
    """False when the pickle ``raw`` surely holds no float or numeric NaN (two substring
    searches; a True may be a false alarm, e.g. the text 'NaN')."""
    return _PICKLED_FLOAT_NAN in raw or _PICKLED_DECIMAL_NAN in raw


def loads(raw: bytes) -> Any:
    """``pickle.loads`` whose float and numeric NaNs (in tuples and lists) are the shared objects.

    A pickle holding no NaN is returned as loaded, so ordinary rows cost two substring searches.
    """
    obj = _loads(raw)
    if _PICKLED_FLOAT_NAN in raw or _PICKLED_DECIMAL_NAN in raw:
        return canonical_value(obj)
    return obj
