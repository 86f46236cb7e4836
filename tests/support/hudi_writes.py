"""One orders table written in turns by Apache Hudi (the judge) and by our writer, with the oracle
of every batch and each reader's snapshot held against it."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa

from table.mor_table import MorTable
from table.spark import datasource as spark_source
from tests.support.oracle import Oracle
from tests.support.orders import DATA_COLUMNS, SCHEMA, by_key, change_batch, write_options
from tests.support.readers import META, difference, hudi_rs, project

DATA_SCHEMA = SCHEMA.remove(SCHEMA.get_field_index("is_deleted"))


def hudi_options(**overrides: str) -> dict[str, str]:
    """What a Hudi user sets to write the orders table: MERGE_ON_READ with the consistent-hashing
    bucket index, the greatest ordering value winning (DefaultHoodieRecordPayload), no metadata
    table (we do not maintain one: docs/conformance.md)."""
    return {
        "hoodie.table.name": "orders",
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.datasource.write.recordkey.field": "order_id",
        "hoodie.datasource.write.precombine.field": "updated_at",
        "hoodie.datasource.write.partitionpath.field": "region",
        "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
        "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        "hoodie.index.type": "BUCKET",
        "hoodie.index.bucket.engine": "CONSISTENT_HASHING",
        "hoodie.bucket.index.num.buckets": "2",
        "hoodie.metadata.enable": "false",
        "hoodie.compact.inline": "false",
        "hoodie.clean.automatic": "false",
        **overrides,
    }


class Story:
    """One table written in turns by Hudi and by us, and the oracle of every batch."""

    def __init__(self, path: Path, seed: int, state: str, matrix, spark=None):
        self.path = path
        self.spark = spark  # reads through our Spark `mor` source too, when given
        if spark is not None:
            spark_source.register(spark)
        self.state = state
        self.matrix = matrix
        self.outcomes: dict[tuple[str, str], str] = {}
        self.hudi_configs: dict[str, str] = {}  # more of Hudi's write configs, for every Hudi write
        self.oracle = Oracle("order_id", "updated_at", "is_deleted")
        self.rng = random.Random(seed)
        self.known: list[str] = []
        self.batches = 0

    def batch(self, size: int = 150) -> list[dict]:
        n = self.batches
        self.batches += 1
        return change_batch(self.rng, self.known, size, first_id=n * size, clock=1000 + n * 100)

    def by_hudi(self, judge, rows: list[dict], hold_until: Path | None = None) -> None:
        """Hudi upserts the live rows of the batch and deletes its deleted keys (operation
        `delete`), as a Hudi user without a delete marker column writes it; the upsert held
        pending until `hold_until` exists, when given (`HudiJudge.write`)."""
        self.oracle.apply_batch(rows)
        latest = {}
        for r in rows:  # the batch's latest event per key, as both writers deduplicate
            if r["order_id"] not in latest or r["updated_at"] >= latest[r["order_id"]]["updated_at"]:
                latest[r["order_id"]] = r
        upserts = [project(r, DATA_SCHEMA.names) for r in latest.values() if not r["is_deleted"]]
        deletes = [project(r, DATA_SCHEMA.names) for r in latest.values() if r["is_deleted"]]
        judge.upsert(
            self.path,
            pa.Table.from_pylist(upserts, schema=DATA_SCHEMA),
            hudi_options(**self.hudi_configs),
            hold_until=hold_until,
        )
        if deletes:
            judge.write(
                self.path,
                pa.Table.from_pylist(deletes, schema=DATA_SCHEMA),
                hudi_options(**self.hudi_configs, **{"hoodie.datasource.write.operation": "delete"}),
            )

    def by_us(self, rows: list[dict]) -> str:
        self.oracle.apply_batch(rows)
        with MorTable.load(str(self.path)).writer(write_options()) as writer:
            return writer.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))

    def assert_readers_agree(self, judge, step: str) -> None:
        """Every reader's snapshot equals the oracle, and ours read the meta columns as Apache Hudi
        reads them; the matrix keeps each reader's first miss."""
        expected = {k: project(r, DATA_COLUMNS) for k, r in self.oracle.rows().items()}
        assert len(expected) > 50
        reference = judge.snapshot(self.path)
        reads = {
            "Apache Hudi": reference,
            "ours": MorTable.load(str(self.path)).snapshot(),
            "hudi-rs": hudi_rs(self.path, "snapshot", None),
        }
        if self.spark is not None:
            reads["ours (Spark)"] = self.spark.read.format("mor").load(str(self.path)).toArrow()
        misses = {}
        hudi_miss = difference(reference, expected, DATA_COLUMNS)
        for reader, rows in reads.items():
            miss = difference(rows, expected, DATA_COLUMNS)
            if not miss and not hudi_miss and reader.startswith("ours"):
                meta = difference(rows, {k: project(r, META) for k, r in by_key(reference).items()}, META)
                miss = f"meta columns: {meta}" if meta else ""
            if miss:
                misses[reader] = f"{step}: {miss}"
            if not self.outcomes.get((reader, "snapshot")):
                self.outcomes[(reader, "snapshot")] = misses.get(reader, "")
        self.matrix.record(self.state, self.outcomes, {})
        assert not misses
