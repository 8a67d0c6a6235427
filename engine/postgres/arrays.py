"""Postgres arrays in their text form: parse one into a tuple, write one from a tuple.

``array_parser(element)`` turns Postgres' text output of an array (``{1,2,NULL}``,
``{"a b","c\\"d"}``, ``{{1,2},{3,4}}``, ``[0:1]={7,8}``) into nested tuples of the element
parser's values (``None`` for NULL), as pgoutput sends it and as population reads it through a
``::text`` cast; tuples, unlike psycopg's lists, can be compared and hashed in rows. Lower
bounds other than 1 are dropped (Postgres compares arrays by their elements and dimensions;
incview does not keep bounds). ``array_literal(value, element_text)`` writes the input form the
sink COPYs back (every element quoted, so any element text is safe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Parser = Callable[[bytes], Any]


def array_parser(element: Parser) -> Parser:
    """A parser of an array's text output whose elements ``element`` parses (from bytes)."""

    def parse(data: bytes) -> tuple:
        s = data.decode()
        if s[:1] == "[":  # explicit bounds: "[0:1]={7,8}"
            s = s[s.index("=") + 1 :]
        value, pos = _parse(s, 0, element)
        if pos != len(s):
            raise ValueError(f"malformed array literal {s!r}")
        return value

    return parse


def _parse(s: str, pos: int, element: Parser) -> tuple[tuple, int]:
    if s[pos] != "{":
        raise ValueError(f"malformed array literal {s!r}")
    pos += 1
    items: list[Any] = []
    if s[pos] == "}":
        return (), pos + 1
    n = len(s)
    while True:
        c = s[pos]
        if c == "{":
            sub, pos = _parse(s, pos, element)
            items.append(sub)
        elif c == '"':
            pos += 1
            chars: list[str] = []
            while s[pos] != '"':
                if s[pos] == "\\":
                    pos += 1
                chars.append(s[pos])
                pos += 1
            pos += 1
            items.append(element("".join(chars).encode()))
        else:
            end = pos
            while end < n and s[end] not in ",}":
                end += 1
            text = s[pos:end].strip()
            items.append(None if text.upper() == "NULL" else element(text.encode()))
            pos = end
        if s[pos] == ",":
            pos += 1
            continue
        if s[pos] == "}":
            return tuple(items), pos + 1
        raise ValueError(f"malformed array literal {s!r}")


_QUOTE = frozenset('{},"\\ \t\n\r\v\f')


def format_array(value: tuple, element_text: Callable[[Any], str], always_quote: bool) -> str:
    """``value`` (nested tuples) in Postgres' array text: NULL for None, ``element_text`` of the
    others, quoted always or (as Postgres prints them) when empty, ``NULL`` or holding a
    delimiter, brace, quote, backslash or blank."""
    parts = []
    for v in value:
        if v is None:
            parts.append("NULL")
        elif isinstance(v, tuple):
            parts.append(format_array(v, element_text, always_quote))
        else:
            t = element_text(v)
            if always_quote or t == "" or t.upper() == "NULL" or any(ch in _QUOTE for ch in t):
                t = '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'
            parts.append(t)
    return "{" + ",".join(parts) + "}"


def array_literal(value: tuple, element_text: Callable[[Any], str]) -> str:
    """The array input text of ``value`` the sink COPYs (every element quoted: any text is safe)."""
    return format_array(value, element_text, always_quote=True)
