"""The expression corpus exercises everything the expression compiler supports.

``tests/sql/expression_inventory.py`` reads what the compiler supports off the compiler itself:
its handlers, its function table, the Postgres function names (``pg_proc``) that parse into what
it compiles, every operator and cast over every pair of operand types it accepts, every argument
type of every call, every date/time field and unit. Each item must be exercised by an expression
of the corpus in ``tests/sql/test_expression_compiler.py`` that agrees with Postgres (one in
``KNOWN_DIFFERENCES`` does not count), so that a function, an operator or a type pair added to
the compiler without a corpus expression fails here, naming what is missing.
"""

from __future__ import annotations

import pytest

from engine.sql.expression_compiler import parse_expression
from tests.sql import expression_inventory as inventory
from tests.sql.test_expression_compiler import (
    CARRIED_EXPRESSIONS,
    CARRIED_REFS,
    EXPRESSIONS,
    KNOWN_DIFFERENCES,
    REFS,
    TIME_ZONE,
)


@pytest.fixture(scope="module")
def pg_function_names(pg_server) -> list[str]:
    """The names of Postgres' built-in functions (pg_catalog's, not set-returning ones)."""
    with pg_server.connect() as conn:
        rows = conn.execute(
            "SELECT DISTINCT proname FROM pg_proc WHERE pronamespace = 'pg_catalog'::regnamespace "
            "AND prokind = 'f' AND NOT proretset"
        ).fetchall()
    return [name for (name,) in rows]


@pytest.fixture(scope="module")
def supported(pg_function_names) -> set[inventory.Item]:
    templates = [*EXPRESSIONS, *CARRIED_EXPRESSIONS]
    return inventory.supported([*REFS, *CARRIED_REFS], TIME_ZONE, templates, pg_function_names)


def _covered() -> set[inventory.Item]:
    main = [e for e in EXPRESSIONS if e not in KNOWN_DIFFERENCES]
    carried = [e for e in CARRIED_EXPRESSIONS if e not in KNOWN_DIFFERENCES]
    return inventory.covered(main, REFS, TIME_ZONE) | inventory.covered(
        carried, CARRIED_REFS, TIME_ZONE
    )


def test_every_supported_item_is_in_the_corpus(supported):
    missing = sorted(supported - _covered())
    assert not missing, (
        f"{len(missing)} of the {len(supported)} things the expression compiler supports have no "
        "expression in the corpus (tests/sql/test_expression_compiler.py) that agrees with "
        "Postgres; add one for each:\n" + "\n".join(map(repr, missing))
    )


def test_the_inventory_reads_the_compiler(supported):
    """The inventory is the compiler's: its tables and probes give what they must."""
    kinds = {item[0] for item in supported}
    assert kinds == {
        "node", "function", "spelling", "operator", "cast", "argument", "field", "field alias",
        "unit", "unit alias",
    }  # fmt: skip
    assert ("function", "date_part") in supported and ("spelling", "ceiling") in supported
    assert ("operator", "+", "date", "integer") in supported
    assert ("operator", "+", "date", "bigint") not in supported  # Postgres has no date + int8
    assert ("cast", "real", "numeric") in supported
    assert ("field", "extract", "timezone_hour", "timestamp with time zone") in supported
    assert ("spelling", "power") not in supported  # refused (REFUSALS)
    assert len(supported) > 1000


@pytest.mark.parametrize(
    "probe",
    [*inventory.REFUSALS.values(), *(sql for _why, sql in inventory.SPELLINGS_REFUSED.values())],
    ids=[*inventory.REFUSALS, *inventory.SPELLINGS_REFUSED],
)
def test_what_the_inventory_leaves_out_is_refused(probe):
    """Handlers that only refuse (and function names that parse into compiled constructs but
    are refused) refuse: once implemented, they belong in the corpus."""
    node = parse_expression(probe) if isinstance(probe, str) else probe
    assert not inventory.Prober(REFS, TIME_ZONE).compiles(node)
