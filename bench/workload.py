"""W1, the order-change stream every ingestion path is measured on, defined once.

An initial load of `initial_rows` new orders, then `batches` upsert batches of `batch_rows`
events: 70% updates of existing orders, 25% new orders, 5% deletes. Which orders change follows
a Zipf law over a fixed random ranking of all keys, so a few orders change in almost every batch
and most rarely do, as in real order streams. A key appears at most once per batch: every path
then does the same work, and no peer needs a dedup step that ours does inside (delta-rs merge
requires one source row per target row).

Events are about 200 bytes as JSON. `updated_at` (epoch ms) grows by 1 per event in stream
order, so any split of the stream into micro-batches gives the same table. An order keeps its
region (the partition) and customer for life. Everything follows from the seed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REGIONS = ("emea", "apac", "amer", "latam", "anz", "mena", "nordics", "iberia")
UPDATE_STATUSES = ("paid", "packed", "shipped", "delivered", "returned")
UPDATES, INSERTS = 0.70, 0.25  # deletes are the rest
FIRST_UPDATED_AT = 1_700_000_000_000
NOTES = 512  # distinct 60-character notes

SCHEMA = pa.schema(
    [
        ("order_id", pa.string()),
        ("customer", pa.string()),
        ("region", pa.string()),
        ("amount", pa.float64()),
        ("status", pa.string()),
        ("note", pa.string()),
        ("updated_at", pa.int64()),
        ("is_deleted", pa.bool_()),
    ]
)
#: The table's columns: the delete flag marks an event, it is not stored.
TABLE_SCHEMA = SCHEMA.remove(SCHEMA.get_field_index("is_deleted"))
VALUE_DDL = ", ".join(
    f"{f.name} {t}"
    for f, t in zip(SCHEMA, ("STRING", "STRING", "STRING", "DOUBLE", "STRING", "STRING", "BIGINT", "BOOLEAN"))
)


@dataclass(frozen=True)
class W1:
    initial_rows: int
    batch_rows: int
    batches: int
    seed: int = 7
    zipf_exponent: float = 1.0
    partitions: int = len(REGIONS)  # distinct regions; every batch touches each of them

    @property
    def regions(self) -> tuple[str, ...]:
        """The partition values: the named regions at 8, numbered ones at any other count."""
        if self.partitions == len(REGIONS):
            return REGIONS
        return tuple(f"region-{i:05d}" for i in range(self.partitions))

    @property
    def upsert_records(self) -> int:
        return self.batch_rows * self.batches

    @property
    def total_records(self) -> int:
        return self.initial_rows + self.upsert_records

    @property
    def batch_mix(self) -> tuple[int, int, int]:
        """Updates, inserts and deletes in each upsert batch."""
        updates, inserts = int(self.batch_rows * UPDATES), int(self.batch_rows * INSERTS)
        return updates, inserts, self.batch_rows - updates - inserts

    def tables(self) -> Iterator[pa.Table]:
        """The initial load, then each upsert batch, as Arrow tables in stream order."""
        rng = np.random.default_rng(self.seed)
        updates, inserts, deletes = self.batch_mix
        capacity = self.initial_rows + inserts * self.batches
        weight = 1.0 / (rng.permutation(capacity) + 1.0) ** self.zipf_exponent
        region = rng.integers(0, self.partitions, capacity)
        customer = rng.integers(0, max(1, capacity // 20), capacity)
        alive = np.zeros(capacity, bool)
        notes = _notes(rng)
        regions = pa.array(self.regions)
        clock = FIRST_UPDATED_AT

        ids = np.arange(self.initial_rows)
        alive[ids] = True
        yield _events(rng, ids, np.zeros(len(ids), np.int8), regions, region[ids], customer[ids], notes, clock)
        clock += len(ids)
        next_id = self.initial_rows
        for _ in range(self.batches):
            changed = _weighted_sample(rng, np.where(alive[:next_id], weight[:next_id], 0.0), updates + deletes)
            kind = np.concatenate([np.ones(updates, np.int8), np.full(deletes, 2, np.int8), np.zeros(inserts, np.int8)])
            ids = np.concatenate([changed, np.arange(next_id, next_id + inserts)])
            order = rng.permutation(len(ids))
            ids, kind = ids[order], kind[order]
            alive[ids] = kind != 2
            next_id += inserts
            yield _events(rng, ids, kind, regions, region[ids], customer[ids], notes, clock)
            clock += len(ids)

    def expected_rows(self) -> int:
        """Live orders after the last batch: what every path's table must hold."""
        _, inserts, deletes = self.batch_mix
        return self.initial_rows + (inserts - deletes) * self.batches


SIZES = {
    "quick": W1(initial_rows=100_000, batch_rows=20_000, batches=5),
    "full": W1(initial_rows=1_000_000, batch_rows=100_000, batches=10),
}


def _weighted_sample(rng: np.random.Generator, weight: np.ndarray, count: int) -> np.ndarray:
    """`count` distinct indices drawn with probability proportional to `weight`, without
    replacement (Efraimidis-Spirakis: the largest log(u)/w keys), in O(n)."""
    with np.errstate(divide="ignore"):
        score = np.log(rng.random(len(weight))) / weight
    return np.argpartition(-score, count)[:count]


def _notes(rng: np.random.Generator) -> pa.Array:
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz      ", np.uint8)
    raw = letters[rng.integers(0, len(letters), (NOTES, 60))]
    return pa.array([row.tobytes().decode() for row in raw])


def _events(
    rng,
    ids: np.ndarray,
    kind: np.ndarray,
    regions: pa.Array,
    region: np.ndarray,
    customer: np.ndarray,
    notes: pa.Array,
    clock: int,
) -> pa.Table:
    """Rows for `ids` (`region` and `customer` given per row); kind 0 inserts, 1 updates, 2 deletes."""
    n = len(ids)
    statuses = pa.array(("created", *UPDATE_STATUSES, "cancelled"))
    status = np.where(
        kind == 0, 0, np.where(kind == 2, len(UPDATE_STATUSES) + 1, rng.integers(1, len(UPDATE_STATUSES) + 1, n))
    )
    return pa.table(
        {
            "order_id": _padded("ord-", ids, 10),
            "customer": _padded("cust-", customer, 6),
            "region": pc.take(regions, pa.array(region)),
            "amount": pa.array(np.round(rng.uniform(5, 900, n), 2)),
            "status": pc.take(statuses, pa.array(status)),
            "note": pc.take(notes, pa.array(rng.integers(0, NOTES, n))),
            "updated_at": pa.array(clock + np.arange(n, dtype=np.int64)),
            "is_deleted": pa.array(kind == 2),
        },
        schema=SCHEMA,
    )


def _padded(prefix: str, numbers: np.ndarray, width: int) -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(numbers), pa.string()), width, "0")
    return pc.binary_join_element_wise(prefix, digits, "")


def kafka_records(table: pa.Table) -> list[tuple[bytes, bytes, None]]:
    """The events as Kafka messages: key order_id, value the JSON object of the row."""
    return [
        (row["order_id"].encode(), json.dumps(row, separators=(",", ":")).encode(), None) for row in table.to_pylist()
    ]


class WorkloadFiles:
    """W1 on disk as Parquet, written once by the parent: every path's process reads the same
    batches, outside its timings, and holds only the batch it is writing."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def write(self, tables: Iterator[pa.Table]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for i, table in enumerate(tables):
            pq.write_table(table, self.directory / f"{i:04d}.parquet")

    def load(self) -> pa.Table:
        return pq.read_table(self.directory / "0000.parquet")

    def batches(self) -> Iterator[pa.Table]:
        for path in sorted(self.directory.glob("*.parquet"))[1:]:
            yield pq.read_table(path)


def json_values(table: pa.Table) -> pa.Array:
    """The events as JSON objects (what `kafka_records` makes), built column-wise by Arrow's string
    kernels rather than row by row: fast enough to put tens of millions of messages in a topic.
    W1's strings are letters, digits, dashes and spaces, so none needs escaping."""
    parts: list = []
    for i, field in enumerate(table.schema):
        column = table.column(i)
        text = column if pa.types.is_string(field.type) else pc.cast(column, pa.string())
        quote = '"' if pa.types.is_string(field.type) else ""
        parts += [("{" if i == 0 else ",") + f'"{field.name}":{quote}', text, quote]
    parts.append("}")
    return pc.binary_join_element_wise(*parts, "").combine_chunks()


def inserts(
    records: int, partitions: int = len(REGIONS), chunk_rows: int = 1_000_000, seed: int = 7
) -> Iterator[pa.Table]:
    """A backlog of `records` new orders, W1's load events in chunks of `chunk_rows` (none of the
    chunks' arrays outlives its chunk, so tens of millions cost one chunk's memory)."""
    w = W1(initial_rows=0, batch_rows=0, batches=0, seed=seed, partitions=partitions)
    rng = np.random.default_rng(seed)
    regions, notes = pa.array(w.regions), _notes(rng)
    for start in range(0, records, chunk_rows):
        ids = np.arange(start, min(records, start + chunk_rows))
        yield _events(
            rng,
            ids,
            np.zeros(len(ids), np.int8),
            regions,
            rng.integers(0, partitions, len(ids)),
            rng.integers(0, max(1, records // 20), len(ids)),
            notes,
            FIRST_UPDATED_AT + start,
        )
