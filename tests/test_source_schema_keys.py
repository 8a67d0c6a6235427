"""The keys a view relies on, as ``SourceSchema`` checks them against the catalog's keys now:
by their columns, whatever the order the index lists them in, and a smaller key still holds."""

from __future__ import annotations

from engine.source_schema import SourceSchema


def _drift(relied, now):
    schema = SourceSchema({}, {}, {"public.t": relied})
    return schema.drift(None, current={}, definitions={}, keys={"public.t": now})


def test_a_key_holds_by_its_columns():
    assert _drift([["a", "b"]], [("b", "a")]) is None  # PRIMARY KEY (b, a), scanned as a, b
    assert _drift([["a", "b"]], [("c",), ("a",)]) is None  # a key within it: still unique
    assert _drift([["a"]], []) is not None
    message = _drift([["a", "b"]], [("a", "c")])
    assert message is not None and "the unique key (a, b) of source table public.t" in message
    assert SourceSchema({}, {}, {}).drift(None, current={}, definitions={}) is None


def test_the_keys_survive_saving(tmp_path):
    schema = SourceSchema({"public.t": {"a": "integer"}}, {}, {"public.t": [["a", "b"]]})
    schema.save(tmp_path / "sources.json")
    assert SourceSchema.load(tmp_path / "sources.json") == schema
