"""Values of uuid, bytea, jsonb, inet/cidr, enum and array columns: input from text, text output.

The engine carries uuid as ``uuid.UUID``, bytea as ``bytes``, arrays as tuples, and jsonb, inet,
cidr and enum values as Postgres' own (canonical) text output (``types.TEXT_CARRIED``). A
literal compared with such a column is converted here the way Postgres' input function would
(jsonb: keys ordered by length then bytes, the last of duplicate keys kept, numbers as numeric
prints them; inet: the prefix shown unless it is the whole address), so equal values are equal
Python values. Errors are ``EvalError`` with Postgres' messages. Pure functions only.
"""

from __future__ import annotations

import ipaddress
import json
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from engine.dataflow.errs import EvalError
from engine.postgres.arrays import array_parser, format_array


def text_to_uuid(s: str) -> uuid.UUID:
    try:
        return uuid.UUID(s.strip())
    except ValueError:
        raise EvalError(f'invalid input syntax for type uuid: "{s}"') from None


def bytea_text(b: bytes) -> str:
    return "\\x" + b.hex()


def text_to_bytea(s: str) -> bytes:
    if s.startswith("\\x"):
        try:
            return bytes.fromhex(s[2:])
        except ValueError:
            raise EvalError(f'invalid hexadecimal data: "{s}"') from None
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif s[i + 1 : i + 2] == "\\":
            out.append(0x5C)
            i += 2
        elif len(s) >= i + 4 and all(ch in "01234567" for ch in s[i + 1 : i + 4]):
            out.append(int(s[i + 1 : i + 4], 8))
            i += 4
        else:
            raise EvalError("invalid input syntax for type bytea")
    return bytes(out)


# -- jsonb -------------------------------------------------------------------------------------
class _Number(str):
    """A JSON number's text as numeric would print it."""


def _number(text: str) -> _Number:
    d = Decimal(text)
    out = format(d, "f")
    return _Number("0" if d.is_zero() and "." not in out else out)


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    return dict(pairs)  # the last of duplicate keys wins, as in jsonb


_JSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
}


def _escape(s: str) -> str:
    """A JSON string as jsonb prints it: these escapes, other control characters as \\u00XX."""
    out = [_JSON_ESCAPES.get(ch) or (f"\\u{ord(ch):04x}" if ch < " " else ch) for ch in s]
    return '"' + "".join(out) + '"'


def jsonb_out(v: Any) -> str:
    """A parsed JSON value (``_parse_json``) as jsonb prints it."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, _Number):
        return str(v)
    if isinstance(v, str):
        return _escape(v)
    if isinstance(v, list):
        return "[" + ", ".join(jsonb_out(x) for x in v) + "]"
    keys = sorted(v, key=lambda k: (len(k.encode()), k.encode()))
    return "{" + ", ".join(f"{_escape(k)}: {jsonb_out(v[k])}" for k in keys) + "}"


def _parse_json(s: str) -> Any:
    try:
        return json.loads(
            s,
            parse_float=_number,
            parse_int=_number,
            parse_constant=_bad_constant,
            object_pairs_hook=_pairs,
        )
    except (ValueError, RecursionError):
        raise EvalError("invalid input syntax for type json") from None


def _bad_constant(name: str) -> None:
    raise ValueError(name)


def text_to_jsonb(s: str) -> str:
    v = _parse_json(s)
    if "\\u0000" in s:
        raise EvalError("unsupported Unicode escape sequence")
    return jsonb_out(v)


def text_to_json(s: str) -> str:
    """json input: checked as Postgres checks it, kept as written."""
    _parse_json(s)
    return s


def jsonb_get(doc: str, key: str | int, as_text: bool) -> str | None:
    """``doc -> key`` (jsonb text) or ``doc ->> key`` (text); None where Postgres gives NULL."""
    v = _parse_json(doc)
    if isinstance(key, int):
        if not isinstance(v, (list, dict)):
            v = [v]  # Postgres keeps a scalar as a one-element array: '"a"'::jsonb -> 0 is "a"
        if not isinstance(v, list):
            return None
        if key < 0:
            key += len(v)
        if not 0 <= key < len(v):
            return None
        v = v[key]
    else:
        if not isinstance(v, dict) or key not in v:
            return None
        v = v[key]
    if as_text:
        if v is None:
            return None
        if isinstance(v, str) and not isinstance(v, _Number):
            return v
    return jsonb_out(v)


def _contains(a: Any, b: Any, top: bool) -> bool:
    """jsonb ``a @> b``: objects by their keys' values, arrays by elements contained in some
    element (order and duplicates do not matter); a top-level array contains a primitive."""
    if isinstance(a, dict):
        return isinstance(b, dict) and all(
            k in a and _contains(a[k], v, False) for k, v in b.items()
        )
    if isinstance(a, list):
        if isinstance(b, list):
            return all(
                any(_contains(x, y, False) for x in a)
                if isinstance(y, (dict, list))
                else any(_same_scalar(x, y) for x in a)
                for y in b
            )
        return top and not isinstance(b, dict) and any(_same_scalar(x, b) for x in a)
    return not isinstance(b, (dict, list)) and _same_scalar(a, b)


def _same_scalar(x: Any, y: Any) -> bool:
    if isinstance(x, (dict, list)) or isinstance(y, (dict, list)):
        return False
    if isinstance(x, _Number) and isinstance(y, _Number):
        return Decimal(x) == Decimal(y)
    if isinstance(x, _Number) or isinstance(y, _Number):
        return False
    return type(x) is type(y) and x == y


def jsonb_contains(a: str, b: str) -> bool:
    return _contains(_parse_json(a), _parse_json(b), True)


def jsonb_has_key(doc: str, key: str) -> bool:
    """``doc ? key``: a top-level key of an object, or a string element of a top-level array."""
    v = _parse_json(doc)
    if isinstance(v, dict):
        return key in v
    if isinstance(v, list):
        return any(isinstance(x, str) and not isinstance(x, _Number) and x == key for x in v)
    return isinstance(v, str) and not isinstance(v, _Number) and v == key


def jsonb_typeof(doc: str) -> str:
    v = _parse_json(doc)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, _Number):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def jsonb_array_length(doc: str) -> int:
    v = _parse_json(doc)
    if isinstance(v, list):
        return len(v)
    if isinstance(v, dict):
        raise EvalError("cannot get array length of a non-array")
    raise EvalError("cannot get array length of a scalar")


# -- inet / cidr -------------------------------------------------------------------------------
def _address_text(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return f"::ffff:{a.ipv4_mapped}"
    return str(a)


def text_to_inet(s: str) -> str:
    """inet input (no blanks around the address, as Postgres)."""
    try:
        i = ipaddress.ip_interface(s)
    except ValueError:
        raise EvalError(f'invalid input syntax for type inet: "{s}"') from None
    addr = _address_text(i.ip)
    return addr if i.network.prefixlen == i.ip.max_prefixlen else f"{addr}/{i.network.prefixlen}"


def inet_text(v: str) -> str:
    """``inet::text``: the output with the prefix length always shown."""
    if "/" in v:
        return v
    return v + ("/128" if ":" in v else "/32")


_IPV4_CIDR = re.compile(r"([0-9]+(?:\.[0-9]+){0,3})(?:/([0-9]+))?")


def _ipv4_cidr(s: str) -> ipaddress.IPv4Network | None:
    """Postgres' IPv4 cidr input (inet_net_pton_ipv4): 1 to 4 decimal octets, the missing ones
    zero, and without a /width the width of the address class, widened to the octets given
    ('10' is 10.0.0.0/8, '1.5' 1.5.0.0/16, '192.168.1' 192.168.1.0/24). None: not of this form;
    raises ValueError for bits right of the mask."""
    m = _IPV4_CIDR.fullmatch(s)
    if m is None:
        return None
    octets = [int(o) for o in m.group(1).split(".")]
    if any(o > 255 for o in octets) or (m.group(2) is not None and int(m.group(2)) > 32):
        raise _BadSyntax
    if m.group(2) is not None:
        bits = int(m.group(2))
    else:
        first = octets[0]
        bits = (
            32
            if first >= 240
            else 8
            if first >= 224
            else 24
            if first >= 192
            else 16
            if first >= 128
            else 8
        )
        bits = max(bits, 8 * len(octets))
        if bits == 8 and first == 224:
            bits = 4
    address = ".".join(map(str, octets + [0] * (4 - len(octets))))
    return ipaddress.IPv4Network(f"{address}/{bits}", strict=True)


class _BadSyntax(ValueError):
    pass


def cidr_to_inet(v: str) -> str:
    """cidr -> inet: the same network as inet prints it (no /32 or /128 on a single address)."""
    address, _, bits = v.partition("/")
    return address if bits == ("128" if ":" in address else "32") else v


def text_to_cidr(s: str) -> str:
    """cidr input: text that is no network at all is invalid input syntax; a network with bits
    set right of its mask ('10.0.0.1/8') is an invalid cidr value, as Postgres says."""
    try:
        if _IPV4_CIDR.fullmatch(s) is None:
            ipaddress.ip_network(s, strict=False)
    except ValueError:
        raise EvalError(f'invalid input syntax for type cidr: "{s}"') from None
    try:
        n = _ipv4_cidr(s) or ipaddress.ip_network(s, strict=True)
    except _BadSyntax:
        raise EvalError(f'invalid input syntax for type cidr: "{s}"') from None
    except ValueError:
        raise EvalError(f'invalid cidr value: "{s}"') from None
    return f"{_address_text(n.network_address)}/{n.prefixlen}"


# -- enums ---------------------------------------------------------------------------------------
def enum_input(name: str, labels: tuple[str, ...]) -> Callable[[str], str]:
    allowed = frozenset(labels)

    def to_enum(s: str) -> str:
        if s not in allowed:
            raise EvalError(f'invalid input value for enum {name}: "{s}"')
        return s

    return to_enum


# -- arrays --------------------------------------------------------------------------------------
def array_text(value: tuple, element_text: Callable[[Any], str]) -> str:
    """Postgres' array output of ``value`` (nested tuples): an element quoted only when needed."""
    return format_array(value, element_text, always_quote=False)


def text_to_array(element: Callable[[bytes], Any]) -> Callable[[str], tuple]:
    """An array's input text -> nested tuples of ``element``'s values."""
    parse = array_parser(element)

    def to_array(s: str) -> tuple:
        try:
            return parse(s.encode())
        except (ValueError, IndexError):
            raise EvalError(f'malformed array literal: "{s}"') from None

    return to_array


def array_map(convert: Callable[[Any], Any]) -> Callable[[tuple], tuple]:
    """An array cast: ``convert`` applied to each non-NULL element, at any depth."""

    def cast(value: tuple) -> tuple:
        return tuple(
            cast(v) if isinstance(v, tuple) else None if v is None else convert(v) for v in value
        )

    return cast


def array_subscript(value: tuple, index: int) -> Any:
    """``a[i]`` (1-based; out of range, or one subscript of a multi-dimensional array: NULL)."""
    if 1 <= index <= len(value):
        v = value[index - 1]
        return None if isinstance(v, tuple) else v
    return None


def cardinality(value: tuple) -> int:
    """The number of elements of an array, of all its dimensions."""
    return sum(cardinality(v) if isinstance(v, tuple) else 1 for v in value)
