"""The planner's front end: parse a view's SQL with sqlglot and check it is a query we can plan.

``parse_query`` accepts exactly one PostgreSQL SELECT (with WITH / set operations), refuses DML,
DDL and several statements, folds unquoted identifiers to lower case as
Postgres does, and turns sqlglot's parse errors into ``UnsupportedSQL`` carrying the
line and column. ``position`` / ``at`` give any node's position for messages elsewhere in the
planner. This module must not resolve names or build plans.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from engine.errors import UnsupportedSQL


class _Dialect(Postgres):
    """Postgres, except ``date_part(...)`` stays a function call (sqlglot turns it into EXTRACT,
    which returns numeric while date_part returns double precision)."""

    class Parser(Postgres.Parser):
        FUNCTION_PARSERS = {
            k: v for k, v in Postgres.Parser.FUNCTION_PARSERS.items() if k != "DATE_PART"
        }


DIALECT = _Dialect()  # the one dialect every part of the planner parses and prints with


def position(node: exp.Expression | None) -> tuple[int, int] | None:
    """(line, column) of the earliest token under ``node`` that sqlglot recorded, if any."""
    if node is None:
        return None
    best = None
    for n in node.walk():
        meta = n.meta
        if meta and "line" in meta:
            key = (meta.get("start", 0), meta["line"], meta["col"])
            if best is None or key < best:
                best = key
    if best is None:
        return None
    # sqlglot's col is the token's last column; report where the token starts
    line, col = best[1], best[2]
    text_len = 0
    for n in node.walk():
        if n.meta and n.meta.get("start", -1) == best[0]:
            text_len = n.meta.get("end", best[0]) - best[0]
            break
    return line, max(1, col - text_len)


def at(node: exp.Expression | None) -> str:
    """' at line L, column C' for messages (empty when unknown)."""
    pos = position(node)
    return f" at line {pos[0]}, column {pos[1]}" if pos else ""


def unsupported(node: exp.Expression | None, what: str, hint: str | None = None) -> UnsupportedSQL:
    msg = f"{what}{at(node)}"
    if node is not None:
        snippet = node.sql(dialect=DIALECT)
        if len(snippet) > 80:
            snippet = snippet[:77] + "..."
        msg += f": {snippet}"
    if hint:
        msg += f". {hint}"
    return UnsupportedSQL(msg)


_QUERY_TYPES = (exp.Select, exp.Union, exp.Except, exp.Intersect)


_NOT_AFTER_COMMA = {"FROM", "WHERE", "GROUP_BY", "HAVING", "ORDER_BY", "LIMIT", "R_PAREN"}


def _check_trailing_commas(sql: str) -> None:
    """sqlglot accepts ``SELECT a, FROM t``; Postgres does not."""
    try:
        tokens = DIALECT.tokenize(sql)
    except TokenError:
        return  # parse_query reports it
    for tok, nxt in zip(tokens, tokens[1:], strict=False):
        if tok.token_type.name == "COMMA" and nxt.token_type.name in _NOT_AFTER_COMMA:
            col = max(1, nxt.col - len(nxt.text) + 1)
            raise UnsupportedSQL(
                f"syntax error at line {nxt.line}, column {col}: a comma followed by "
                f"{nxt.text.upper()!r}; remove the trailing comma"
            )


def parse_query(sql: str) -> exp.Expression:
    """The single SELECT statement in ``sql``; raises ``UnsupportedSQL`` otherwise."""
    _check_trailing_commas(sql)
    try:
        statements = sqlglot.parse(sql, dialect=DIALECT)
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        line, col = err.get("line"), err.get("col")
        where = f" at line {line}, column {col}" if line else ""
        desc = err.get("description", str(e)).split("<Token")[0].strip().rstrip(":")
        near = err.get("highlight")
        raise UnsupportedSQL(
            f"syntax error{where}: {desc}" + (f" near {near!r}" if near else "")
        ) from None
    except TokenError as e:
        raise UnsupportedSQL(f"syntax error: {e}") from None
    statements = [s for s in statements if s is not None]
    if not statements:
        raise UnsupportedSQL("the view's SQL is empty: give a SELECT statement")
    if len(statements) > 1:
        raise unsupported(
            statements[1],
            "a view is one SELECT statement, found several",
            "Remove the extra statements",
        )
    query = statements[0]
    if not isinstance(query, _QUERY_TYPES):
        kind = type(query).__name__.upper()
        raise unsupported(query, f"a view must be a SELECT query, not {kind}")
    if isinstance(query, exp.Select) and query.args.get("into"):
        raise unsupported(query.args["into"], "SELECT INTO is not a query", "Remove INTO")
    # Postgres folds unquoted identifiers to lower case (FROM Orders is orders); quoted keep case
    return normalize_identifiers(query, dialect=DIALECT)
