"""The columns a transform makes, as far as they can be known without Spark.

A transform is a Spark SQL query of the view `source`. Analysing any query takes Spark's analyser
(functions, casts, subqueries); a plain `SELECT <list> FROM source [alias] [WHERE ...]`, the usual
transform, is read here from its tokens:

- `*`, `source.*` (or `<alias>.*`) and `* EXCEPT (a, b)`: source's columns, with their types;
- a column reference, `order_id`, `source.order_id` or a struct field `kafka_key.id`, with or
  without an alias: the column must exist in source (or the field in the struct), and its type is
  known;
- any other expression: its name only when it has an alias (`amount * 100 AS cents`, or without
  AS after a closing parenthesis or END: `upper(region) region_code`), and no type.

What is not read here is left to Spark when the job starts: expressions themselves (functions,
their arguments, casts), WHERE, GROUP BY and the rest, and any query of another shape (WITH, a
join, a UNION, a subquery in FROM), for which nothing is known. An output column named by Spark
from its expression (`(amount * 100)`) leaves the list incomplete.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

import pyarrow as pa

_TOKEN = re.compile(
    r"\s+|--[^\n]*|/\*.*?\*/"  # space and comments
    r"|(`(?:[^`]|``)*`)"  # 1: a quoted identifier
    r"|('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"  # 2: a string
    r"|([A-Za-z_][A-Za-z0-9_]*)"  # 3: a word
    r"|(\d[\w.]*)"  # 4: a number
    r"|(.)",  # 5: a symbol
    re.DOTALL,
)
#: Words that end a FROM clause of one relation.
_CLAUSES = {
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "WINDOW",
    "CLUSTER",
    "DISTRIBUTE",
    "SORT",
    "QUALIFY",
}
#: Words at the top level of a query that make it more than one SELECT of source.
_OTHER_SHAPES = {
    "UNION",
    "INTERSECT",
    "EXCEPT",
    "MINUS",
    "JOIN",
    "LATERAL",
    "PIVOT",
    "UNPIVOT",
    "TABLESAMPLE",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "CROSS",
    "NATURAL",
    "ANTI",
    "SEMI",
}
#: SQL words that cannot be an alias.
_RESERVED = {
    "FROM",
    "AS",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "TRUE",
    "FALSE",
    "IS",
    "IN",
    "LIKE",
    "RLIKE",
    "BETWEEN",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "DISTINCT",
    "ALL",
    "SELECT",
    *_CLAUSES,
    *_OTHER_SHAPES,
}


@dataclass(frozen=True)
class _Token:
    text: str
    kind: str  # "name" (a word or a quoted identifier), "string", "number", "symbol"

    @property
    def name(self) -> str:
        """An identifier as Spark reads it."""
        return self.text[1:-1].replace("``", "`") if self.text.startswith("`") else self.text

    def is_word(self, *words: str) -> bool:
        return self.kind == "name" and not self.text.startswith("`") and self.text.upper() in words


@dataclass
class TransformColumns:
    """What is known of a transform's output: `fields` by name (None: a column whose type is
    Spark's to say), whether they are all of it (`complete`), and the references it makes to
    columns source does not have (`problems`)."""

    fields: dict[str, pa.DataType | None] = field(default_factory=dict)
    complete: bool = False
    problems: list[str] = field(default_factory=list)

    def find(self, name: str) -> str | None:
        """The output column `name` means, compared as Spark does, without case."""
        return next((n for n in self.fields if n.lower() == name.lower()), None)


def transform_columns(sql: str, source: pa.Schema) -> TransformColumns:
    """What can be known of the columns `sql`, a query of the view `source`, makes."""
    tokens = _tokens(sql)
    if not tokens or not tokens[0].is_word("SELECT"):
        return TransformColumns()
    select, rest = _split_at_from(tokens[1:])
    alias = _single_source_alias(rest) if rest is not None else None
    if alias is None:
        return TransformColumns()
    if select and select[0].is_word("DISTINCT", "ALL"):
        select = select[1:]
    out = TransformColumns(complete=True)
    qualifiers = {"source", alias.lower()}
    for item in _split_commas(select):
        _read_item(item, source, qualifiers, out)
    return out


def _tokens(sql: str) -> list[_Token]:
    kinds = {1: "name", 2: "string", 3: "name", 4: "number", 5: "symbol"}
    return [_Token(m.group(m.lastindex), kinds[m.lastindex]) for m in _TOKEN.finditer(sql) if m.lastindex]


def _top_level(tokens: list[_Token]):
    """(index, token) of the tokens outside parentheses and brackets."""
    depth = 0
    for i, token in enumerate(tokens):
        if token.text in ("(", "["):
            depth += 1
        elif token.text in (")", "]"):
            depth -= 1
        elif depth == 0:
            yield i, token


def _split_at_from(tokens: list[_Token]) -> tuple[list[_Token], list[_Token] | None]:
    for i, token in _top_level(tokens):
        if token.is_word("FROM"):
            return tokens[:i], tokens[i + 1 :]
    return tokens, None


def _single_source_alias(tokens: list[_Token]) -> str | None:
    """The alias of `source` when FROM names it alone ("source" itself without one), else None."""
    if not tokens or tokens[0].kind != "name" or tokens[0].name.lower() != "source":
        return None
    alias, at = "source", 1
    if at < len(tokens) and tokens[at].is_word("AS"):
        at += 1
    if at < len(tokens) and tokens[at].kind == "name" and not tokens[at].is_word(*_RESERVED):
        alias, at = tokens[at].name, at + 1
    if at < len(tokens) and not tokens[at].is_word(*_CLAUSES):
        return None
    if any(t.is_word(*_OTHER_SHAPES) or t.text == "," for _, t in _top_level(tokens[at:])):
        return None
    return alias


def _split_commas(tokens: list[_Token]) -> list[list[_Token]]:
    items, start = [], 0
    for i, token in _top_level(tokens):
        if token.text == ",":
            items.append(tokens[start:i])
            start = i + 1
    items.append(tokens[start:])
    return [item for item in items if item]


def _read_item(item: list[_Token], source: pa.Schema, qualifiers: set[str], out: TransformColumns) -> None:
    texts = [t.text for t in item]
    if texts == ["*"] or (len(item) == 3 and texts[1:] == [".", "*"] and item[0].name.lower() in qualifiers):
        out.fields.update({f.name: f.type for f in source})
        return
    if texts[0] == "*" and len(item) > 1 and item[1].is_word("EXCEPT"):
        _read_star_except(item[2:], source, out)
        return
    reference, alias = _reference_and_alias(item)
    if reference is not None:
        path = [t.name for t in reference[::2]]
        if len(path) > 1 and path[0].lower() in qualifiers and _column(source, path[1]) is not None:
            path = path[1:]
        if path[-1] == "*":
            out.complete = False  # a struct's fields: left to Spark
            return
        resolved = _resolve(path, source, out)
        out.fields[alias or path[-1]] = resolved
        return
    if alias is not None:
        out.fields[alias] = None
    else:
        out.complete = False  # Spark names it after its expression


def _reference_and_alias(item: list[_Token]) -> tuple[list[_Token] | None, str | None]:
    """A column reference (`a`, `q.a`, `a.b.c`: names joined by dots) and its alias, if the item is one;
    else None and the item's alias, if it has one."""
    body, alias = item, None
    if len(item) >= 3 and item[-2].is_word("AS") and item[-1].kind == "name":
        body, alias = item[:-2], item[-1].name
    elif (
        len(item) >= 2
        and item[-1].kind == "name"
        and not item[-1].is_word(*_RESERVED)
        and (
            (item[-2].kind == "name" and not item[-2].is_word(*_RESERVED))
            or item[-2].text == ")"
            or item[-2].is_word("END")
        )
    ):
        body, alias = item[:-1], item[-1].name
    is_reference = (
        len(body) % 2 == 1
        and all(t.kind == "name" or t.text == "*" for t in body[::2])
        and all(t.text == "." for t in body[1::2])
        and not body[0].is_word(*_RESERVED)
    )
    if is_reference and body[-1].text == "*" and len(body) == 1:
        is_reference = False
    return (body if is_reference else None), alias


def _resolve(path: list[str], source: pa.Schema, out: TransformColumns) -> pa.DataType | None:
    """The type of a column (or struct field) path; a problem when source has no such column."""
    column = _column(source, path[0])
    if column is None:
        close = difflib.get_close_matches(path[0], source.names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        out.problems.append(f"column {path[0]!r} is not a column of source{hint}")
        return None
    kind = column.type
    for name in path[1:]:
        if not pa.types.is_struct(kind):
            return None  # a map's key or something else Spark resolves
        index = next((i for i in range(kind.num_fields) if kind.field(i).name.lower() == name.lower()), None)
        if index is None:
            out.problems.append(
                f"{'.'.join(path)}: {path[0]!r} has no field {name!r} "
                f"(its fields: {', '.join(kind.field(i).name for i in range(kind.num_fields))})"
            )
            return None
        kind = kind.field(index).type
    return kind


def _read_star_except(tokens: list[_Token], source: pa.Schema, out: TransformColumns) -> None:
    names = [t.name for t in tokens if t.kind == "name"]
    if not tokens or tokens[0].text != "(" or tokens[-1].text != ")":
        out.complete = False
        return
    excluded = set()
    for name in names:
        column = _column(source, name)
        if column is None:
            _resolve([name], source, out)
        else:
            excluded.add(column.name)
    out.fields.update({f.name: f.type for f in source if f.name not in excluded})


def _column(source: pa.Schema, name: str) -> pa.Field | None:
    return next((f for f in source if f.name.lower() == name.lower()), None)
