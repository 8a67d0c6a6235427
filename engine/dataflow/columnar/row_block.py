"""Blocks of rows in a fixed-width record codec: the state values of the columnar join.

A set of rows of one input (``Rows``) is a numpy array of packed records plus one Arrow string
array per text column. A record holds the row's weight, a 64-bit hash of its values (its
identity under SQL equality, verified by comparing values where two rows meet), a flag byte per
column (0 NULL, 1 a value, 2 numeric NaN) and each column's fixed-width value: int64, float64,
bool, int32 days, int64 microseconds, the unscaled integer of a numeric (int64 up to precision
18, else two int64 words), or the byte length of a text value. ``RowCodec.encode`` makes them
from Arrow columns, ``RowCodec.arrays`` gives Arrow columns back.

``pack_entries`` writes the rows of both sides of many join keys as one value per key, and
``unpack_entries`` reads many such values back, each in one pass over all of them (Arrow takes
over the joined buffer, no per-row Python, no pickle)::

    value = u32 nl | u32 nr | u32 bytes of left text | nl left records | nr right records
            | left text values | right text values          (row by row, column by column)

``pack_rows``/``unpack_rows`` do the same for one row per value (the top-k's entries). This module
must not know about keys, RocksDB or the join itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.dataflow.columnar import kernels as K

#: the bytes of a packed entry's header (a state marker beside packed entries is shorter)
ENTRY_HEADER = 12
_FLAG_SALT = np.uint64(0x9E3779B97F4A7C15)


def column_kind(t: pa.DataType) -> str | None:
    """The record codec's kind for an Arrow type, or None when it has none."""
    if pa.types.is_integer(t):
        return "i8"
    if pa.types.is_floating(t):
        return "f8"
    if pa.types.is_boolean(t):
        return "b1"
    if pa.types.is_date32(t):
        return "d4"
    if pa.types.is_timestamp(t) and t.tz is None:
        return "t8"
    if pa.types.is_decimal(t) and t.precision <= 38:
        return "n8" if t.precision <= 18 else "n16"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "s"
    return None


_FORMATS = {
    "i8": "<i8",
    "f8": "<f8",
    "b1": "u1",
    "d4": "<i4",
    "t8": "<i8",
    "n8": "<i8",
    "n16": ("<i8", (2,)),
    "s": "<u4",
}


def _take_records(rec: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``rec[idx]``, copying whole records as raw bytes (numpy copies a structured array field by
    field: ~10x slower for these packed records)."""
    dt = rec.dtype
    return rec.view(f"V{dt.itemsize}")[idx].view(dt)


class Rows:
    """Rows of one input: records (``codec.dtype``) and one large_string array per text column
    (NULL text is an empty string there; the record's flag says NULL)."""

    __slots__ = ("rec", "strs")

    def __init__(self, rec: np.ndarray, strs: list[pa.Array]) -> None:
        self.rec = rec
        self.strs = strs

    def __len__(self) -> int:
        return len(self.rec)

    def take(self, idx: np.ndarray) -> Rows:
        rec = _take_records(self.rec, idx)
        if not self.strs:
            return Rows(rec, [])
        sel = pa.array(idx, pa.int64())
        return Rows(rec, [s.take(sel) for s in self.strs])

    @staticmethod
    def concat(parts: Sequence[Rows]) -> Rows:
        strs = [pa.concat_arrays([p.strs[i] for p in parts]) for i in range(len(parts[0].strs))]
        return Rows(np.concatenate([p.rec for p in parts]), strs)


class RowCodec:
    """The record layout of rows of the Arrow ``types`` (every one must have a ``column_kind``)."""

    def __init__(self, types: Sequence[pa.DataType], hashed: bool = True) -> None:
        self.types = list(types)
        self.kinds = [column_kind(t) for t in self.types]
        if None in self.kinds:
            raise ValueError(f"no record codec for {self.types}")
        self.hashed = hashed  # records without ``h`` for callers that identify rows otherwise
        fields: list = [("w", "<i8")] + ([("h", "<u8")] if hashed else [])
        fields += [("f", "u1", (max(1, len(types)),))]
        fields += [(f"c{i}", _FORMATS[k]) for i, k in enumerate(self.kinds)]
        self.dtype = np.dtype(fields)
        self.text = [i for i, k in enumerate(self.kinds) if k == "s"]

    def empty(self) -> Rows:
        return Rows(np.zeros(0, self.dtype), [pa.array([], pa.large_string()) for _ in self.text])

    # -- Arrow -> records ---------------------------------------------------------------------------
    def encode(
        self,
        columns: Sequence[pa.Array],
        nans: Sequence[np.ndarray | None],
        weights: np.ndarray,
        hashes: bool = True,
    ) -> Rows:
        """Records of the rows of ``columns`` (of ``self.types``; ``nans[i]``: numeric NaN rows of
        column i, which hold NULL in the Arrow column) with ``weights``, and their hashes (zero
        with ``hashes=False``; none in a codec made with ``hashed=False``)."""
        n = len(weights)
        rec = np.zeros(n, self.dtype)
        rec["w"] = weights
        hashes = hashes and self.hashed
        h = np.zeros(n, np.uint64)
        strs: list[pa.Array] = []
        flags = rec["f"]
        for i, (col, kind) in enumerate(zip(columns, self.kinds, strict=True)):
            flag = (
                np.asarray(pc.is_valid(col), dtype=np.uint8)
                if col.null_count
                else np.ones(n, np.uint8)
            )
            if nans[i] is not None:
                flag[nans[i]] = 2
            flags[:, i] = flag
            if kind == "s":
                text = (pc.fill_null(col, "") if col.null_count else col).cast(pa.large_string())
                offsets = large_offsets(text)
                rec[f"c{i}"] = np.diff(offsets)
                data = text.buffers()[2]
                strs.append(text)
                if hashes:
                    raw = (
                        np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
                    )
                    bits = K.string_hashes(raw, offsets)
            else:
                values, bits = _fixed(col, kind)
                rec[f"c{i}"] = values
            if hashes:
                bits = np.where(flag == 1, bits, np.uint64(0)) ^ (
                    flag.astype(np.uint64) * _FLAG_SALT
                )
                h = K.combine_hashes(h, bits)
        if self.hashed:
            rec["h"] = h
        return Rows(rec, strs)

    # -- records -> Arrow ---------------------------------------------------------------------------
    def arrays(self, rows: Rows) -> tuple[list[pa.Array], dict[int, np.ndarray]]:
        """The rows as Arrow columns of ``self.types``, and per column the rows holding a numeric
        NaN (NULL in the Arrow column; only columns that have one)."""
        rec = rows.rec
        n = len(rec)
        out: list[pa.Array] = []
        nans: dict[int, np.ndarray] = {}
        texts = iter(rows.strs)
        for i, (kind, t) in enumerate(zip(self.kinds, self.types, strict=True)):
            flag = rec["f"][:, i]
            valid = flag == 1
            if not valid.all():
                if (flag == 2).any():
                    nans[i] = flag == 2
                vbuf = pa.py_buffer(np.packbits(valid, bitorder="little"))
            else:
                vbuf = None
            v = rec[f"c{i}"]
            if kind == "s":
                text = next(texts).cast(pa.string())
                bufs = text.buffers()
                out.append(
                    pa.Array.from_buffers(pa.string(), n, [vbuf, *bufs[1:]], -1, text.offset)
                )
                continue
            if kind == "b1":
                data = pa.py_buffer(np.packbits(v.astype(bool), bitorder="little"))
            elif kind == "n8":
                words = np.empty((n, 2), "<i8")
                words[:, 0] = v
                words[:, 1] = v >> 63
                data = pa.py_buffer(words)
            else:
                data = pa.py_buffer(np.ascontiguousarray(v))
            typ = pa.int64() if kind == "i8" else pa.float64() if kind == "f8" else t
            out.append(pa.Array.from_buffers(typ, n, [vbuf, data]))
        return out, nans


def large_offsets(text: pa.Array) -> np.ndarray:
    """The n+1 int64 offsets of a large_string array (relative to its data buffer)."""
    return np.frombuffer(text.buffers()[1], np.int64, len(text) + 1, 8 * text.offset)


def _fixed(col: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(the values to store, their uint64 hash bits) of a fixed-width column (NULLs read 0)."""
    if kind == "i8":
        v = np.asarray(pc.fill_null(col.cast(pa.int64()), 0), dtype=np.int64)
        return v, v.view(np.uint64)
    if kind == "f8":
        v = np.asarray(pc.fill_null(col.cast(pa.float64()), 0.0), dtype=np.float64)
        norm = np.asarray(pc.fill_null(K.normalize_floats(col), 0.0), dtype=np.float64)
        return v, norm.view(np.uint64)
    if kind == "b1":
        v = np.asarray(pc.fill_null(col, False), dtype=np.uint8)
        return v, v.astype(np.uint64)
    if kind in ("d4", "t8"):
        v = np.asarray(pc.fill_null(col.view(pa.int32() if kind == "d4" else pa.int64()), 0))
        return v, v.astype(np.int64).view(np.uint64)
    words = np.frombuffer(col.buffers()[1], "<i8", 2 * (col.offset + len(col)))
    words = words[2 * col.offset :].reshape(-1, 2).copy()
    if col.null_count:
        words[~np.asarray(pc.is_valid(col))] = 0
    if kind == "n8":
        if not np.array_equal(words[:, 1], words[:, 0] >> 63):
            raise ValueError("a numeric value does not fit its declared precision")
        return words[:, 0], words[:, 0].view(np.uint64)
    return words, K.combine_hashes(words[:, 0].view(np.uint64), words[:, 1].view(np.uint64))


# -- per-key values ------------------------------------------------------------------------------
def run_starts(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def row_major_text(rows: Rows) -> tuple[pa.Buffer | None, np.ndarray]:
    """The text values of ``rows`` row by row (all of row 0's, then row 1's...) as one buffer,
    and the byte offset where each row's text starts (n+1)."""
    n = len(rows)
    if not rows.strs:
        return None, np.zeros(n + 1, np.int64)
    if len(rows.strs) == 1:
        text = rows.strs[0]
    else:
        m = len(rows.strs)
        idx = (np.arange(m, dtype=np.int64)[None, :] * n + np.arange(n)[:, None]).ravel()
        text = pa.concat_arrays(rows.strs).take(pa.array(idx))
    offsets = large_offsets(text)
    step = len(rows.strs)
    return text.buffers()[2], offsets[::step]


def binary_over(offsets: np.ndarray, data: pa.Buffer | bytes | None) -> pa.Array:
    """A large_binary array over ``data`` with the given n+1 offsets (no copy)."""
    if data is None:
        data = b""
    off = pa.py_buffer(np.ascontiguousarray(offsets, dtype=np.int64))
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1, [None, off, buf])


def pack_entries(
    lc: RowCodec, left: Rows, lcounts: np.ndarray, rc: RowCodec, right: Rows, rcounts: np.ndarray
) -> list[bytes]:
    """One value per key: ``left``/``right`` hold the keys' rows key after key, ``lcounts[e]``/
    ``rcounts[e]`` rows of key ``e``."""
    ne = len(lcounts)
    ls, rs = run_starts(lcounts), run_starts(rcounts)
    ltext, lrow = row_major_text(left)
    rtext, rrow = row_major_text(right)
    loff, roff = lrow[ls], rrow[rs]
    head = np.empty((ne, 3), "<u4")
    head[:, 0], head[:, 1], head[:, 2] = lcounts, rcounts, np.diff(loff)
    pieces = [
        binary_over(np.arange(ne + 1, dtype=np.int64) * ENTRY_HEADER, head.tobytes()),
        binary_over(ls * lc.dtype.itemsize, left.rec.tobytes()),
        binary_over(rs * rc.dtype.itemsize, right.rec.tobytes()),
        binary_over(loff, ltext),
        binary_over(roff, rtext),
    ]
    return pc.binary_join_element_wise(*pieces, pa.scalar(b"", pa.large_binary())).to_pylist()


def gather_segments(buf: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Buffer:
    """The segments ``buf[starts[i]:starts[i]+lengths[i]]`` (increasing, apart) back to back."""
    if not len(starts):
        return pa.py_buffer(b"")
    bounds = np.empty(2 * len(starts), np.int64)
    bounds[0::2], bounds[1::2] = starts, starts + lengths
    segs = binary_over(bounds, buf).take(pa.array(np.arange(0, 2 * len(starts), 2)))
    off = np.frombuffer(segs.buffers()[1], np.int64, len(segs) + 1, 8 * segs.offset)
    return segs.buffers()[2].slice(int(off[0]), int(off[-1] - off[0]))


def text_columns(
    codec: RowCodec, rec: np.ndarray, counts: np.ndarray, starts: np.ndarray, buf: pa.Buffer
) -> list[pa.Array]:
    """The text columns of the records ``rec`` (``counts[e]`` rows of entry ``e``, whose text
    starts at ``buf[starts[e]]``), one large_string array per text column."""
    m = len(codec.text)
    if not m:
        return []
    n = len(rec)
    lengths = np.stack([rec[f"c{i}"] for i in codec.text], axis=1).astype(np.int64).ravel()
    k = counts * m  # text values per entry
    first = run_starts(k + 1)[:-1]  # each entry's first boundary
    entry = np.repeat(np.arange(len(counts)), k)
    within = np.arange(len(lengths), dtype=np.int64) - np.repeat(run_starts(k)[:-1], k)
    x = np.zeros(int((k + 1).sum()), np.int64)
    x[first[entry] + within + 1] = lengths
    c = np.cumsum(x)
    bounds = c - np.repeat(c[first] - starts, k + 1)
    gapped = pa.Array.from_buffers(
        pa.large_string(), len(bounds) - 1, [None, pa.py_buffer(bounds), buf]
    )
    value = (first[entry] + within).reshape(n, m)
    return [gapped.take(pa.array(value[:, j])) for j in range(m)]


def unpack_entries(
    lc: RowCodec, rc: RowCodec, values: Sequence[bytes]
) -> tuple[Rows, np.ndarray, Rows, np.ndarray]:
    """The rows of ``values`` (``pack_entries``' values): (left rows, the value index of each,
    right rows, the value index of each)."""
    if not values:
        none = np.zeros(0, np.int64)
        return lc.empty(), none, rc.empty(), none
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    blob = b"".join(values)
    buf = pa.py_buffer(blob)
    starts = run_starts(lengths)[:-1]
    raw = np.frombuffer(blob, np.uint8)
    head = raw[starts[:, None] + np.arange(ENTRY_HEADER)].view("<u4").astype(np.int64)
    nl, nr, ltext = head[:, 0], head[:, 1], head[:, 2]
    lw, rw = lc.dtype.itemsize, rc.dtype.itemsize
    lrec_at = starts + ENTRY_HEADER
    rrec_at = lrec_at + nl * lw
    ltext_at = rrec_at + nr * rw
    rtext_at = ltext_at + ltext
    lrec = np.frombuffer(gather_segments(buf, lrec_at, nl * lw), lc.dtype)
    rrec = np.frombuffer(gather_segments(buf, rrec_at, nr * rw), rc.dtype)
    left = Rows(lrec, text_columns(lc, lrec, nl, ltext_at, buf))
    right = Rows(rrec, text_columns(rc, rrec, nr, rtext_at, buf))
    entry = np.arange(len(values), dtype=np.int64)
    return left, np.repeat(entry, nl), right, np.repeat(entry, nr)


# -- one value per row -----------------------------------------------------------------------------
def pack_rows(codec: RowCodec, rows: Rows) -> pa.Array:
    """One value per row, ``record | the row's text values``, as a large_binary array (the
    top-k's state entries: a row's weight is its record's ``w``)."""
    n = len(rows)
    text, row_text = row_major_text(rows)
    return pc.binary_join_element_wise(
        binary_over(np.arange(n + 1, dtype=np.int64) * codec.dtype.itemsize, rows.rec.tobytes()),
        binary_over(row_text, text),
        pa.scalar(b"", pa.large_binary()),
    )


def pack_row_values(codec: RowCodec, rows: Rows) -> list[bytes]:
    """``pack_rows`` as a list of bytes (rows without text: straight from the records)."""
    if not codec.text:
        return rows.rec.view(f"V{codec.dtype.itemsize}").tolist() if len(rows) else []
    return pack_rows(codec, rows).to_pylist()


def unpack_rows(codec: RowCodec, values: Sequence[bytes]) -> Rows:
    """The rows of ``pack_rows`` values (one pass over all of them)."""
    n = len(values)
    if not n:
        return codec.empty()
    size = codec.dtype.itemsize
    blob = b"".join(values)
    if not codec.text:
        return Rows(np.frombuffer(blob, codec.dtype).copy(), [])
    lengths = np.fromiter(map(len, values), np.int64, n)
    at = run_starts(lengths)[:-1]
    buf = pa.py_buffer(blob)
    rec = np.frombuffer(gather_segments(buf, at, np.full(n, size, np.int64)), codec.dtype).copy()
    return Rows(rec, text_columns(codec, rec, np.ones(n, np.int64), at + size, buf))
