"""`make demo`: an embedded broker, a stream of order changes, a streaming upsert, a report.

Runs on a bare machine: it starts the embedded Kafka-compatible broker, produces order change
events (inserts, updates, deletes, late updates), streams the topic through Spark into a
merge-on-read table in micro-batches, and prints what landed, checked with hudi-rs.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from streamer.embedded_broker import EmbeddedBroker, create_topic, produce

TOPIC = "orders"
REGIONS = ["emea", "apac", "amer", "latam", "anz", "mena", "nordics", "iberia"]
STATUSES = ["created", "paid", "packed", "shipped", "delivered"]
ORDER_SCHEMA = pa.schema(
    [
        ("order_id", pa.string()),
        ("customer", pa.string()),
        ("region", pa.string()),
        ("amount", pa.float64()),
        ("status", pa.string()),
        ("updated_at", pa.int64()),
    ]
)


def change_events(count: int, seed: int = 42) -> list[dict]:
    """Order changes: new orders, status updates, some arriving late, and cancellations."""
    rng = random.Random(seed)
    orders: list[dict] = []
    events = []
    clock = 1_700_000_000_000
    for _ in range(count):
        clock += rng.randint(1, 20)
        roll = rng.random()
        if not orders or roll < 0.35:
            order = {
                "order_id": f"ord-{len(orders):06d}",
                "customer": f"cust-{rng.randint(1, 2000):05d}",
                "region": rng.choice(REGIONS),
                "amount": round(rng.uniform(5, 900), 2),
                "status": "created",
                "updated_at": clock,
                "deleted": False,
            }
            orders.append(order)
            events.append(dict(order))
        elif roll < 0.95:
            order = rng.choice(orders)
            late = roll > 0.88  # an update that arrives after newer ones
            event = dict(order, status=rng.choice(STATUSES), updated_at=clock - (5000 if late else 0))
            events.append(event)
        else:
            events.append(dict(rng.choice(orders), updated_at=clock, deleted=True))
    return events


def main() -> int:
    out = Path(os.environ.get("DEMO_OUTPUT", "demo-output")).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    table_path = out / "tables" / "orders"
    events = change_events(int(os.environ.get("DEMO_EVENTS", "30000")))

    with EmbeddedBroker(log_path=str(out / "broker.log")) as broker:
        print(f"broker   embedded Kafka-compatible broker at {broker.bootstrap} (pid {broker.pid})")
        create_topic(broker.bootstrap, TOPIC, partitions=3)
        records = [(e["order_id"].encode(), json.dumps(e).encode(), None) for e in events]
        started = time.monotonic()
        produce(broker.bootstrap, TOPIC, records)
        print(f"produce  {len(records):,} change events to '{TOPIC}' in {time.monotonic() - started:.1f}s")
        stats = run_stream(broker.bootstrap, table_path, out / "checkpoints" / "orders")

    report(table_path, stats)
    return 0


def run_stream(bootstrap: str, table_path: Path, checkpoint: Path) -> dict:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from streamer.source import register_kafka_source
    from table.mor_table import MorTable, TableSpec, WriteOptions
    from table.spark_write import upsert_dataframe

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("mor-streamer demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_kafka_source(spark)
    table = MorTable.create_or_load(
        str(table_path),
        TableSpec(
            name="orders",
            schema=ORDER_SCHEMA,
            record_key_fields=("order_id",),
            partition_fields=("region",),
            ordering_field="updated_at",
        ),
    )
    value_schema = from_arrow_schema(ORDER_SCHEMA.append(pa.field("deleted", pa.bool_())))
    stats = {"records": 0, "batches": 0}
    started = time.monotonic()
    with table.writer(WriteOptions(initial_buckets=2, delete_field="deleted"), description="demo") as writer:

        def upsert_batch(batch, batch_id: int) -> None:
            rows = batch.select(F.from_json(F.col("value").cast("string"), value_schema).alias("r")).select("r.*")
            instant = upsert_dataframe(writer, rows)
            count = batch.count()
            stats["records"] += count
            stats["batches"] += 1
            print(f"batch    {batch_id}: {count:,} records -> deltacommit {instant}")

        query = (
            spark.readStream.format("kafka-arrow")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "10000")
            .load()
            .writeStream.foreachBatch(upsert_batch)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    stats["seconds"] = time.monotonic() - started
    spark.stop()
    return stats


def report(table_path: Path, stats: dict) -> None:
    import hudi

    from table.mor_table import MorTable

    table = MorTable.load(str(table_path))
    snapshot = table.snapshot()
    commits = table.timeline().completed_writes()
    print()
    print(f"read     {stats['records']:,} records in {stats['batches']} micro-batches, {stats['seconds']:.1f}s")
    print(f"table    {table_path}")
    print(f"commits  {len(commits)} deltacommits: {commits[0].timestamp} .. {commits[-1].timestamp}")
    print("rows by partition:")
    counts = snapshot.group_by("_hoodie_partition_path").aggregate([("order_id", "count")]).sort_by("_hoodie_partition_path")
    for partition, n in zip(counts["_hoodie_partition_path"].to_pylist(), counts["order_id_count"].to_pylist()):
        print(f"  {partition:<18} {n:>7,}")
    print(f"  {'total':<18} {snapshot.num_rows:>7,}")
    top = snapshot.filter(pc.equal(snapshot["status"], "delivered")).sort_by([("amount", "descending")]).slice(0, 5)
    print("sample query: the five largest delivered orders")
    for r in top.select(["order_id", "region", "amount", "updated_at"]).to_pylist():
        print(f"  {r['order_id']}  {r['region']:<8} {r['amount']:>8.2f}  updated_at={r['updated_at']}")
    batches = hudi.HudiTableBuilder.from_base_uri(str(table_path)).build().read()
    theirs = sum(b.num_rows for b in batches)
    verdict = "same row count" if theirs == snapshot.num_rows else "DIFFERENT row count"
    print(f"hudi-rs  reads {theirs:,} rows: {verdict} as our snapshot reader")
    if theirs != snapshot.num_rows:
        raise SystemExit(1)


if __name__ == "__main__":
    sys.exit(main())
