"""``encode_key`` of many rows at once, built from their Arrow columns.

The row join's arrangement (``state.arrangement``) files each row of a hot side under
``encode_key(row)``: the ``repr`` of the row with its numbers normalized (1.50 -> Decimal('1.5'),
2.00 -> 2). ``HotKeys.promote`` loads whole sides at once (TPC-H Q10 at SF 1: 150,000 customers
under 25 nation keys while the view is populated), where ``encode_key`` one row at a time cost
~4 us a row, most of it normalizing Decimals. ``encoded_keys`` gives the same bytes column by
column with Arrow's string kernels for integers, booleans, dates, decimal128 up to 28 digits with
at most 6 decimals, and text that ``repr`` quotes without escapes (printable ASCII); every other
value is ``repr``'d in Python as ``encode_key`` does (floats, timestamps, intervals, other text,
numeric NaN). ``tests/dataflow/columnar/test_key_reprs.py`` checks the bytes against
``encode_key`` over random values of every type.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar.arrow_types import to_python
from engine.dataflow.nan import NUMERIC_NAN
from engine.dataflow.state.keycodec import normalize_key

#: printable ASCII without ``'`` and ``\``: ``repr`` puts such text in single quotes as it is
_PLAIN_SINGLE = r"^[\x20-\x26\x28-\x5b\x5d-\x7e]*$"
#: printable ASCII with a ``'`` but no ``"`` or ``\``: ``repr`` puts it in double quotes as it is
_PLAIN_DOUBLE = r"^[\x20-\x21\x23-\x5b\x5d-\x7e]*$"
#: decimals with at most this many digits normalize exactly (the default context's precision)
_MAX_DIGITS = 28
#: ... and with at most this many decimals print without an exponent once normalized
_MAX_SCALE = 6


def encoded_keys(columns: Sequence[pa.Array], nans: dict[int, np.ndarray]) -> list[bytes]:
    """``[encode_key(row) for row in python_rows(columns, nans)]`` (at least one column):
    ``nans[i]`` marks the rows whose column i holds a numeric NaN (NULL in the Arrow column)."""
    if not columns:
        raise ValueError("encoded_keys needs the rows' columns (rows of no column have no count)")
    parts = [_reprs(col, nans.get(i)) for i, col in enumerate(columns)]
    closing = ",)" if len(parts) == 1 else ")"
    joined = pc.binary_join_element_wise("(", *_separated(parts), closing, "")
    return joined.cast(pa.binary()).to_pylist()


def _separated(parts: list[pa.Array]) -> list[pa.Array | str]:
    out: list[pa.Array | str] = []
    for i, p in enumerate(parts):
        if i:
            out.append(", ")
        out.append(p)
    return out


def _reprs(col: pa.Array, nan: np.ndarray | None) -> pa.Array:
    """Each value's ``repr`` as ``encode_key`` writes it (a string array without NULLs)."""
    t = col.type
    text: pa.Array | None = None
    if pa.types.is_integer(t):
        text = pc.cast(col, pa.string())
    elif pa.types.is_boolean(t):
        text = pc.if_else(col, "True", "False")
    elif pa.types.is_date32(t):
        text = pc.binary_join_element_wise(
            "datetime.date(",
            pc.cast(pc.year(col), pa.string()),
            ", ",
            pc.cast(pc.month(col), pa.string()),
            ", ",
            pc.cast(pc.day(col), pa.string()),
            ")",
            "",
        )
    elif pa.types.is_decimal(t) and t.precision <= _MAX_DIGITS and 0 <= t.scale <= _MAX_SCALE:
        text = _decimal_reprs(col, t.scale)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        return _text_reprs(col)
    if text is None:
        return _python_reprs(to_python(col), nan)
    text = pc.fill_null(text, "None")
    if nan is not None and nan.any():
        values = text.to_pylist()
        for j in np.flatnonzero(nan).tolist():
            values[j] = _repr(NUMERIC_NAN)
        text = pa.array(values, pa.string())
    return text


def _decimal_reprs(col: pa.Array, scale: int) -> pa.Array:
    """A Decimal is normalized: a whole value becomes an int (``2.00`` -> ``2``), another loses
    its trailing zeros (``1.50`` -> ``Decimal('1.5')``). Arrow prints a zero as ``0.00``, never
    ``-0.00`` (decimal128 holds two's complement integers)."""
    digits = pc.cast(col, pa.string())
    if scale == 0:
        return digits
    trimmed = pc.replace_substring_regex(digits, r"\.?0+$", "")
    whole = pc.invert(pc.match_substring(trimmed, "."))
    as_decimal = pc.binary_join_element_wise("Decimal('", trimmed, "')", "")
    return pc.if_else(whole, trimmed, as_decimal)


def _text_reprs(col: pa.Array) -> pa.Array:
    """Quoted as ``repr`` quotes; text with escapes or outside printable ASCII in Python."""
    if not _has_unusual_bytes(col):  # the common case: printable ASCII without ' or \\
        return pc.fill_null(pc.binary_join_element_wise("'", col, "'", ""), "None")
    single = pc.binary_join_element_wise("'", col, "'", "")
    double = pc.binary_join_element_wise('"', col, '"', "")
    plain = pc.fill_null(pc.match_substring_regex(col, _PLAIN_SINGLE), False)
    quoted = pc.fill_null(pc.match_substring_regex(col, _PLAIN_DOUBLE), False)
    text = pc.if_else(plain, single, pc.if_else(quoted, double, pa.scalar(None, pa.string())))
    rest = pc.and_(pc.is_null(text), pc.is_valid(col))
    if pc.any(rest).as_py():
        values = text.to_pylist()
        originals = col.to_pylist()
        for j in np.flatnonzero(np.asarray(rest)).tolist():
            values[j] = repr(originals[j])
        text = pa.array(values, pa.string())
    return pc.fill_null(text, "None")


def _has_unusual_bytes(col: pa.Array) -> bool:
    """Whether any byte of the column's text is outside printable ASCII or a ``'`` or ``\\``."""
    offsets = np.frombuffer(
        col.buffers()[1], np.int32 if pa.types.is_string(col.type) else np.int64
    )
    offsets = offsets[col.offset : col.offset + len(col) + 1]
    data = col.buffers()[2]
    if data is None or offsets[-1] == offsets[0]:
        return False
    b = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]]
    return bool(((b < 0x20) | (b > 0x7E) | (b == 0x27) | (b == 0x5C)).any())


def _repr(v: object) -> str:
    return repr(normalize_key((v,))[0])


def _python_reprs(values: list, nan: np.ndarray | None) -> pa.Array:
    if nan is not None:
        for j in np.flatnonzero(nan).tolist():
            values[j] = NUMERIC_NAN
    return pa.array([_repr(v) for v in values], pa.string())
