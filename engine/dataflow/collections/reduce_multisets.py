"""The row reduce's per-group multisets (``ReduceCollection``'s min/max, count(DISTINCT) and
string_agg/array_agg): their entries' layout and their update a time at a time.

Entries live in the reduce's column family under the prefix-free keys
``kind|slot|len(group)|group|...``: min/max of one (argument, FILTER) share a sorted multiset
keyed with ``encode_sortable`` (value -> count ++ pickled value) whose accumulator is the key of
the first/last live entry, so only a delete of the current extreme makes it scan, and only up to
the next live entry; count(DISTINCT) keeps value -> count; string_agg keeps its entries in ORDER
BY order and re-reads a touched group's entries. A mixin of ``ReduceCollection`` (its table,
aggregates and slots).
"""

from __future__ import annotations

import pickle
from itertools import compress
from typing import TYPE_CHECKING, Any

from engine.dataflow.nan import loads
from engine.dataflow.state.keycodec import encode_key, encode_sortable, encode_sortable_value

if TYPE_CHECKING:
    from engine.dataflow.collections.reduce import _Inputs

_dumps = pickle.dumps
_loads = loads  # NaN values come back as the shared NaN objects (engine.dataflow.nan)


def _count_bytes(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def _bytes_count(b: bytes) -> int:
    return int.from_bytes(b, "big", signed=True)


class MultisetAggregates:
    """The multiset aggregates' updates of ``ReduceCollection`` (see the module docstring)."""

    # -- layout --------------------------------------------------------------------------------
    def _slot_prefix(self, slot: int, group: bytes) -> bytes:
        """Prefix of a group's entries in a multiset slot; prefix-free across groups and slots."""
        return self._slot_heads[slot] + len(group).to_bytes(4, "big") + group

    # -- multisets -----------------------------------------------------------------------------
    def _update_minmax(
        self,
        slot: int,
        ais: list[int],
        gprefix: list[bytes],
        accs: list[list],
        G: list[int],
        V: list[Any],
        W: list[int],
        new_values: dict[int, dict[int, Any]],
    ) -> None:
        """Entries ``key -> count ++ pickle(value)``; a min/max accumulator is the key of the
        group's first/last live entry (its value is in the last output row, or in ``new_values``
        for the groups whose extreme moved)."""
        table = self.table
        assert table is not None
        head = self._slot_heads[slot]
        hp = [head + p for p in gprefix]
        ks = list(map(bytes.__add__, map(hp.__getitem__, G), map(encode_sortable_value, V)))
        position = dict(zip(ks, range(len(ks)), strict=True))  # entry -> a row of that value
        if len(position) == len(ks):
            dws = dict(zip(ks, W, strict=True))
        else:
            dws = {}
            for k, w in zip(ks, W, strict=True):
                dws[k] = dws.get(k, 0) + w
        entry_keys = sorted(dws)  # locality, and each group's entries in ascending order
        first_live: dict[int, bytes] = {}
        last_live: dict[int, bytes] = {}
        killed: dict[int, set[bytes]] = {}
        put = table.put
        delete = table.delete
        from_bytes = int.from_bytes
        for k, old in zip(entry_keys, table.get_many(entry_keys), strict=True):
            dw = dws[k]
            if old is not None:
                if dw:
                    n = from_bytes(old[:8], "big", signed=True) + dw
                    if n > 0:
                        put(k, n.to_bytes(8, "big", signed=True) + old[8:])
                    else:
                        delete(k)
                        g = G[position[k]]
                        if g in killed:
                            killed[g].add(k)
                        else:
                            killed[g] = {k}
                        continue
            elif dw > 0:
                put(k, dw.to_bytes(8, "big", signed=True) + _dumps(V[position[k]], 5))
            else:
                continue
            g = G[position[k]]
            if g not in first_live:
                first_live[g] = k
            last_live[g] = k
        for kind, live, reverse in (("min", first_live, False), ("max", last_live, True)):
            group_ais = [ai for ai in ais if self.aggregates[ai].kind == kind]
            if not group_ais:
                continue
            first = group_ais[0]
            moved: dict[int, Any] = {}
            for g in live.keys() | killed.keys():  # other groups keep their extreme
                acc = accs[g]
                old = acc[first]
                candidate = live.get(g)
                kills = killed.get(g)
                scanned = None
                if old is not None and kills is not None and old in kills:
                    old = None
                    for k, raw in table.scan_prefix(hp[g], reverse=reverse):
                        if k not in kills:
                            old = k
                            scanned = raw
                            break
                if old is None or (
                    candidate is not None and (candidate > old if reverse else candidate < old)
                ):
                    new = candidate
                else:
                    new = old
                if new != acc[first]:
                    if new is None:
                        moved[g] = None
                    elif new in position:
                        moved[g] = V[position[new]]
                    else:
                        moved[g] = _loads(scanned[8:])  # type: ignore[index]
                    for ai in group_ais:
                        acc[ai] = new
            for ai in group_ais:
                new_values[ai] = moved

    def _update_distinct(
        self,
        slot: int,
        ais: list[int],
        gprefix: list[bytes],
        accs: list[list],
        G: list[int],
        V: list[Any],
        W: list[int],
    ) -> None:
        table = self.table
        assert table is not None
        prefixes: dict[int, bytes] = {}
        touched: dict[bytes, list] = {}
        for g, v, w in zip(G, V, W, strict=True):
            p = prefixes.get(g)
            if p is None:
                p = prefixes[g] = self._slot_heads[slot] + gprefix[g]
            k = p + encode_key((v,))
            e = touched.get(k)
            if e is None:
                touched[k] = [g, w]
            else:
                e[1] += w
        entry_keys = list(touched)
        change: dict[int, int] = {}
        for k, old, (g, dw) in zip(
            entry_keys, table.get_many(entry_keys), touched.values(), strict=True
        ):
            if not dw:
                continue
            before = _bytes_count(old) if old is not None else 0
            after = before + dw
            if after > 0:
                table.put(k, _count_bytes(after))
            elif old is not None:
                table.delete(k)
            step = (after > 0) - (before > 0)
            if step:
                change[g] = change.get(g, 0) + step
        for g, step in change.items():
            for ai in ais:
                accs[g][ai] += step

    def _update_string_agg(
        self,
        slot: int,
        gprefix: list[bytes],
        G: list[int],
        V: list[Any],
        W: list[int],
        inputs: _Inputs,
        ordered: list[tuple] | None,
    ) -> dict[int, Any]:
        """Apply the entries' changes; returns the new string of every touched group."""
        table = self.table
        assert table is not None
        spec = self._slots[slot]
        desc = (*spec[4], False)
        agg = self.aggregates[self._agg_slot.index(slot)]
        arrays = spec[5] is None
        if ordered is not None:
            keep = inputs.keep(spec[1], spec[2], with_nulls=arrays)
            order_values = list(compress(ordered, keep))
            sort_keys = [
                encode_sortable(o, desc[:-1], spec[6]) + _tiebreak(v)
                for o, v in zip(order_values, V, strict=True)
            ]
        else:
            sort_keys = list(map(_tiebreak, V))
        per_group: dict[int, dict[bytes, list]] = {}
        for g, v, w, sk in zip(G, V, W, sort_keys, strict=True):
            t = per_group.setdefault(g, {})
            e = t.get(sk)
            if e is None:
                t[sk] = [v, w]
            else:
                e[1] += w
        result: dict[int, Any] = {}
        for g, changes in per_group.items():
            prefix = self._slot_heads[slot] + gprefix[g]
            cut = len(prefix)
            entries = {k[cut:]: _loads(raw) for k, raw in table.scan_prefix(prefix)}
            for sk, (v, dw) in changes.items():
                if not dw:
                    continue
                old = entries.get(sk)
                if old is not None:
                    v, n = old
                    n += dw
                else:
                    n = dw
                if n > 0:
                    entries[sk] = (v, n)
                    table.put(prefix + sk, _dumps((v, n), 5))
                elif old is not None:
                    del entries[sk]
                    table.delete(prefix + sk)
            if not entries:
                result[g] = None
                continue
            parts: list[Any] = []
            for sk in sorted(entries):
                v, n = entries[sk]
                parts.extend([v] * n)
            if arrays:
                result[g] = tuple(parts)
                continue
            sep: Any = agg.separator
            if isinstance(parts[0], bytes):
                sep = sep.encode()
            result[g] = sep.join(parts)
        return result


def _tiebreak(v: Any) -> bytes:
    """A value's bytes in an ordered aggregate's entry key after its ORDER BY values: its sort
    encoding where it has one (string_agg without ORDER BY orders by value), else a pickle
    (uuid, arrays: only their identity matters)."""
    try:
        return encode_sortable_value(v)
    except TypeError:
        return b"\xff" + _dumps(v, 5)
