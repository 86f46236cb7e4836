"""A table against its source in a real PostgreSQL: rows of many types compared as Debezium sends
them, differences bisected to the key and column, and lag re-checked away."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg.types.json import Jsonb

from streamer.verify.compare import compare_table
from streamer.verify.postgres import PostgresSource
from table.mor_table import MorTable, TableSpec
from table.write.writer import WriteOptions

pytestmark = pytest.mark.e2e

DDL = """
CREATE TABLE accounts (
    region text NOT NULL, id int NOT NULL, name text, balance double precision, ratio real,
    amount numeric(12, 3), visits bigint, active boolean, born date, seen timestamptz,
    at timestamp, note jsonb, blob bytea, code char(4),
    PRIMARY KEY (region, id)
);
"""
LAKE_SCHEMA = pa.schema(
    [
        ("region", pa.string()),
        ("id", pa.int32()),
        ("name", pa.string()),
        ("balance", pa.float64()),
        ("ratio", pa.float32()),
        ("amount", pa.string()),  # decimal.handling.mode: string
        ("visits", pa.int64()),
        ("active", pa.bool_()),
        ("born", pa.int32()),  # days since the epoch
        ("seen", pa.string()),  # ISO-8601 in UTC
        ("at", pa.int64()),  # microseconds since the epoch
        ("note", pa.string()),
        ("blob", pa.string()),  # binary.handling.mode: hex
        ("code", pa.string()),
        ("source_position", pa.int64()),
    ]
)
NAMES = ["Zoë", "李小龙", "🦄 unicorn", "e\u0301 combining", "", "O'Brien", "tab\there"]


def source_row(rng: random.Random, region: str, row_id: int) -> dict:
    seen = dt.datetime(2020, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=rng.randrange(10**14))
    return {
        "region": region,
        "id": row_id,
        "name": rng.choice([*NAMES, None]),
        "balance": rng.choice([rng.uniform(-1e6, 1e6), 0.1, 3.0, -0.0, 1e300, None]),
        "ratio": rng.choice([0.1, 2.5, None]),
        "amount": rng.choice(["12.500", "-0.001", "123456789.000", None]),
        "visits": rng.choice([rng.randrange(-(2**62), 2**62), None]),
        "active": rng.choice([True, False, None]),
        "born": rng.choice([dt.date(1969, 12, 31), dt.date(2024, 2, 29), None]),
        "seen": rng.choice([seen, None]),
        "at": rng.choice([dt.datetime(2001, 2, 3, 4, 5, 6, 789012), None]),
        "note": rng.choice([{"a": [1, 2], "b": "ü"}, None]),
        "blob": rng.choice([bytes(rng.randrange(256) for _ in range(5)), b"", None]),
        "code": rng.choice(["ab", "abcd", None]),
    }


def as_debezium_sends(row: dict) -> dict:
    """A source row as the change event's `after` carries it, with the connector settings the
    mirror expects."""
    born, seen, at, note, blob = (row[c] for c in ("born", "seen", "at", "note", "blob"))
    return {
        **row,
        "born": None if born is None else (born - dt.date(1970, 1, 1)).days,
        "seen": None if seen is None else seen.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "at": None if at is None else (at - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1),
        "note": None if note is None else json.dumps(note, ensure_ascii=False),
        "blob": None if blob is None else blob.hex(),
        "code": None if row["code"] is None else row["code"].ljust(4),
        "source_position": 1,
    }


@pytest.fixture(scope="module")
def source(postgres_server):
    pg = postgres_server
    pg.sql("DROP DATABASE IF EXISTS verify; CREATE DATABASE verify;")
    pg.sql(DDL, "verify")
    url = f"postgresql://postgres@{pg.host}:{pg.port}/verify"
    rng = random.Random(3)
    rows = [source_row(rng, region, i) for region in ("amer", "emea", "apac") for i in range(700)]
    names = list(rows[0])
    values = [[Jsonb(r[c]) if c == "note" and r[c] is not None else r[c] for c in names] for r in rows]
    with psycopg.connect(url, autocommit=True) as connection, connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO accounts ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})", values
        )
    connection_source = PostgresSource(url)
    try:
        yield connection_source, rows
    finally:
        connection_source.close()


def lake_table(path: Path, rows: list[dict]) -> MorTable:
    table = MorTable.create(str(path), TableSpec("accounts", LAKE_SCHEMA, ("region", "id"), "source_position", ()))
    with table.writer(WriteOptions(initial_buckets=2)) as writer:
        writer.upsert(pa.Table.from_pylist([as_debezium_sends(r) for r in rows], schema=LAKE_SCHEMA))
    return table


def no_lag(position: int) -> str | None:
    return None


def test_a_table_that_holds_the_source_rows_of_every_type_is_equal(source, tmp_path):
    db, rows = source
    lake_table(tmp_path / "accounts", rows)
    verdict = compare_table(db, db.table("public", "accounts"), str(tmp_path / "accounts"), None, no_lag)
    assert verdict.equal, "\n".join(verdict.lines())
    assert verdict.rows == len(rows)
    assert verdict.ranges >= 16


def test_a_missing_an_extra_and_a_changed_row_are_named_by_key_and_column(source, tmp_path):
    db, rows = source
    lake_rows = [dict(r) for r in rows if (r["region"], r["id"]) != ("emea", 17)]
    lake_rows.append({**rows[0], "region": "mars", "id": 1})
    changed = next(r for r in lake_rows if (r["region"], r["id"]) == ("apac", 300))
    changed["name"] = "forged"
    lake_table(tmp_path / "accounts", lake_rows)
    verdict = compare_table(db, db.table("public", "accounts"), str(tmp_path / "accounts"), None, no_lag)
    assert (verdict.missing, verdict.extra) == ([("emea", 17)], [("mars", 1)])
    assert verdict.different == {("apac", 300): ["name"]}
    lines = verdict.lines()
    assert "1 missing, 1 extra, 1 different" in lines[0]
    assert "  different (region='apac', id=300): name" in lines


def test_a_difference_that_is_only_lag_is_rechecked_after_catching_up_and_not_reported(source, tmp_path):
    db, rows = source
    behind = [r for r in rows if r["id"] != 5]
    table = lake_table(tmp_path / "accounts", behind)

    def catch_up(position: int) -> str | None:
        with table.writer(WriteOptions(initial_buckets=2)) as writer:
            writer.upsert(
                pa.Table.from_pylist([as_debezium_sends(r) for r in rows if r["id"] == 5], schema=LAKE_SCHEMA)
            )
        return None

    verdict = compare_table(db, db.table("public", "accounts"), str(tmp_path / "accounts"), None, catch_up)
    assert verdict.equal, "\n".join(verdict.lines())
    assert verdict.rechecked == 3


def test_a_difference_that_persists_after_catching_up_is_reported_and_one_that_cannot_wait_says_why(source, tmp_path):
    db, rows = source
    lake_table(tmp_path / "accounts", [r for r in rows if r["id"] != 9])
    verdict = compare_table(db, db.table("public", "accounts"), str(tmp_path / "accounts"), None, no_lag)
    assert sorted(verdict.missing) == [("amer", 9), ("apac", 9), ("emea", 9)]
    assert verdict.rechecked == 3
    stuck = compare_table(db, db.table("public", "accounts"), str(tmp_path / "accounts"), None, lambda p: "slot stuck")
    assert len(stuck.missing) == 3 and "slot stuck" in (stuck.note or "")
