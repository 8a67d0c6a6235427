"""``SpilledChanges``: the on-disk chunks of a huge transaction read back in order, re-shaped to
the table's final columns, without the chunks a later TRUNCATE wiped, any number of times."""

from __future__ import annotations

import math

from engine.dataflow.nan import NAN
from engine.postgres.tx_spill import SpilledChanges


def test_chunks_come_back_in_order_reshaped_and_without_truncated_ones():
    spill = SpilledChanges()
    spill.append("public.a", ("id", "x"), [(1, "one"), (2, "two")], [1, 1])
    spill.append("public.b", ("k",), [(7,)], [-1])
    spill.truncate("public.b")  # wipes b's chunk so far, not a's
    spill.append("public.a", ("id", "x"), [(1, "one")], [-1])
    spill.append("public.b", ("k",), [(8,)], [1])
    # the final shape of a: a column added, x kept (by name), id moved
    shapes = {"public.a": ("x", "extra", "id"), "public.b": ("k",)}
    for _ in range(2):  # one read per view
        got = [(t, b.rows, b.weights) for t, b in spill.read(shapes)]
        assert got == [
            ("public.a", [("one", None, 1), ("two", None, 2)], [1, 1]),
            ("public.a", [("one", None, 1)], [-1]),
            ("public.b", [(8,)], [1]),
        ]
    assert spill.chunks == 4
    assert spill.change_count() == 4
    spill.close()


def test_nan_comes_back_as_the_shared_object():
    spill = SpilledChanges()
    spill.append("public.f", ("v",), [(float("nan"),)], [1])
    ((_, batch),) = spill.read({"public.f": ("v",)})
    (value,) = batch.rows[0]
    assert math.isnan(value) and value is NAN
    spill.close()
