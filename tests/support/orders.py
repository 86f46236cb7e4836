"""The orders table the engine's tests write with the library alone: its schema, the table and
its write options, change batches (inserts, late updates, deletes), and its rows read back by key
through our reader or hudi-rs."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import hudi
import pyarrow as pa

from table.mor_table import MorTable, TableSpec
from table.write.writer import WriteOptions

SCHEMA = pa.schema(
    [
        ("order_id", pa.string()),
        ("region", pa.string()),
        ("amount", pa.float64()),
        ("status", pa.string()),
        ("updated_at", pa.int64()),
        ("is_deleted", pa.bool_()),
    ]
)
DATA_COLUMNS = ["order_id", "region", "amount", "status", "updated_at"]
REGIONS = ["emea", "apac", "amer", "latam"]


def make_table(path: Path | str, storage_options: dict | None = None, **spec_overrides) -> MorTable:
    spec = TableSpec(
        name="orders",
        schema=SCHEMA.remove(SCHEMA.get_field_index("is_deleted")),
        record_key_fields=("order_id",),
        partition_fields=("region",),
        ordering_field="updated_at",
        **spec_overrides,
    )
    return MorTable.create(str(path), spec, storage_options)


def write_options(**overrides) -> WriteOptions:
    return WriteOptions(**{"initial_buckets": 4, "delete_field": "is_deleted", **overrides})


def change_batch(rng: random.Random, known: list[str], size: int, first_id: int, clock: int) -> list[dict]:
    """Inserts, updates (some with older ordering values) and deletes of known keys."""
    rows = []
    for i in range(size):
        roll = rng.random()
        if known and roll < 0.55:
            key = rng.choice(known)
            ts = clock + rng.randint(-50, 50)  # late events arrive with older ordering values
            rows.append(row(key, ts, deleted=False, rng=rng))
        elif known and roll < 0.65:
            key = rng.choice(known)
            rows.append(row(key, clock + rng.randint(-50, 50), deleted=True, rng=rng))
        else:
            key = f"o-{first_id + i:07d}"
            known.append(key)
            rows.append(row(key, clock + rng.randint(0, 50), deleted=False, rng=rng))
    return rows


def row(key: str, ts: int, deleted: bool, rng: random.Random) -> dict:
    region = REGIONS[zlib.crc32(key.encode()) % len(REGIONS)]
    return {
        "order_id": key,
        "region": region,
        "amount": round(rng.uniform(1, 500), 2),
        "status": rng.choice(["new", "paid", "shipped"]),
        "updated_at": max(ts, 1),
        "is_deleted": deleted,
    }


def by_key(table: pa.Table) -> dict:
    return {r["order_id"]: r for r in table.to_pylist()}


def hudi_rs_read(path: Path, read_optimized: bool = False, as_of: str | None = None) -> pa.Table:
    table = hudi.HudiTableBuilder.from_base_uri(str(path)).build()
    options = hudi.HudiReadOptions()
    if read_optimized:
        options = options.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    if as_of:
        options = options.with_as_of_timestamp(as_of)
    batches = table.read(options)
    return pa.Table.from_batches(batches) if batches else pa.table({})


def strip(rows: dict, columns: list[str]) -> dict:
    return {k: {c: v[c] for c in columns} for k, v in rows.items()}
