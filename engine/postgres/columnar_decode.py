"""The vectorized pgoutput decoder: a whole buffer of messages -> per relation, Arrow columns of diffs.

``decode_buffer(decoder, messages)`` reads the control messages (a few per transaction) one by
one: Relation, Truncate, Type, Origin and Message with the row decoder (``PgOutputDecoder``,
which keeps the relation cache), of a Begin only its final LSN, a Commit not at all (the caller
decodes those two when it gets to them). Every row change (Insert, Update, Delete) of the buffer
is read at once: the changes are grouped by the relation shape they were written under (the
Relation in force at each one), each group's tuples are tokenized with numpy
(``pgoutput_tokens``) and each column is parsed by Arrow kernels (``text_columns``), so no Python
runs per value. A group is a ``DecodedChanges``: the diffs in message order (INSERT +new, DELETE
-old, UPDATE -old +new, unchanged TOAST values of an UPDATE filled from its old row), their
weights, the message each came from, and per column an Arrow array or, for a column without an
exact vector parse, the row decoder's Python values. Changes inside transactions whose Begin is
before ``after_lsn`` are not decoded (``poll`` skips transactions it already returned). An
UPDATE or DELETE without the full old row is reported in ``missing_old`` and not decoded (the
reader decides: an error, or a re-population). A message the vector path cannot read is handed
to the row decoder, whose error is raised. ``decode_blocks`` decodes a long peek ``BLOCK``
messages at a time. This module decodes; grouping into transactions is
``engine.postgres.columnar_assembly``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from engine.dataflow.batch import DiffBatch
from engine.dataflow.columnar.arrow_types import to_python
from engine.errors import ViewError
from engine.postgres import values as V
from engine.postgres.pgoutput import (
    UNCHANGED_TOAST,
    PgOutputDecoder,
    Relation,
    Truncate,
    unchanged_toast_error,
    value_error,
)
from engine.postgres.pgoutput_tokens import (
    TEXT,
    UNCHANGED,
    MalformedTuple,
    MessageBuffer,
    TupleTokens,
    tokenize,
)
from engine.postgres.text_columns import parse_column, vector_type

INSERT, UPDATE, DELETE = 73, 85, 68  # 'I', 'U', 'D'
# messages decoded at once: a block's bytes (~2 MB) stay in the CPU's cache while its columns
# are read (whole 250k-message peeks cost ~1.5x the CPU time: every column pass misses cache)
BLOCK = 16384
_BEGIN, _COMMIT, _RELATION = 66, 67, 82
_OLD, _KEY, _NEW = 79, 75, 78  # 'O', 'K', 'N'
_FINAL_LSN = struct.Struct(">q")  # a Begin's first field


@dataclass
class DecodedChanges:
    """The diffs of one relation shape, in message order: ``columns`` (Arrow arrays, or Python
    lists for columns without an exact vector parse), ``weights`` (int64), ``messages`` (the
    buffer index of each diff's message) and ``first`` (whether the diff is its message's first:
    an UPDATE's second diff, its new row, is not)."""

    rel: Relation
    columns: list[Any]
    weights: np.ndarray
    messages: np.ndarray
    first: np.ndarray
    columnar: bool = field(init=False)  # whether every column is an Arrow array
    _rows: list[tuple] | None = field(default=None, repr=False)
    _small: list[tuple] = field(default_factory=list, repr=False)  # prepare_rows' rows
    _small_at: dict[int, int] = field(default_factory=dict, repr=False)  # diff -> its place

    def __post_init__(self) -> None:
        self.columnar = all(isinstance(c, pa.Array) for c in self.columns)

    def __len__(self) -> int:
        return len(self.weights)

    def rows(self) -> list[tuple]:
        """All diffs as tuple rows (made once): the engine's Python values, as the row decoder
        gives them."""
        if self._rows is None:
            self._rows = self._rows_at(None)
        return self._rows

    def _rows_at(self, at: np.ndarray | None) -> list[tuple]:
        cols = []
        for c in self.columns:
            if isinstance(c, list):
                cols.append(c if at is None else [c[i] for i in at.tolist()])
            else:
                cols.append(to_python(c if at is None else c.take(pa.array(at))))
        n = len(self) if at is None else len(at)
        return list(zip(*cols, strict=True)) if cols else [()] * n

    def prepare_rows(self, spans: list[tuple[int, int]]) -> None:
        """Make the rows of the diff ranges ``spans`` at once (``batch`` then gives them as
        rows): an Arrow batch costs ~10 us per transaction in slices and their garbage
        collection, more than a few rows do, so small transactions come as rows."""
        if not self.columnar or not spans:
            return
        at = np.concatenate([np.arange(a, b) for a, b in spans])
        self._small = self._rows_at(at)
        i = 0
        for a, b in spans:
            self._small_at[a] = i
            i += b - a

    def batch(self, a: int, b: int) -> DiffBatch:
        """Diffs ``a`` to ``b`` as a ``DiffBatch``: Arrow slices when the group is columnar
        (unless ``prepare_rows`` made them rows)."""
        i = self._small_at.get(a)
        if i is not None and i + b - a <= len(self._small):
            return DiffBatch(self._small[i : i + b - a], self.weights[a:b].tolist())
        if self.columnar:
            return DiffBatch.from_columns(
                [c.slice(a, b - a) for c in self.columns], self.weights[a:b]
            )
        return DiffBatch(self.rows()[a:b], self.weights[a:b].tolist())


class Control(NamedTuple):
    """A control message other than Begin and Commit, decoded; ``relations`` holds, for a
    Truncate, the relation of each of its oids as the cache had it then."""

    event: Any
    relations: tuple[Relation | None, ...] = ()


@dataclass
class DecodedBuffer:
    """``control_at``: the buffer index of each control message, in order; ``controls``: those
    other than Begin and Commit (few), decoded, by buffer index (Begin and Commit are decoded by
    the caller when it gets to them: ``PgOutputDecoder.decode``)."""

    buf: MessageBuffer
    control_at: np.ndarray
    controls: dict[int, Control]
    groups: list[DecodedChanges]
    # UPDATEs/DELETEs without the full old row: (buffer index, relation, "an UPDATE"/"a DELETE")
    missing_old: list[tuple[int, Relation, str]]


def decode_buffer(
    decoder: PgOutputDecoder,
    messages: Sequence[bytes],
    after_lsn: int = 0,
    skipping: bool = False,
) -> DecodedBuffer:
    """Decode ``messages`` (in order). Row changes of transactions whose Begin's final LSN is
    before ``after_lsn`` are not decoded, nor those before the buffer's first Begin if
    ``skipping`` (the buffer continues such a transaction)."""
    buf = MessageBuffer(messages)
    kinds = buf.kinds
    change = (kinds == INSERT) | (kinds == UPDATE) | (kinds == DELETE)
    control_at = np.flatnonzero(~change)
    controls, versions, included, history = _walk_controls(
        decoder, messages, control_at, after_lsn, skipping
    )
    changes = np.flatnonzero(change)
    if not len(changes):
        return DecodedBuffer(buf, control_at, controls, [], [])
    before = np.searchsorted(control_at, changes) - 1  # the control message before each change
    keep = included[before + 1]
    changes, before = changes[keep], before[keep]
    version = versions[before + 1]
    oids = buf.uint32(buf.starts[changes] + 1)
    groups, missing = [], []
    for rel, msgs in _shapes(decoder, history, oids, version, changes):
        msgs, gone = _without_old_row(buf, msgs)
        missing += [(int(i), rel, what) for i, what in gone]
        if len(msgs):
            groups.append(_decode_group(decoder, buf, rel, msgs))
    missing.sort(key=lambda m: m[0])
    return DecodedBuffer(buf, control_at, controls, groups, missing)


def decode_blocks(decoder: PgOutputDecoder, messages: Sequence[bytes]) -> list[DecodedBuffer]:
    """``decode_buffer`` over the messages ``BLOCK`` at a time (a relation's changes come in
    one group per block)."""
    return [decode_buffer(decoder, messages[i : i + BLOCK]) for i in range(0, len(messages), BLOCK)]


def _walk_controls(
    decoder: PgOutputDecoder,
    messages: Sequence[bytes],
    control_at: np.ndarray,
    after_lsn: int,
    skipping: bool,
) -> tuple[
    dict[int, Control], np.ndarray, np.ndarray, dict[int, list[tuple[int, Relation | None]]]
]:
    """Read the control messages in order (Relation, Type... decoded; of a Begin only its final
    LSN). Returns the decoded ones by index, and per position "before the first control
    message, after control message j" (index j + 1): the relation cache's version and whether
    changes there are decoded; and per relation oid its cached Relation by version."""
    versions = [0]
    included = [not skipping]
    history: dict[int, list[tuple[int, Relation | None]]] = {}
    relations = decoder.relations
    controls: dict[int, Control] = {}
    version = 0
    inside = not skipping
    decode = decoder.decode
    final_lsn = _FINAL_LSN.unpack_from
    for i in control_at.tolist():
        data = messages[i]
        kind = data[0]
        if kind == _BEGIN:
            inside = final_lsn(data, 1)[0] >= after_lsn
        elif kind == _COMMIT:
            inside = False
        elif kind == _RELATION:
            oid = int.from_bytes(data[1:5], "big")
            was = relations.get(oid)
            event = decode(data)
            if event is not was:
                if oid not in history:
                    history[oid] = [(0, was)]
                version += 1
                history[oid].append((version, event))
            controls[i] = Control(event)
        else:
            event = decode(data)
            if isinstance(event, Truncate):
                controls[i] = Control(event, tuple(relations.get(o) for o in event.oids))
            else:
                controls[i] = Control(event)
        versions.append(version)
        included.append(inside)
    return controls, np.array(versions, np.int64), np.array(included, bool), history


def _shapes(
    decoder: PgOutputDecoder,
    history: dict[int, list[tuple[int, Relation | None]]],
    oids: np.ndarray,
    version: np.ndarray,
    changes: np.ndarray,
) -> list[tuple[Relation, np.ndarray]]:
    """The changes grouped by the Relation in force at each (message order kept in a group)."""
    width = int(version.max(initial=0)) + 1
    keys, inverse = np.unique(oids * width + version, return_inverse=True)
    by_rel: dict[int, tuple[Relation, list[int]]] = {}
    for k, key in enumerate(keys.tolist()):
        oid, ver = divmod(key, width)
        rel = _relation_at(decoder, history, oid, ver)
        by_rel.setdefault(id(rel), (rel, []))[1].append(k)
    out = []
    for rel, ks in by_rel.values():
        mask = inverse == ks[0] if len(ks) == 1 else np.isin(inverse, ks)
        out.append((rel, changes[mask]))
    return out


def _relation_at(
    decoder: PgOutputDecoder,
    history: dict[int, list[tuple[int, Relation | None]]],
    oid: int,
    version: int,
) -> Relation:
    steps = history.get(oid)
    rel = decoder.relations.get(oid) if steps is None else None
    if steps is not None:
        for since, r in steps:
            if since <= version:
                rel = r
    if rel is None:
        raise decoder._unknown_relation(oid)
    return rel


def _without_old_row(buf: MessageBuffer, msgs: np.ndarray) -> tuple[np.ndarray, list]:
    """Split off the UPDATEs and DELETEs that carry no full old row ('N' or 'K')."""
    kinds = buf.kinds[msgs]
    sub = buf.u8[buf.starts[msgs] + 5]
    missing = ((kinds == UPDATE) & (sub != _OLD)) | ((kinds == DELETE) & (sub == _KEY))
    if not missing.any():
        return msgs, []
    gone = [
        (i, "an UPDATE" if k == UPDATE else "a DELETE")
        for i, k in zip(msgs[missing].tolist(), kinds[missing].tolist(), strict=True)
    ]
    return msgs[~missing], gone


def _decode_group(
    decoder: PgOutputDecoder, buf: MessageBuffer, rel: Relation, msgs: np.ndarray
) -> DecodedChanges:
    ncols = len(rel.columns)
    kinds = buf.kinds[msgs]
    ends = buf.starts[msgs] + buf.lengths[msgs]
    try:
        first = tokenize(buf, buf.starts[msgs] + 6, ncols)
    except MalformedTuple as e:
        raise _row_decoder_error(decoder, buf, int(msgs[e.args[0]])) from None
    updates = np.flatnonzero(kinds == UPDATE)
    single = np.flatnonzero(kinds != UPDATE)
    _check_ends(decoder, buf, msgs, single, first.ends[single], ends[single])
    weights_first = np.where(kinds == INSERT, 1, -1).astype(np.int64)
    if not len(updates):
        tokens, weights, diff_msgs = first, weights_first, msgs
        is_first = np.ones(len(msgs), bool)
    else:
        old_ends = first.ends[updates]
        not_new = np.flatnonzero(buf.u8[old_ends] != _NEW)
        if len(not_new):
            raise _row_decoder_error(decoder, buf, int(msgs[updates[not_new[0]]]))
        try:
            second = tokenize(buf, old_ends + 1, ncols)
        except MalformedTuple as e:
            raise _row_decoder_error(decoder, buf, int(msgs[updates[e.args[0]]])) from None
        _check_ends(decoder, buf, msgs, updates, second.ends, ends[updates])
        _fill_unchanged(rel, first, second, updates)
        # diff order: each message's first tuple, and right after an UPDATE's its new tuple
        at_first = np.arange(len(msgs)) + np.cumsum(kinds == UPDATE) - (kinds == UPDATE)
        at_second = at_first[updates] + 1
        n = len(msgs) + len(updates)
        order = np.empty(n, np.int64)
        order[at_first] = np.arange(len(msgs))
        order[at_second] = len(msgs) + np.arange(len(updates))
        tokens = TupleTokens.concat([first, second]).take(order)
        weights = np.concatenate([weights_first, np.ones(len(updates), np.int64)])[order]
        diff_msgs = np.concatenate([msgs, msgs[updates]])[order]
        is_first = np.zeros(n, bool)
        is_first[at_first] = True
    columns = [_column(decoder, buf, rel, c, tokens) for c in range(ncols)]
    return DecodedChanges(rel, columns, weights, diff_msgs, is_first)


def _check_ends(
    decoder: PgOutputDecoder,
    buf: MessageBuffer,
    msgs: np.ndarray,
    which: np.ndarray,
    tuple_ends: np.ndarray,
    message_ends: np.ndarray,
) -> None:
    """A message's last tuple ends where the message does (else the row decoder explains)."""
    wrong = np.flatnonzero(tuple_ends != message_ends)
    if len(wrong):
        raise _row_decoder_error(decoder, buf, int(msgs[which[wrong[0]]]))


def _fill_unchanged(rel: Relation, old: TupleTokens, new: TupleTokens, updates: np.ndarray) -> None:
    """An UPDATE's unchanged TOAST values ('u') take its old row's values (in ``new``, in
    place); as the row decoder, an error when that old row itself has an unchanged value."""
    filled = [np.flatnonzero(k == UNCHANGED) for k in new.kinds]
    if not any(len(f) for f in filled):
        return
    old_unchanged = np.zeros(len(updates), bool)
    for k in old.kinds:
        old_unchanged |= k[updates] == UNCHANGED
    for c, f in enumerate(filled):
        if len(f) and old_unchanged[f].any():
            row = int(f[old_unchanged[f]][0])
            cols = [
                col.name
                for col, k in zip(rel.columns, new.kinds, strict=True)
                if k[row] == UNCHANGED
            ]
            raise unchanged_toast_error(rel, cols)
        if len(f):
            src = updates[f]
            new.kinds[c][f] = old.kinds[c][src]
            new.starts[c][f] = old.starts[c][src]
            new.lengths[c][f] = old.lengths[c][src]
    # a filled value points back into its old row: that column is parsed by unique positions


def _column(
    decoder: PgOutputDecoder, buf: MessageBuffer, rel: Relation, c: int, tokens: TupleTokens
) -> Any:
    col = rel.columns[c]
    kinds, starts, lengths = tokens.kinds[c], tokens.starts[c], tokens.lengths[c]
    typ = vector_type(col, decoder.timezone)
    if typ is not None and not np.any(kinds == UNCHANGED):
        padded = col.type_oid == V.BPCHAR
        if _apart(starts, lengths):
            array = parse_column(buf, kinds, starts, lengths, typ, padded)
        else:  # UPDATEs' unchanged TOAST values filled from their old rows: each parsed once
            places, inverse = np.unique(starts, return_index=True, return_inverse=True)[1:]
            array = parse_column(buf, kinds[places], starts[places], lengths[places], typ, padded)
            array = None if array is None else array.take(pa.array(inverse))
        if array is not None:
            return array
    parse = V.parser_for(col.type_oid, decoder.timezone, decoder.resolve)
    return python_values(buf, kinds, starts, lengths, parse, rel, c)


def _apart(starts: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether each value starts after the one before it ends (``text_slices`` needs that)."""
    return len(starts) < 2 or bool(np.all(starts[1:] >= starts[:-1] + lengths[:-1]))


def python_values(
    buf: MessageBuffer,
    kinds: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    parse: Callable[[bytes], Any],
    rel: Relation,
    c: int,
) -> list[Any]:
    """One column value by value with the row decoder's parser (the fallback)."""
    data = buf.data
    out: list[Any] = []
    append = out.append
    for k, s, n in zip(kinds.tolist(), starts.tolist(), lengths.tolist(), strict=True):
        if k == TEXT:
            raw = data[s : s + n]
            try:
                append(parse(raw))
            except Exception as e:
                raise value_error(rel, c, raw.decode(errors="replace"), e) from None
        elif k == UNCHANGED:
            append(UNCHANGED_TOAST)
        else:
            append(None)
    return out


def _row_decoder_error(decoder: PgOutputDecoder, buf: MessageBuffer, index: int) -> Exception:
    """The row decoder's error for message ``index`` (the vector path could not read it)."""
    try:
        decoder.decode(buf.messages[index])
    except ViewError as e:
        return e
    return ViewError(f"cannot decode pgoutput message {index} of the peek: malformed tuple data")
