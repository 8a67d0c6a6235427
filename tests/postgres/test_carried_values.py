"""engine.sql.carried_values against Postgres' own input and output functions: a literal
converted in Python equals what Postgres stores and prints for it (jsonb's key order, duplicate
keys and numbers; inet/cidr; bytea; arrays' quoting), one query per type."""

from __future__ import annotations

import pytest

from engine.dataflow.errs import EvalError
from engine.sql import carried_values as CV

JSONB = [
    '{"b": 1, "a": 2}',
    '{"aa": 1, "b": 2, "a": {"z": [1, 2.50, -0, 1e2, 1.5e-3]}}',
    '{"k": 1, "k": 2}',
    '["x\\ny", "tab\\t", "quote\\"", "slash/", "\\u00e9t\\u00e9", "ctl\\u0001"]',
    "true",
    "null",
    "-12.3400",
    '""',
    '{"é": 1, "e": 2, "ee": 3}',
]
INET = ["10.0.0.1/8", "10.0.0.1", "10.0.0.1/32", "::1", "::ffff:1.2.3.4", "2001:DB8::1/64"]
CIDR = ["10.0.0.0/8", "192.168.0.0/16", "2001:db8::/32", "1.2.3.4/32", "10", "1.5", "224", "10/8"]
CIDR += ["192.168.1", "010.0.0.0/8", "0/0", "240"]  # abbreviated IPv4: the class width
BYTEA = ["\\x0102ff", "\\x", "abc", "a\\\\b", "\\001\\377"]
ARRAYS = ["{}", '{a,NULL,""}', '{"x y","q\\"u",null_ish,"NULL","{br}"}', "{{a,b},{c,d}}"]


@pytest.mark.parametrize(
    "values, typ, convert",
    [
        (JSONB, "jsonb", CV.text_to_jsonb),
        (INET, "inet", CV.text_to_inet),
        (CIDR, "cidr", CV.text_to_cidr),
        (BYTEA, "bytea", lambda s: CV.bytea_text(CV.text_to_bytea(s))),
        (ARRAYS, "text[]", lambda s: CV.array_text(CV.text_to_array(bytes.decode)(s), str)),
    ],
    ids=["jsonb", "inet", "cidr", "bytea", "text-array"],
)
def test_literals_as_postgres_reads_and_prints_them(pg_conn, values, typ, convert):
    printed = pg_conn.execute(
        f"SELECT format('%%s', v::{typ}) FROM unnest(%s::text[]) WITH ORDINALITY AS u(v, i) "
        "ORDER BY i",
        (values,),
    ).fetchall()
    assert [convert(v) for v in values] == [p for (p,) in printed]


def test_inet_cast_to_text_shows_the_prefix(pg_conn):
    values = [CV.text_to_inet(v) for v in INET]
    want = pg_conn.execute(
        "SELECT v::inet::text FROM unnest(%s::text[]) WITH ORDINALITY AS u(v, i) ORDER BY i",
        (INET,),
    ).fetchall()
    assert [CV.inet_text(v) for v in values] == [w for (w,) in want]


def test_jsonb_get_as_postgres(pg_conn):
    doc = CV.text_to_jsonb('{"x": 1.50, "s": "t\\"x", "o": {"b": [true, null]}, "n": null}')
    for key in ["x", "s", "o", "n", "missing"]:
        for op, as_text in (("->", False), ("->>", True)):
            (want,) = pg_conn.execute(f"SELECT (%s::jsonb {op} %s)::text", (doc, key)).fetchone()
            assert CV.jsonb_get(doc, key, as_text) == want, (key, op)
    arr = CV.text_to_jsonb('[1, "two", [3]]')
    for i in [0, 1, 2, 3, -1, -4]:
        (want,) = pg_conn.execute("SELECT (%s::jsonb -> %s)::text", (arr, i)).fetchone()
        assert CV.jsonb_get(arr, i, False) == want, i


def test_bad_literals_raise_postgres_messages():
    for fn, bad in [
        (CV.text_to_uuid, "nope"),
        (CV.text_to_jsonb, "{bad"),
        (CV.text_to_inet, "300.1.1.1"),
        (CV.text_to_cidr, "10.0.0.1/8"),
        (CV.enum_input("mood", ("ok",)), "angry"),
    ]:
        with pytest.raises(EvalError):
            fn(bad)


DOCS = [
    '{"a": 1, "b": [1, 2, {"c": "x"}], "n": null}',
    '[1, "a", [2, 3], {"k": true}]',
    '"a"',
    "1.50",
    "null",
    "[]",
    "{}",
]
PROBES = [
    '{"a": 1}',
    '{"a": 1.0}',
    '{"b": [2]}',
    '{"b": [{"c": "x"}]}',
    '{"n": null}',
    "[1]",
    '["a", 1]',
    "[[3]]",
    "[3]",
    '"a"',
    "1",
    "1.5",
    "{}",
    "[]",
    '[{"k": true}]',
]


def test_jsonb_containment_keys_and_functions_as_postgres(pg_conn):
    docs = [CV.text_to_jsonb(d) for d in DOCS]
    probes = [CV.text_to_jsonb(p) for p in PROBES]
    for d in docs:
        for p in probes:
            (want,) = pg_conn.execute("SELECT %s::jsonb @> %s::jsonb", (d, p)).fetchone()
            assert CV.jsonb_contains(d, p) is want, (d, p)
        for key in ["a", "b", "k", "x", "1"]:
            (want,) = pg_conn.execute("SELECT %s::jsonb ? %s", (d, key)).fetchone()
            assert CV.jsonb_has_key(d, key) is want, (d, key)
        (typ,) = pg_conn.execute("SELECT jsonb_typeof(%s::jsonb)", (d,)).fetchone()
        assert CV.jsonb_typeof(d) == typ
        if typ == "array":
            (n,) = pg_conn.execute("SELECT jsonb_array_length(%s::jsonb)", (d,)).fetchone()
            assert CV.jsonb_array_length(d) == n
        else:
            with pytest.raises(EvalError):
                CV.jsonb_array_length(d)
