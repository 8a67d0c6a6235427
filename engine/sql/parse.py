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

# Function names sqlglot reads as constructs of other dialects: left as plain (anonymous) calls,
# which the expression compiler refuses as Postgres would (Postgres has no if(); its convert()
# converts bytea encodings; json_extract_path() takes json, which incview does not compute on).
_NOT_POSTGRES_FUNCTIONS = {"IF", "CONVERT", "JSON_EXTRACT_PATH", "JSON_EXTRACT_PATH_TEXT"}


def _like(args: list) -> exp.Expression:
    """Postgres' ``like(string, pattern)`` (sqlglot reads SQLite's ``like(pattern, string)``)."""
    if len(args) != 2:
        return exp.Anonymous(this="like", expressions=args)
    return exp.Like(this=args[0], expression=args[1])


class _Dialect(Postgres):
    """Postgres, except ``date_part(...)`` stays a function call (sqlglot turns it into EXTRACT,
    which returns numeric while date_part returns double precision), an interval literal
    stays whole: sqlglot reads ``interval '2 days 01:00'`` as ``interval '2' days`` (and drops
    ``ago``), keeping only the first "number unit" of a string that has more; ``like(s, p)`` is
    ``s LIKE p``; and ``if()``, ``convert()``, ``json_extract_path[_text]()`` are plain calls."""

    class Parser(Postgres.Parser):
        FUNCTION_PARSERS = {
            k: v
            for k, v in Postgres.Parser.FUNCTION_PARSERS.items()
            if k != "DATE_PART" and k not in _NOT_POSTGRES_FUNCTIONS
        }
        NO_PAREN_FUNCTION_PARSERS = {
            k: v
            for k, v in Postgres.Parser.NO_PAREN_FUNCTION_PARSERS.items()
            if k not in _NOT_POSTGRES_FUNCTIONS
        }
        FUNCTIONS = {
            **{
                k: v
                for k, v in Postgres.Parser.FUNCTIONS.items()
                if k not in _NOT_POSTGRES_FUNCTIONS
            },
            "LIKE": _like,
        }

        def _parse_interval_span(self, this, parse_function_unit: bool = True):
            if (
                this is not None
                and this.is_string
                and exp.INTERVAL_STRING_RE.search(this.name)
                and not exp.INTERVAL_STRING_RE.fullmatch(this.name)
            ):
                return self.expression(exp.Interval(this=this))
            return super()._parse_interval_span(this, parse_function_unit)


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


MAX_SQL_BYTES = 1 << 20  # a view's SQL text; more is a mistake (or an attack), not a view
MAX_NUMBER_DIGITS = 1000  # numeric's largest declared precision; Python refuses > 4300


def _line_col(sql: str, index: int) -> str:
    line = sql.count("\n", 0, index) + 1
    return f"line {line}, column {index - (sql.rfind(chr(10), 0, index) + 1) + 1}"


def _check_text(sql: object) -> str:
    """``sql`` as text the parser and Postgres can take: a str, of valid UTF-8, without NUL
    characters (Postgres text cannot hold them), at most ``MAX_SQL_BYTES`` long."""
    if not isinstance(sql, str):
        raise UnsupportedSQL(f"a view's SQL must be a str, not {type(sql).__name__}")
    try:
        size = len(sql.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise UnsupportedSQL(
            f"the view's SQL is not valid UTF-8 text: a lone surrogate at {_line_col(sql, e.start)}"
        ) from None
    if size > MAX_SQL_BYTES:
        raise UnsupportedSQL(
            f"the view's SQL is {size} bytes, over the limit of {MAX_SQL_BYTES} bytes: keep "
            "large constants in a table and join it"
        )
    nul = sql.find("\x00")
    if nul >= 0:
        raise UnsupportedSQL(
            f"the view's SQL contains a NUL character at {_line_col(sql, nul)}; Postgres text "
            "cannot hold NUL: remove it"
        )
    return sql


def _check_contents(query: exp.Expression) -> None:
    """What the parser accepts inside a SELECT but no view may hold: data-modifying statements
    (in a WITH), query parameters and numbers too long to be values."""
    for node in query.walk():
        if isinstance(node, (exp.Insert, exp.Update, exp.Delete, exp.Merge)):
            kind = type(node).__name__.upper()
            raise unsupported(
                node,
                f"a data-modifying statement ({kind}) inside a WITH or subquery cannot be part "
                "of a view",
                "A view only reads: remove the statement",
            )
        if isinstance(node, (exp.Placeholder, exp.Parameter)) and not isinstance(
            node.parent, (exp.Limit, exp.Offset)
        ):
            raise unsupported(
                node,
                "query parameters ($1, %s, %(name)s, :name, ?) are not supported",
                "A view's SQL must be complete: write the value itself into the query",
            )
        if isinstance(node, exp.Literal) and not node.is_string:
            digits = sum(ch.isdigit() for ch in node.this)
            if digits > MAX_NUMBER_DIGITS:
                raise UnsupportedSQL(
                    f"a numeric literal of {digits} digits{at(node)}, over the limit of "
                    f"{MAX_NUMBER_DIGITS}: {node.this[:20]}..."
                )


def parse_query(sql: str) -> exp.Expression:
    """The single SELECT statement in ``sql``; raises ``UnsupportedSQL`` otherwise."""
    sql = _check_text(sql)
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
    _check_contents(query)
    # Postgres folds unquoted identifiers to lower case (FROM Orders is orders); quoted keep case
    return normalize_identifiers(query, dialect=DIALECT)
