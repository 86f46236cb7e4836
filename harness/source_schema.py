"""A source database for mirror tests: tables of every column type a mirror must carry, generated
from a seed, with an initial load, a workload of changes, and tables created while it runs. All of
it is SQL for `PostgresServer.sql`.

    source = SourceSchema(seed=7)                       # 50 tables
    pg.sql(source.ddl(), "shop")
    pg.sql(source.initial_load(), "shop")
    pg.sql(source.workload(seed=1, count=500), "shop")
    pg.sql(source.new_table(), "shop")                  # one more table, with rows

The columns are smallint, integer, bigint, numeric(p,s), real, double precision, date, timestamp,
timestamp(3), timestamp with time zone, text, boolean, json, jsonb and bytea; every table has a
primary key (an integer, a bigint, a text, or a composite one of text and integer or of smallint
and date) and every key column is NOT NULL, as about one other column in six. Values include each
type's edges: integer bounds, the largest numeric a column holds, -0 and float bounds, dates and
times either side of the epoch, text of many scripts, emoji, combining characters, the empty
string and the word NULL, JSON `null` beside SQL's NULL, empty bytea. Every nullable column is
NULL in at least one row of the initial load. Left out on purpose: NaN and infinities (Connect's
JSON would write a bare `NaN`, which is not JSON), `infinity` dates and years before 1901.

The object remembers the keys it wrote, so that a workload updates and deletes rows that exist and
inserts keys that do not; the same seeds and calls make the same SQL.
"""

from __future__ import annotations

import datetime
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

#: The value types of the columns besides the keys, with the prefix of their columns' names.
COLUMN_TYPES = {
    "small": "smallint",
    "int": "integer",
    "big": "bigint",
    "amount": "numeric",  # given a precision and scale of NUMERIC_SHAPES per column
    "score": "real",
    "measure": "double precision",
    "day": "date",
    "at": "timestamp",
    "at_ms": "timestamp(3)",
    "at_tz": "timestamp with time zone",
    "label": "text",
    "flag": "boolean",
    "doc": "json",
    "docb": "jsonb",
    "blob": "bytea",
}
NUMERIC_SHAPES = ((5, 0), (10, 2), (18, 6), (38, 10), (4, 4))
TABLE_NOUNS = ("orders", "accounts", "invoices", "shipments", "events", "users", "items", "notes", "ledger", "visits")
TEXTS = (
    "",
    " ",
    "plain ascii",
    "NULL",
    'it\'s "quoted", with a back\\slash',
    "line one\nline two\r\n\ttabbed",
    "naïve café, Ærøskøbing, Straße",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440",  # Russian, written out: Cyrillic looks like Latin
    "日本語のテキスト",
    "한국어 텍스트",
    "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",  # Hebrew and Arabic, right to left
    "😀🎉 emoji, 👩\u200d👩\u200d👧\u200d👦 a family of four joined by zero-width joiners",
    "🇺🇳 a flag, \U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 astral letters",
    "e\u0301 a combining acute; Z\u0351\u0352\u0353algo",
    "\u00e9 and e\u0301: NFC and NFD",
    "\ufeffa byte order mark and a zero\u200bwidth space",
    "long " + "abcdefghij" * 200,
)
JSON_DOCUMENTS = (
    "{}",
    "[]",
    "null",
    "true",
    "0",
    "-1.5e3",
    '"a string"',
    '{"a": 1, "b": [true, null, "x"], "c": {"d": "é😀"}}',
    '{"b": 2, "a": 1, "a": 3}',
    '{"escaped": "\\u00e9\\n\\"", "empty": ""}',
    "[1, 2.50, 1e100]",
)
TEXT_KEY_PREFIXES = ("k", "café", "東京", "😀", "e\u0301")
REGIONS = ("emea", "apac", "amer", "africa")
TIME_ZONES = ("+00", "+05:30", "-08", "+14", "-03:30")
INTEGER_BITS = {"smallint": 16, "integer": 32, "bigint": 64}
#: The values at the edges of each type (as the text of a SQL literal), one value in four.
EDGES: dict[str, tuple[str, ...]] = {
    **{name: (str(-(2 ** (bits - 1))), str(2 ** (bits - 1) - 1), "0", "-1") for name, bits in INTEGER_BITS.items()},
    "real": ("0", "-0", "3.4028235e38", "1.1754944e-38", "0.1"),
    "double precision": ("0", "-0", "1.7976931348623157e308", "5e-324", "0.1"),
    "date": ("1970-01-01", "1969-12-31", "2000-02-29", "1901-01-01", "2099-12-31"),
    "timestamp": ("1970-01-01 00:00:00", "1969-12-31 23:59:59.999999", "2038-01-19 03:14:08", "1901-01-01 00:00:00"),
    "timestamp with time zone": (
        "1970-01-01 00:00:00+00",
        "1969-12-31 23:59:59.999999+05:30",
        "2038-01-19 03:14:08-08",
        "1901-01-01 00:00:00+14",
    ),
    "text": TEXTS,
    "json": JSON_DOCUMENTS,
    "jsonb": JSON_DOCUMENTS,
    "bytea": ("\\x", "\\x00", "\\x" + bytes(range(256)).hex()),
}
EARLIEST = datetime.datetime(1901, 1, 1)
LATEST = datetime.datetime(2099, 12, 31, 23, 59, 59)


@dataclass(frozen=True)
class KeyKind:
    """A primary key: its columns, and the SQL literals of its `n`th key (distinct for each `n`)."""

    columns: tuple[tuple[str, str], ...]
    literals: Callable[[int], tuple[str, ...]]


KEY_KINDS = (
    KeyKind((("id", "integer"),), lambda n: (str(n),)),
    KeyKind((("id", "bigint"),), lambda n: (str(10**12 + n),)),
    KeyKind((("code", "text"),), lambda n: (_quote(f"{TEXT_KEY_PREFIXES[n % len(TEXT_KEY_PREFIXES)]}-{n}"),)),
    KeyKind((("region", "text"), ("id", "integer")), lambda n: (_quote(REGIONS[n % len(REGIONS)]), str(n))),
    KeyKind(
        (("tenant", "smallint"), ("day", "date")),
        lambda n: (str(n % 11 - 5), _quote((datetime.date(2020, 1, 1) + datetime.timedelta(days=n // 11)).isoformat())),
    ),
)


@dataclass(frozen=True)
class Column:
    """A column besides the primary key's."""

    name: str
    sql_type: str
    nullable: bool


@dataclass
class Table:
    """A generated table and the keys it holds now."""

    name: str
    key_kind: KeyKind
    columns: tuple[Column, ...]
    live: dict[tuple[str, ...], None] = field(default_factory=dict)  # insertion-ordered: choices repeat
    deleted: list[tuple[str, ...]] = field(default_factory=list)
    next_key: int = 1
    last: tuple[str, ...] | None = None  # the key changed last, which the next update often changes again

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.key_kind.columns)

    def ddl(self) -> str:
        columns = [f"{name} {sql_type} NOT NULL" for name, sql_type in self.key_kind.columns]
        columns += [f"{c.name} {c.sql_type}{'' if c.nullable else ' NOT NULL'}" for c in self.columns]
        return f"CREATE TABLE {self.name} ({', '.join(columns)}, PRIMARY KEY ({', '.join(self.key_columns)}));"

    def new_key(self) -> tuple[str, ...]:
        key = self.key_kind.literals(self.next_key)
        self.next_key += 1
        return key

    def equalities(self, key: tuple[str, ...]) -> list[str]:
        return [f"{name} = {value}" for name, value in zip(self.key_columns, key)]

    def where(self, key: tuple[str, ...]) -> str:
        return " AND ".join(self.equalities(key))


class SourceSchema:
    """`tables` generated tables (names `<noun>_<nn>`), the same for the same seed."""

    def __init__(self, seed: int = 7, tables: int = 50):
        self.random = random.Random(seed)
        self.tables = [self._table(f"{TABLE_NOUNS[i % len(TABLE_NOUNS)]}_{i:02d}", i) for i in range(tables)]
        self.added = 0

    def ddl(self) -> str:
        """CREATE TABLE of every table."""
        return "\n".join(table.ddl() for table in self.tables)

    def initial_load(self, max_rows: int = 60) -> str:
        """INSERTs of 10 to `max_rows` rows a table, one statement a table; each nullable column
        is NULL in at least one row."""
        return "\n".join(self._load(table, self.random.randint(10, max_rows)) for table in self.tables)

    def workload(self, seed: int, count: int) -> str:
        """`count` changes in transactions of 1 to 10 changes of one table: inserts, updates of 1
        to 3 columns (often of the row the transaction changed last), deletes, primary-key updates,
        and inserts of keys deleted before."""
        r = random.Random(seed)
        statements: list[str] = []
        changes = 0
        while changes < count:
            table = r.choice(self.tables)
            batch = [self._change(r, table) for _ in range(min(r.randint(1, 10), count - changes))]
            changes += len(batch)
            statements += batch if len(batch) == 1 else ["BEGIN;", *batch, "COMMIT;"]
        return "\n".join(statements)

    def new_table(self, rows: int = 30) -> str:
        """CREATE TABLE of one more table (`added_<n>`, made as the others are) and INSERTs of
        `rows` rows; later workloads change it too."""
        table = self._table(f"added_{self.added:02d}", len(self.tables))
        self.added += 1
        self.tables.append(table)
        return table.ddl() + "\n" + self._load(table, rows)

    # -- generation ------------------------------------------------------------------------------
    def _table(self, name: str, index: int) -> Table:
        """A table whose columns include the `index`th type, so that every type is in a few tables."""
        r = self.random
        labels = list(COLUMN_TYPES)
        chosen = [labels[index % len(labels)], *(r.choice(labels) for _ in range(r.randint(2, 8)))]
        columns = []
        for position, label in enumerate(chosen):
            sql_type = COLUMN_TYPES[label]
            if sql_type == "numeric":
                sql_type = "numeric({}, {})".format(*r.choice(NUMERIC_SHAPES))
            columns.append(Column(f"{label}_{position}", sql_type, nullable=r.random() > 1 / 6))
        return Table(name, KEY_KINDS[index % len(KEY_KINDS)], tuple(columns))

    def _load(self, table: Table, rows: int) -> str:
        rows = max(rows, len(table.columns))  # room for a NULL in each column
        values = []
        for i in range(rows):
            key = table.new_key()
            table.live[key] = None
            row = [
                "NULL" if column.nullable and i == position else _value(self.random, column)
                for position, column in enumerate(table.columns)
            ]
            values.append(f"({', '.join((*key, *row))})")
        names = ", ".join((*table.key_columns, *(c.name for c in table.columns)))
        return f"INSERT INTO {table.name} ({names}) VALUES\n" + ",\n".join(values) + ";"

    def _change(self, r: random.Random, table: Table) -> str:
        kind = r.choices(("insert", "update", "delete", "key update", "reinsert"), (35, 40, 15, 5, 5))[0]
        if not table.live or kind == "insert" or (kind == "reinsert" and not table.deleted):
            return self._insert(r, table, table.new_key())
        if kind == "reinsert":
            return self._insert(r, table, table.deleted.pop(r.randrange(len(table.deleted))))
        key = table.last if table.last in table.live and r.random() < 0.4 else r.choice(list(table.live))
        if kind == "update":
            table.last = key
            sets = [
                f"{c.name} = {_value(r, c)}" for c in r.sample(table.columns, r.randint(1, min(3, len(table.columns))))
            ]
            return f"UPDATE {table.name} SET {', '.join(sets)} WHERE {table.where(key)};"
        del table.live[key]
        if kind == "delete":
            table.deleted.append(key)
            return f"DELETE FROM {table.name} WHERE {table.where(key)};"
        new = table.new_key()
        table.live[new] = None
        table.last = new
        return f"UPDATE {table.name} SET {', '.join(table.equalities(new))} WHERE {table.where(key)};"

    def _insert(self, r: random.Random, table: Table, key: tuple[str, ...]) -> str:
        table.live[key] = None
        table.last = key
        names = ", ".join((*table.key_columns, *(c.name for c in table.columns)))
        values = ", ".join((*key, *(_value(r, c) for c in table.columns)))
        return f"INSERT INTO {table.name} ({names}) VALUES ({values});"


def _value(r: random.Random, column: Column) -> str:
    """A SQL literal for the column: NULL one time in ten when it may be, an edge value one time in
    four, else an ordinary value."""
    if column.nullable and r.random() < 0.1:
        return "NULL"
    edge = r.random() < 0.25
    sql_type = re.sub(r"\(.*\)", "", column.sql_type)
    if sql_type == "numeric":
        precision, scale = (int(n) for n in re.findall(r"\d+", column.sql_type))
        return _quote(_numeric(r, precision, scale, edge))
    if edge and sql_type in EDGES:
        return _quote(r.choice(EDGES[sql_type]))
    return _quote(_ordinary(r, sql_type))


def _ordinary(r: random.Random, sql_type: str) -> str:
    if sql_type in INTEGER_BITS:
        bound = 2 ** (INTEGER_BITS[sql_type] - 2)
        return str(r.randint(-bound, bound))
    if sql_type == "real":
        return f"{r.uniform(-1e4, 1e4):.3f}"
    if sql_type == "double precision":
        return repr(r.uniform(-1e9, 1e9))
    if sql_type == "date":
        return _moment(r).date().isoformat()
    if sql_type == "timestamp":
        return _moment(r).isoformat(sep=" ")
    if sql_type == "timestamp with time zone":
        return _moment(r).isoformat(sep=" ") + r.choice(TIME_ZONES)
    if sql_type == "text":
        return f"{r.choice(TABLE_NOUNS)} {r.randrange(10**6)}"
    if sql_type == "boolean":
        return r.choice(("true", "false"))
    if sql_type in ("json", "jsonb"):
        document = {"n": r.randrange(1000), "tags": r.sample(TABLE_NOUNS, 2), "score": round(r.uniform(0, 1), 4)}
        return json.dumps(document, ensure_ascii=False)
    if sql_type == "bytea":
        return "\\x" + r.randbytes(r.randint(1, 32)).hex()
    raise ValueError(f"no values for {sql_type}")


def _numeric(r: random.Random, precision: int, scale: int, edge: bool) -> str:
    digits = precision - scale
    if edge:
        largest = ("9" * digits or "0") + ("." + "9" * scale if scale else "")
        return r.choice((largest, "-" + largest, "0"))
    whole = str(r.randrange(10**digits)) if digits else "0"
    fraction = "." + "".join(r.choice("0123456789") for _ in range(scale)) if scale else ""
    return r.choice(("", "-")) + whole + fraction


def _moment(r: random.Random) -> datetime.datetime:
    """A time between 1901 and 2099, to the microsecond."""
    span = (LATEST - EARLIEST).total_seconds()
    return EARLIEST + datetime.timedelta(seconds=r.randrange(int(span)), microseconds=r.randrange(10**6))


def _quote(text: str) -> str:
    """A SQL string literal (standard_conforming_strings: only quotes are doubled)."""
    return "'" + text.replace("'", "''") + "'"
