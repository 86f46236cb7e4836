"""The source side of a comparison, computed inside PostgreSQL: the tables of a schema, their
columns and primary keys, and over key ranges the row count and the sum of the rows' hashes
(`streamer.verify.values`), or the rows themselves as text.

Each round of a comparison reads in one `REPEATABLE READ` transaction, so every range sees the
same snapshot, and the WAL position of that snapshot says which changes it holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from streamer.verify.ranges import Key, KeyRange
from streamer.verify.values import ColumnRule, SourceColumn, column_rule, row_hash_sql


@dataclass(frozen=True)
class SourceTable:
    """A table of the source database, with what a comparison needs of it."""

    schema: str
    name: str
    rules: list[ColumnRule]  # every column the comparison covers, in the table's order
    key: list[ColumnRule]  # the primary key's columns, in the key's order; empty without one

    @property
    def qualified(self) -> str:
        return f'"{self.schema}"."{self.name}"'


class PostgresSource:
    """A connection to the source database (psycopg)."""

    def __init__(self, url: str):
        import psycopg

        self._connection = psycopg.connect(url, autocommit=True)

    def close(self) -> None:
        self._connection.close()

    def tables(self, schemas: Sequence[str] | None = None) -> list[tuple[str, str]]:
        """The base tables of the database (of `schemas` only, when given), outside the catalogs."""
        rows = self._rows(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
        )
        return [(s, t) for s, t in rows if schemas is None or s in schemas]

    def table(self, schema: str, name: str) -> SourceTable:
        columns = [
            SourceColumn(n, t, p, length)
            for n, t, p, length in self._rows(
                "SELECT column_name, data_type, datetime_precision, character_maximum_length "
                "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                (schema, name),
            )
        ]
        key_names = [
            n
            for (n,) in self._rows(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)",
                (f'"{schema}"."{name}"',),
            )
        ]
        rules = [column_rule(c) for c in columns]
        by_name = {r.column.name: r for r in rules}
        return SourceTable(schema, name, rules, [by_name[k] for k in key_names])

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One consistent read of the database, and the WAL position it was taken at."""
        with self._connection.transaction():
            cursor = self._connection.cursor()
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cursor.execute("SELECT pg_current_wal_lsn()::text")
            row = cursor.fetchone()
            assert row is not None
            yield Snapshot(cursor, _lsn(row[0]))

    def confirmed_position(self, slot: str | None) -> int | None:
        """How far the connector's replication slot has confirmed the changes it sent: every
        change before it is in Kafka. None when there is no (single) logical slot to ask."""
        rows = self._rows(
            "SELECT slot_name, confirmed_flush_lsn::text FROM pg_replication_slots "
            "WHERE slot_type = 'logical' AND database = current_database()"
        )
        found = [lsn for name, lsn in rows if slot is None or name == slot]
        return _lsn(found[0]) if len(found) == 1 and found[0] is not None else None

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()


class Snapshot:
    """The queries of one round, in its transaction."""

    def __init__(self, cursor, position: int):
        self._cursor = cursor
        self.position = position  # the WAL position (LSN) the snapshot holds every change before

    def count(self, table: SourceTable, where: KeyRange | None = None) -> int:
        clause, params = _where(table, where)
        self._cursor.execute(f"SELECT count(*) FROM {table.qualified}{clause}", params)
        return int(self._cursor.fetchone()[0])

    def split_points(self, table: SourceTable, within: KeyRange | None, parts: int) -> list[Key]:
        """Keys that cut the range into about `parts` ranges of as many rows: each part's first key."""
        total = self.count(table, within)
        step = max(1, -(-total // parts))
        keys = ", ".join(f"{r.key_sql} AS k{i}" for i, r in enumerate(table.key))
        named = ", ".join(f"k{i}" for i in range(len(table.key)))
        clause, params = _where(table, within)
        self._cursor.execute(
            f"SELECT {named} FROM (SELECT {named}, row_number() OVER (ORDER BY {named}) - 1 AS n "
            f"FROM (SELECT {keys} FROM {table.qualified}{clause}) k) s WHERE n %% {step} = 0 AND n > 0 ORDER BY {named}",
            params,
        )
        return [tuple(row) for row in self._cursor.fetchall()]

    def digests(self, table: SourceTable, ranges: list[KeyRange]) -> list[tuple[int, int]]:
        """Each range's row count and the sum of its rows' hashes (the ranges in key order,
        each beginning where the one before ends)."""
        if not ranges:
            return []
        cases, params = [], []
        for i, r in enumerate(ranges):
            condition, values = _condition(table, r)
            cases.append(f"WHEN {condition} THEN {i}")
            params += values
        clause, outer = _where(table, KeyRange(ranges[0].low, ranges[-1].high))  # an index serves it
        self._cursor.execute(
            f"SELECT i, count(*), sum(h)::text FROM (SELECT CASE {' '.join(cases)} END AS i, "
            f"{row_hash_sql(table.rules)} AS h FROM {table.qualified}{clause}) s WHERE i IS NOT NULL GROUP BY i",
            params + outer,
        )
        found = {int(i): (int(n), int(total)) for i, n, total in self._cursor.fetchall()}
        return [found.get(i, (0, 0)) for i in range(len(ranges))]

    def rows(self, table: SourceTable, where: KeyRange | None = None, keys: list[Key] | None = None) -> dict[Key, list]:
        """The rows of a range (or of `keys`), as their columns' texts by key."""
        key_exprs = ", ".join(r.key_sql for r in table.key)
        texts = ", ".join(r.sql for r in table.rules)
        width = len(table.key)
        if keys is None:
            clause, params = _where(table, where)
            self._cursor.execute(f"SELECT {key_exprs}, {texts} FROM {table.qualified}{clause}", params)
            return {tuple(row[:width]): list(row[width:]) for row in self._cursor.fetchall()}
        found: dict[Key, list] = {}
        for start in range(0, len(keys), KEYS_PER_QUERY):
            chunk = keys[start : start + KEYS_PER_QUERY]
            rows_of = ", ".join(["(" + ", ".join(["%s"] * width) + ")"] * len(chunk))
            self._cursor.execute(
                f"SELECT {key_exprs}, {texts} FROM {table.qualified} WHERE ({key_exprs}) IN ({rows_of})",
                [v for k in chunk for v in k],
            )
            found.update({tuple(row[:width]): list(row[width:]) for row in self._cursor.fetchall()})
        return found


#: Keys named in one statement (PostgreSQL takes at most 65,535 parameters).
KEYS_PER_QUERY = 4096


def _where(table: SourceTable, where: KeyRange | None) -> tuple[str, list]:
    if where is None:
        return "", []
    condition, params = _condition(table, where)
    return f" WHERE {condition}", params


def _condition(table: SourceTable, r: KeyRange) -> tuple[str, list]:
    """The range as a condition an index on the key serves: a row comparison of the key's columns."""
    if len(table.key) == 1:
        keys, slots = table.key[0].key_sql, "%s"
    else:
        keys = "(" + ", ".join(k.key_sql for k in table.key) + ")"
        slots = "(" + ", ".join(["%s"] * len(table.key)) + ")"
    parts, params = [], []
    if r.low is not None:
        parts.append(f"{keys} >= {slots}")
        params += list(r.low)
    if r.high is not None:
        parts.append(f"{keys} < {slots}")
        params += list(r.high)
    return (" AND ".join(parts) or "TRUE"), params


def _lsn(text: str) -> int:
    """A WAL position `X/Y` as a number."""
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)
