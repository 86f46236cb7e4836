"""Change events as Debezium's PostgreSQL connector writes them with Kafka Connect's JSON
converter (schemas on): for the mirror's tests and benchmark, many tables without a database.

    accounts = SourceTable("public", "accounts", [("id", "int32"), ("name", "string")], key=("id",))
    records = [accounts.insert({"id": 1, "name": "a"}, lsn=100)]
    produce(bootstrap, accounts.topic("shop"), records)
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: A Kafka record: key, value (None: a tombstone), partition (None: by key).
Record = tuple[bytes | None, bytes | None, None]


@dataclass(frozen=True)
class SourceTable:
    """A database table whose changes the events describe: its columns as Connect types."""

    schema: str
    name: str
    columns: list[tuple[str, str]]
    key: tuple[str, ...] | None  # None: a table without a primary key (Debezium's key is null)

    def topic(self, prefix: str) -> str:
        return f"{prefix}.{self.schema}.{self.name}"

    def insert(self, row: dict, lsn: int) -> Record:
        return self._event("c", None, row, lsn)

    def update(self, row: dict, lsn: int) -> Record:
        return self._event("u", None, row, lsn)

    def delete(self, row: dict, lsn: int) -> list[Record]:
        """The delete event and its tombstone."""
        key, value, _ = self._event("d", {k: row[k] for k in self.key or ()}, None, lsn)
        return [(key, value, None), (key, None, None)]

    def _event(self, op: str, before: dict | None, after: dict | None, lsn: int) -> Record:
        row = after if after is not None else before or {}
        key = None
        if self.key is not None:
            key = _wrapped(
                {
                    "type": "struct",
                    "name": f"{self._namespace}.Key",
                    "optional": False,
                    "fields": self._fields(self.key),
                },
                {k: row[k] for k in self.key},
            )
        row_schema = {
            "type": "struct",
            "name": f"{self._namespace}.Value",
            "optional": True,
            "fields": self._fields([c for c, _ in self.columns]),
        }
        source_schema = {
            "type": "struct",
            "name": "io.debezium.connector.postgresql.Source",
            "optional": False,
            "field": "source",
            "fields": [
                {"type": "string", "optional": False, "field": "connector"},
                {"type": "int64", "optional": False, "field": "ts_ms"},
                {"type": "string", "optional": False, "field": "schema"},
                {"type": "string", "optional": False, "field": "table"},
                {"type": "int64", "optional": True, "field": "lsn"},
            ],
        }
        value_schema = {
            "type": "struct",
            "name": f"{self._namespace}.Envelope",
            "optional": False,
            "fields": [
                {**row_schema, "field": "before"},
                {**row_schema, "field": "after"},
                source_schema,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
            ],
        }
        payload = {
            "before": before,
            "after": after,
            "source": {"connector": "postgresql", "ts_ms": lsn, "schema": self.schema, "table": self.name, "lsn": lsn},
            "op": op,
            "ts_ms": lsn,
        }
        return key, _wrapped(value_schema, payload), None

    @property
    def _namespace(self) -> str:
        return f"shop.{self.schema}.{self.name}"

    def _fields(self, names) -> list[dict]:
        types = dict(self.columns)
        return [{"type": types[n], "optional": self.key is None or n not in self.key, "field": n} for n in names]


def _wrapped(schema: dict, payload: dict) -> bytes:
    """Connect's JSON with its schema, written as `JsonConverter` writes it (no spaces)."""
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()
