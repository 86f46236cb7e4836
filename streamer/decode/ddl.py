"""The `json` format's declared fields: a Spark DDL column list (`id STRING NOT NULL, amount
DOUBLE, tags ARRAY<STRING>`) read into an Arrow schema without a Spark session, so that a config
is checked before Spark starts.

It reads what Spark's `createDataFrame([], ddl)` reads, and gives what Spark's `to_arrow_schema`
gives for it: names as written (backquoted ones too), `:` after a name allowed, `NOT NULL`, and
`COMMENT '...'` kept as Spark keeps it, in the field's metadata. Every Spark type the json format
can decode is known: BOOLEAN, TINYINT/BYTE, SMALLINT/SHORT, INT/INTEGER, BIGINT/LONG, FLOAT/REAL,
DOUBLE, DECIMAL/DEC/NUMERIC(p, s), STRING, BINARY, DATE, TIMESTAMP/TIMESTAMP_LTZ, TIMESTAMP_NTZ,
VOID, ARRAY<t>, MAP<k, v> and STRUCT<name: t, ...>. CHAR(n) and VARCHAR(n), which
`createDataFrame` refuses, and the INTERVAL types, which the json decoder cannot read, are
problems. Each column is read on its own, so one bad column does not hide another's problem.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

import pyarrow as pa

from streamer.errors import StreamerError

__all__ = ["DdlProblem", "parse_ddl"]

#: Spark's field metadata key for a column's comment.
COMMENT_KEY = b"SPARK::metadata::json"
MAX_DECIMAL_PRECISION = 38

_SIMPLE_TYPES = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "BYTE": pa.int8(),
    "SMALLINT": pa.int16(),
    "SHORT": pa.int16(),
    "INT": pa.int32(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "LONG": pa.int64(),
    "FLOAT": pa.float32(),
    "REAL": pa.float32(),
    "DOUBLE": pa.float64(),
    "STRING": pa.string(),
    "BINARY": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP_LTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP_NTZ": pa.timestamp("us"),
    "VOID": pa.null(),
}
_DECIMALS = ("DECIMAL", "DEC", "NUMERIC")
_NESTED = ("ARRAY", "MAP", "STRUCT")
_KNOWN = (*_SIMPLE_TYPES, *_DECIMALS, *_NESTED)
_REFUSED = {
    "CHAR": "use STRING",
    "CHARACTER": "use STRING",
    "VARCHAR": "use STRING",
    "INTERVAL": "the json format cannot decode intervals; use BIGINT (e.g. milliseconds) or STRING",
}

_TOKEN = re.compile(
    r"\s*(?:(`(?:[^`]|``)*`)|('(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\")|([A-Za-z0-9_]+)"
    r"|(<|>|\(|\)|,|:)|(\S))"
)


@dataclass(frozen=True)
class DdlProblem:
    """What is wrong with one column of a DDL: `name` is the column's (None when there is none)."""

    name: str | None
    position: int
    text: str

    def __str__(self) -> str:
        return f"column {self.name!r}: {self.text}" if self.name else f"column {self.position}: {self.text}"


class _UnreadableDdlError(StreamerError, ValueError):
    """One column of a DDL does not read; `parse_ddl` keeps it as that column's problem."""


def parse_ddl(ddl: str) -> tuple[pa.Schema, list[DdlProblem]]:
    """The Arrow schema of a DDL column list, and every column's problem: the schema holds the
    columns that have none."""
    fields, problems = [], []
    for position, text in enumerate(_top_level_parts(ddl), 1):
        reader = _Reader(text)
        name = reader.peek_text()
        try:
            fields.append(reader.column(top_level=True))
            reader.expect_end()
        except _UnreadableDdlError as e:
            problems.append(
                DdlProblem(_unquoted(name) if name and name[0] not in ",:<>()'\"" else None, position, str(e))
            )
    if not fields and not problems:
        problems.append(DdlProblem(None, 1, "no columns: give `name TYPE, ...`"))
    return pa.schema(fields), problems


def _top_level_parts(ddl: str) -> list[str]:
    """The DDL split at commas outside brackets, parentheses and quotes."""
    parts, depth, start = [], 0, 0
    for match in _TOKEN.finditer(ddl):
        symbol = match.group(4)
        if symbol in ("<", "("):
            depth += 1
        elif symbol in (">", ")"):
            depth -= 1
        elif symbol == "," and depth == 0:
            parts.append(ddl[start : match.start(4)])
            start = match.end()
    tail = ddl[start:]
    if tail.strip() or parts:
        parts.append(tail)
    return parts


def _suggestion(word: str) -> str:
    """The known type meant by a misspelt one (INTEGR is INTEGER; BIGINTEGER, which starts with one,
    BIGINT), else the list."""
    prefixes = sorted((k for k in _KNOWN if word.startswith(k) and len(k) > 2), key=len, reverse=True)
    close = (
        difflib.get_close_matches(word, _KNOWN, n=1, cutoff=0.85)
        or prefixes
        or difflib.get_close_matches(word, _KNOWN, n=1, cutoff=0.6)
    )
    if close:
        return f"did you mean {close[0]}?"
    return (
        "use a Spark SQL type: BOOLEAN, INT, BIGINT, DOUBLE, DECIMAL(p, s), STRING, BINARY, DATE, "
        "TIMESTAMP, ARRAY<t>, MAP<k, v> or STRUCT<name: t, ...>"
    )


def _unquoted(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


class _Reader:
    """Reads one column (or one field of a STRUCT, one type) from its tokens."""

    def __init__(self, text: str):
        self.tokens = [m.group(m.lastindex) for m in _TOKEN.finditer(text) if m.lastindex]
        self.at = 0

    def peek_text(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def next(self, what: str) -> str:
        token = self.peek_text()
        if token is None:
            raise _UnreadableDdlError(f"{what} expected at the end")
        self.at += 1
        return token

    def take(self, *words: str) -> bool:
        token = self.peek_text()
        if token is not None and token.upper() in words:
            self.at += 1
            return True
        return False

    def expect(self, symbol: str, after: str) -> None:
        token = self.next(f"'{symbol}' after {after}")
        if token != symbol:
            raise _UnreadableDdlError(f"'{symbol}' expected after {after}, got {token!r}")

    def expect_end(self) -> None:
        token = self.peek_text()
        if token is not None:
            raise _UnreadableDdlError(
                f"unexpected {token!r} after the type (a column is `name TYPE [NOT NULL] "
                f"[COMMENT '...']`; columns are separated by commas)"
            )

    def column(self, top_level: bool) -> pa.Field:
        name = self.next("a column name")
        if not (name.startswith("`") or re.fullmatch(r"[A-Za-z0-9_]*[A-Za-z_][A-Za-z0-9_]*", name)):
            raise _UnreadableDdlError(f"{name!r} is not a column name (quote other names in backquotes)")
        self.take(":")
        kind = self.type("" if top_level else f" for field {_unquoted(name)!r}")
        nullable = True
        if self.take("NOT"):
            if not self.take("NULL"):
                raise _UnreadableDdlError("NOT NULL expected")
            nullable = False
        metadata = None
        if self.take("COMMENT"):
            text = self._string("a comment in quotes")
            while (self.peek_text() or " ")[0] in "'\"":  # adjacent literals are one, as in Spark SQL
                text += self._string("")
            metadata = {COMMENT_KEY: json.dumps({"comment": text}).encode()}
        return pa.field(_unquoted(name), kind, nullable, metadata)

    def _string(self, what: str) -> str:
        literal = self.next(what)
        quote = literal[0]
        if quote not in "'\"":
            raise _UnreadableDdlError(f"{what} expected, got {literal!r}")
        return re.sub(r"\\(.)", r"\1", literal[1:-1].replace(quote * 2, quote))

    def type(self, of: str) -> pa.DataType:
        """One type; `of` says whose it is in messages (" for the keys of ..."), "" for a column's."""
        word = self.next(f"a type{of}")
        upper = word.upper()
        if upper in _SIMPLE_TYPES:
            return _SIMPLE_TYPES[upper]
        if upper in _DECIMALS:
            return self._decimal(of)
        if upper == "ARRAY":
            self.expect("<", "ARRAY")
            element = self.type(f" for the elements of ARRAY{of}")
            self.expect(">", "the element type of ARRAY<...")
            return pa.list_(element)
        if upper == "MAP":
            self.expect("<", "MAP")
            key = self.type(f" for the keys of MAP{of}")
            self.expect(",", "the key type of MAP<...")
            value = self.type(f" for the values of MAP{of}")
            self.expect(">", "the value type of MAP<...")
            return pa.map_(key, value)
        if upper == "STRUCT":
            return self._struct(of)
        if upper in _REFUSED:
            raise _UnreadableDdlError(f"type {word} is not supported here: {_REFUSED[upper]}")
        raise _UnreadableDdlError(f"unknown type {word!r}{of}; {_suggestion(upper)}")

    def _decimal(self, of: str) -> pa.DataType:
        precision, scale = 10, 0
        if self.take("("):
            precision = self._number("the precision of DECIMAL")
            if self.take(","):
                scale = self._number("the scale of DECIMAL")
            self.expect(")", "DECIMAL(p, s")
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
            raise _UnreadableDdlError(
                f"DECIMAL({precision}, {scale}){of}: the precision is 1 to "
                f"{MAX_DECIMAL_PRECISION} and the scale at most the precision"
            )
        return pa.decimal128(precision, scale)

    def _number(self, what: str) -> int:
        token = self.next(what)
        if not token.isdigit():
            raise _UnreadableDdlError(f"{what} should be a whole number, got {token!r}")
        return int(token)

    def _struct(self, of: str) -> pa.DataType:
        self.expect("<", "STRUCT")
        fields: list[pa.Field] = []
        if self.take(">"):
            return pa.struct(fields)
        while True:
            fields.append(self.column(top_level=False))
            if self.take(">"):
                return pa.struct(fields)
            self.expect(",", f"a field of STRUCT<...>{of}")
