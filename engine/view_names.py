"""What a view may be called, and the result table a name maps to.

A view name is ``table`` (the result table ``public.<table>``) or ``schema.table``: the one dot
separates the schema, the parts are used exactly as given (case, spaces and quotes kept; every
statement quotes them as identifiers), and the whole name also names the view's state directory
``state_dir/views/<name>``. So a name must be a ``str`` of valid UTF-8 text; each part 1-63 bytes
(Postgres cuts longer identifiers short, silently), without control or format characters, without
``/`` or ``\\`` (path separators), and not beginning or ending with whitespace; the schema not a
system one (``pg_*``, ``information_schema``) nor incview's own (``incview``); the table not
ending in the sink's staging suffix. This module only checks and splits names: whether the result
table is free is the engine's question (it needs the database).
"""

from __future__ import annotations

import unicodedata

from engine.errors import ViewError

MAX_IDENTIFIER_BYTES = 63  # NAMEDATALEN - 1
STAGING_SUFFIX = "__incview_new"  # the sink's staging table: <table>__incview_new
CATALOG_SCHEMA = "incview"  # engine.postgres.view_catalog.SCHEMA
SYSTEM_SCHEMAS = ("information_schema",)  # and every schema whose name starts with pg_


def split_view_name(name: object) -> tuple[str, str]:
    """(schema, table) of the result table of view ``name``; raises ``ViewError`` naming what is
    wrong with an unacceptable name.

    >>> split_view_name("daily")
    ('public', 'daily')
    >>> split_view_name('Sales."My View"')
    ('Sales', '"My View"')
    """
    if not isinstance(name, str):
        raise ViewError(f"a view name must be a str, not {type(name).__name__} ({name!r})")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ViewError(
            f"view name {name!r} is not valid UTF-8 text (a lone surrogate at position "
            f"{e.start}): use a name made of characters"
        ) from None
    if not name:
        raise ViewError("the view name is empty: use 'name' or 'schema.name'")
    for i, ch in enumerate(name):
        if unicodedata.category(ch).startswith("C"):
            raise ViewError(
                f"view name {name!r} contains a control or format character (U+{ord(ch):04X}) "
                f"at position {i}: use printable characters"
            )
        if ch in "/\\":
            raise ViewError(
                f"view name {name!r} contains {ch!r}: the name also names the view's state "
                "directory, so it may not hold a path separator"
            )
    parts = name.split(".")
    if len(parts) > 2 or not all(parts):
        raise ViewError(
            f"invalid view name {name!r}: use 'name' or 'schema.name' (one dot separates the "
            "schema; neither part may be empty or hold another dot)"
        )
    for part in parts:
        if part != part.strip():
            raise ViewError(
                f"view name {name!r}: {part!r} begins or ends with whitespace; remove it"
            )
        size = len(part.encode("utf-8"))
        if size > MAX_IDENTIFIER_BYTES:
            raise ViewError(
                f"view name {name!r}: {part[:20]!r}... is {size} bytes long, but Postgres "
                f"names hold at most {MAX_IDENTIFIER_BYTES} bytes (it would cut it short): "
                "use a shorter name"
            )
    schema, table = parts if len(parts) == 2 else ("public", parts[0])
    if schema.startswith("pg_") or schema in SYSTEM_SCHEMAS or schema == CATALOG_SCHEMA:
        raise ViewError(
            f"view name {name!r}: the schema {schema} is reserved (system schemas pg_* and "
            f"information_schema, incview's own {CATALOG_SCHEMA}): use another schema"
        )
    if table.endswith(STAGING_SUFFIX):
        raise ViewError(
            f"view name {name!r} ends in {STAGING_SUFFIX}, the suffix of incview's staging "
            "tables: use another name"
        )
    return schema, table


def storable_name(name: object) -> bool:
    """Whether ``name`` can be looked up in the catalog at all (a str Postgres text can hold);
    names of existing views always are, whatever rules they were created under."""
    if not isinstance(name, str) or "\x00" in name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
