"""One text form per value, made alike on both sides of a comparison.

The source database computes it in SQL (`ColumnRule.sql`), the lake side from the table's Arrow
columns (`ColumnRule.lake`); equal values give equal text whatever the types on each side:

- integers, and dates and times that Debezium sends as numbers (days, or milli- or microseconds
  since the epoch or midnight): the number;
- `real` and `double precision`: the IEEE 754 bits as an integer, so that no printing of a float
  differs between PostgreSQL and Python;
- `numeric` (`decimal.handling.mode: string`), text of any Unicode, JSON, UUIDs: the text as
  PostgreSQL prints it, which is what Debezium sends;
- `timestamp with time zone` (Debezium's ISO-8601 text): microseconds since the epoch;
- `bytea` (`binary.handling.mode: hex`): lowercase hex;
- booleans: `t` or `f`; NULL: no text (the row's text marks it apart from an empty string).

A row's text is its columns' texts, each `<characters>:<text>` or `N` for NULL, joined by
commas: no two rows have the same text unless their values are equal.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.errors import StreamerError


class UncomparableColumnError(StreamerError, ValueError):
    """A source column whose values this comparison has no common form for."""


@dataclass(frozen=True)
class SourceColumn:
    """A column of the source table as its catalog describes it."""

    name: str
    data_type: str  # information_schema's: integer, numeric, timestamp with time zone, ...
    datetime_precision: int | None = None
    character_length: int | None = None


@dataclass(frozen=True)
class ColumnRule:
    """How one column becomes text: `sql` over the source column, `kind` for the lake side, and
    `key_sql`, the expression a key column is ordered and compared by (its own type's order, or
    the bytes' order of text)."""

    column: SourceColumn
    sql: str
    kind: str  # integer, float32, float64, boolean, text, timestamptz, hex
    key_sql: str

    def lake(self, values: pa.Array) -> pa.Array:
        """The lake column's values as text (nulls stay null)."""
        return _lake_text(self.kind, values, self.column.name)

    def lake_key(self, values: pa.Array) -> pa.Array:
        """The lake column's values as `key_sql` orders them: integers, or text by its bytes."""
        text = self.lake(values)
        return pc.cast(text, pa.int64()) if self.kind in NUMBERED else text


#: Kinds whose keys are ordered as integers; every other key is ordered by its text's bytes.
NUMBERED = ("integer", "timestamptz")


def column_rule(column: SourceColumn) -> ColumnRule:
    """The rule of a source column; `UncomparableColumnError` for a type without one."""
    sql, kind = _text_sql(column)
    if column.data_type in INTEGERS:  # the column itself, so that its index serves a range
        key = f'"{column.name}"'
    elif kind in NUMBERED:
        key = sql.removesuffix("::text")
    else:
        key = f'({sql}) COLLATE "C"'
    return ColumnRule(column, sql, kind, key)


INTEGERS = ("smallint", "integer", "bigint")


def _text_sql(column: SourceColumn) -> tuple[str, str]:
    c = f'"{column.name}"'
    t = column.data_type
    if t in INTEGERS:
        return f"{c}::int8::text", "integer"
    if t == "real":
        return f"('x' || encode(float4send({c}), 'hex'))::bit(32)::int4::text", "float32"
    if t == "double precision":
        return f"('x' || encode(float8send({c}), 'hex'))::bit(64)::int8::text", "float64"
    if t == "boolean":
        return f"CASE WHEN {c} THEN 't' WHEN NOT {c} THEN 'f' END", "boolean"
    if t == "date":
        return f"({c} - date '1970-01-01')::int8::text", "integer"
    if t == "timestamp without time zone":
        unit = 1000 if (column.datetime_precision if column.datetime_precision is not None else 6) <= 3 else 1_000_000
        return f"floor(extract(epoch from {c}) * {unit})::int8::text", "integer"
    if t == "time without time zone":
        return f"floor(extract(epoch from {c}) * 1000000)::int8::text", "integer"
    if t == "timestamp with time zone":
        return f"floor(extract(epoch from {c}) * 1000000)::int8::text", "timestamptz"
    if t == "bytea":
        return f"encode({c}, 'hex')", "hex"
    if t == "character":  # its text keeps the padding, as Debezium sends it
        # `%%`: the statements take parameters; format() makes '' of NULL
        return f"CASE WHEN {c} IS NOT NULL THEN format('%%s', {c}) END", "text"
    if t in ("text", "character varying", "numeric", "json", "jsonb", "uuid"):
        return f"{c}::text", "text"
    raise UncomparableColumnError(f"column {column.name!r} of type {t} has no common form to compare by")


def row_text_sql(rules: list[ColumnRule]) -> str:
    """The row's text, in SQL (see the module doc)."""
    parts = [f"coalesce(char_length({r.sql})::text || ':' || {r.sql}, 'N')" for r in rules]
    return " || ',' || ".join(parts) if parts else "''"


def row_hash_sql(rules: list[ColumnRule]) -> str:
    """The row's text hashed to a signed 64-bit integer: MD5's first eight bytes."""
    return f"('x' || left(md5({row_text_sql(rules)}), 16))::bit(64)::int8"


def lake_row_texts(texts: list[pa.Array], rows: int) -> pa.Array:
    """The rows' texts, from the texts of their columns (`ColumnRule.lake`; see the module doc)."""
    if not texts:
        return pa.array([""] * rows, pa.string())
    parts = []
    for text in texts:
        framed = pc.binary_join_element_wise(pc.cast(pc.utf8_length(text), pa.string()), text, ":")
        parts.append(pc.fill_null(framed, "N"))
    return pc.binary_join_element_wise(*parts, ",")


def row_hashes(texts: pa.Array) -> np.ndarray:
    """Each row text's hash as `row_hash_sql` makes it."""
    md5 = hashlib.md5
    return np.fromiter(
        (int.from_bytes(md5(t.encode()).digest()[:8], "big", signed=True) for t in texts.to_pylist()),
        dtype=np.int64,
        count=len(texts),
    )


def _lake_text(kind: str, values: pa.Array, name: str) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if kind == "integer":
        return pc.cast(values, pa.string())
    if kind in ("float32", "float64"):
        width = np.float32 if kind == "float32" else np.float64
        bits = np.int32 if kind == "float32" else np.int64
        floats = pc.cast(values, pa.float32() if kind == "float32" else pa.float64())
        raw = np.asarray(floats.fill_null(0), dtype=width).view(bits)
        return pa.array(raw, mask=np.asarray(floats.is_null())).cast(pa.string())
    if kind == "boolean":
        return pc.if_else(values, "t", "f")
    if kind == "timestamptz":
        stamps = pc.cast(pc.replace_substring(values, "Z", "+00:00"), pa.timestamp("us", "UTC"))
        return pc.cast(pc.cast(stamps, pa.int64()), pa.string())
    if kind == "hex":
        return pc.utf8_lower(values)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values
    raise UncomparableColumnError(f"the lake's column {name!r} is {values.type}, where the source has text")
