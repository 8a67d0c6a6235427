"""A buffer of pgoutput messages and the vectorized tokenizer of their TupleData.

``MessageBuffer(messages)`` concatenates the messages of one peek (or one block of a streamed
peek) into one bytes object and keeps, as numpy arrays, where each message starts and its kind
byte. ``tokenize(buf, starts, ncols)`` reads the TupleData at ``starts`` (one position per
tuple, all of one relation's shape) column by column: each step is a handful of numpy
operations over all tuples at once (one 8-byte gather gives a field's kind and its int32
length), never a Python loop per value. It gives, per column, each value's kind (``t`` text,
``n`` NULL, ``u`` unchanged TOAST), where its text starts and its length, and where each tuple
ends. Value positions of one column are increasing with the tuple order, which the Arrow
kernels (``engine.postgres.text_columns``) rely on. This module only locates bytes: it must not
parse values, know types or group transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TEXT, NULL, UNCHANGED = 116, 110, 117  # 't', 'n', 'u'
_PAD = b"\0" * 8  # so the 8-byte gather at a buffer's last field stays inside it


class MalformedTuple(Exception):
    """A TupleData the vectorized path does not read (another column count than the Relation's,
    binary values): the caller lets the row decoder explain it. ``args[0]`` is the tuple's
    index in the ``starts`` given to ``tokenize``."""


class MessageBuffer:
    """The messages of one peek as one buffer: ``data``, ``u8`` (its bytes as uint8),
    ``starts``, ``lengths`` and ``kinds`` (each message's first byte) as numpy arrays."""

    def __init__(self, messages: Sequence[bytes]) -> None:
        self.messages = messages
        n = len(messages)
        self.lengths = lengths = np.fromiter(map(len, messages), np.int64, n)
        self.data = b"".join([*messages, _PAD])
        self.starts = np.zeros(n, np.int64)
        if n > 1:
            np.cumsum(lengths[:-1], out=self.starts[1:])
        self.u8 = np.frombuffer(self.data, np.uint8)
        self.kinds = self.u8[self.starts] if n else np.zeros(0, np.uint8)
        # every position's next 8 bytes as one big-endian word (a strided view, no copy)
        self.words = np.ndarray(
            shape=(len(self.data) - 7,), dtype=">u8", buffer=self.data, strides=(1,)
        )

    def __len__(self) -> int:
        return len(self.messages)

    def uint32(self, positions: np.ndarray) -> np.ndarray:
        """The big-endian uint32 at each position (an oid, a length), as int64."""
        return (self.words[positions] >> np.uint64(32)).astype(np.int64)


@dataclass
class TupleTokens:
    """Where each column's values are: ``kinds[c][i]``, ``starts[c][i]``, ``lengths[c][i]`` for
    column ``c`` of tuple ``i`` (NULL and unchanged values have length 0), and ``ends[i]``, the
    position right after tuple ``i``."""

    kinds: list[np.ndarray]
    starts: list[np.ndarray]
    lengths: list[np.ndarray]
    ends: np.ndarray

    def take(self, order: np.ndarray) -> TupleTokens:
        """The tokens of tuples ``order`` (a permutation or selection), in that order."""
        return TupleTokens(
            [k[order] for k in self.kinds],
            [s[order] for s in self.starts],
            [n[order] for n in self.lengths],
            self.ends[order],
        )

    @staticmethod
    def concat(parts: Sequence[TupleTokens]) -> TupleTokens:
        ncols = len(parts[0].kinds)
        return TupleTokens(
            [np.concatenate([p.kinds[c] for p in parts]) for c in range(ncols)],
            [np.concatenate([p.starts[c] for p in parts]) for c in range(ncols)],
            [np.concatenate([p.lengths[c] for p in parts]) for c in range(ncols)],
            np.concatenate([p.ends for p in parts]),
        )


_SHIFT_KIND = np.uint64(56)
_SHIFT_LEN = np.uint64(24)
_LOW32 = np.uint64(0xFFFFFFFF)


def tokenize(buf: MessageBuffer, starts: np.ndarray, ncols: int) -> TupleTokens:
    """Tokens of the TupleData at ``starts`` (each the position of its int16 column count),
    which must all have ``ncols`` columns. Raises ``MalformedTuple`` naming the first tuple
    that has another column count or a field kind other than t/n/u."""
    words = buf.words
    counts = (words[starts] >> np.uint64(48)).astype(np.int64)
    bad = np.flatnonzero(counts != ncols)
    if len(bad):
        raise MalformedTuple(int(bad[0]))
    try:
        return _tokenize(words, starts, ncols, len(buf.data) - len(_PAD))
    except IndexError:  # a length pointing past the buffer
        raise MalformedTuple(0) from None


def _tokenize(words: np.ndarray, starts: np.ndarray, ncols: int, size: int) -> TupleTokens:
    pos = starts + 2
    kinds: list[np.ndarray] = []
    value_starts: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    for _ in range(ncols):
        w = words[pos]
        kind = (w >> _SHIFT_KIND).astype(np.uint8)
        text = kind == TEXT
        length = ((w >> _SHIFT_LEN) & _LOW32).view(np.int64)
        length *= text
        start = pos + np.where(text, 5, 1)
        pos = start + length
        kinds.append(kind)
        value_starts.append(start)
        lengths.append(length)
    wrong = pos > size
    for kind in kinds:
        wrong |= (kind != TEXT) & (kind != NULL) & (kind != UNCHANGED)
    bad = np.flatnonzero(wrong)
    if len(bad):
        raise MalformedTuple(int(bad[0]))
    return TupleTokens(kinds, value_starts, lengths, pos)
