"""`make demo`: an embedded broker, a stream of order changes, `streamer run configs/ --once`, a report.

Runs on a bare machine: it starts the embedded Kafka-compatible broker, produces order change
events (inserts, updates, deletes, late updates, and a few malformed messages) to the `orders`
topic, runs the ingestion job over the demo table config in `configs/`, and prints what landed,
checked with hudi-rs.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import pyarrow.compute as pc

from streamer.kafka.embedded_broker import EmbeddedBroker, create_topic, produce

TOPIC = "orders"
REGIONS = ["emea", "apac", "amer", "latam", "anz", "mena", "nordics", "iberia"]
STATUSES = ["created", "paid", "packed", "shipped", "delivered"]
NOTES = ["leave at the door", "gift wrap please", "call before delivery", "fragile: glassware inside",
         "deliver after 6pm", "business address, reception desk"]
DEMO_CONFIGS = Path(os.environ.get("DEMO_CONFIGS", Path(__file__).resolve().parents[2] / "configs"))
MALFORMED = [
    b'{"order_id": "ord-bad-1", "region": "emea", "amount": 12.5, "updated_at": 17',  # truncated
    b'{"order_id": "ord-bad-2", "region": "emea", "amount": "twelve", "updated_at": 1}',  # wrong type
    b'{"region": "apac", "amount": 3.0, "updated_at": 2}',  # no record key
    b"\x00\x01garbage\xff",
]


def change_events(count: int, seed: int = 42) -> list[dict]:
    """Order changes: new orders, status updates, some arriving late, and cancellations.

    `updated_at` (epoch milliseconds) never repeats for an order, so the expected table does not
    depend on where micro-batch boundaries fall.
    """
    rng = random.Random(seed)
    orders: list[dict] = []
    seen: set[tuple[str, int]] = set()
    events = []
    clock = 1_700_000_000_000
    for _ in range(count):
        clock += rng.randint(1, 20)
        roll = rng.random()
        if not orders or roll < 0.35:
            event = {
                "order_id": f"ord-{len(orders):06d}",
                "customer": f"cust-{rng.randint(1, 2000):05d}",
                "region": rng.choice(REGIONS),
                "amount": round(rng.uniform(5, 900), 2),
                "status": "created",
                "note": rng.choice(NOTES),
                "updated_at": clock,
                "deleted": False,
            }
            orders.append(event)
        elif roll < 0.95:
            late = roll > 0.88  # an update that arrives after newer ones
            event = dict(rng.choice(orders), status=rng.choice(STATUSES), updated_at=clock - (5000 if late else 0))
        else:
            event = dict(rng.choice(orders), updated_at=clock, deleted=True)
        while (event["order_id"], event["updated_at"]) in seen:
            event["updated_at"] -= 1
        seen.add((event["order_id"], event["updated_at"]))
        events.append(event)
    return events


def as_kafka_records(events: list[dict]) -> list[tuple[bytes, bytes, None]]:
    return [(e["order_id"].encode(), json.dumps(e).encode(), None) for e in events]


def main() -> int:
    from streamer import app
    from streamer.app import configure_logging
    from streamer.config.loading import load_configs

    out = Path(os.environ.get("DEMO_OUTPUT", "demo-output")).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    os.environ["MOR_STREAMER_DATA"] = str(out)
    events = change_events(int(os.environ.get("DEMO_EVENTS", "30000")))

    with EmbeddedBroker(log_path=str(out / "broker.log")) as broker:
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = broker.bootstrap
        print(f"broker   embedded Kafka-compatible broker at {broker.bootstrap} (pid {broker.pid})")
        create_topic(broker.bootstrap, TOPIC, partitions=3)
        records = as_kafka_records(events)
        at = len(records) // 2
        records[at:at] = [(b"bad", raw, None) for raw in MALFORMED]
        started = time.monotonic()
        produce(broker.bootstrap, TOPIC, records)
        print(f"produce  {len(records):,} messages to '{TOPIC}' ({len(MALFORMED)} malformed) "
              f"in {time.monotonic() - started:.1f}s")
        configure_logging()
        configs = load_configs(DEMO_CONFIGS)
        print(f"run      streamer run {DEMO_CONFIGS} --once")
        spark = app.spark_session(conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
        spark.sparkContext.setLogLevel("ERROR")
        started = time.monotonic()
        result = app.run(configs, spark, once=True)
        seconds = time.monotonic() - started
        spark.stop()
    for config, outcome in zip(configs, result.tables):
        report(config, outcome, seconds)
    return result.exit_code


def report(config, outcome, seconds: float) -> None:
    import hudi

    from table.mor_table import MorTable

    table = MorTable.load(config.table.path)
    snapshot = table.snapshot()
    timeline = table.timeline()
    commits = timeline.completed_writes()
    compactions = timeline.completed("commit")
    print()
    print(f"read     {outcome.records:,} records in {outcome.batches} micro-batches, {seconds:.1f}s")
    if outcome.error:
        print(f"FAILED   {outcome.error}")
    print(f"table    {config.table.path}")
    print(f"commits  {len(commits) - len(compactions)} deltacommits and {len(compactions)} compaction(s): "
          f"{commits[0].timestamp} .. {commits[-1].timestamp}")
    print("rows by partition:")
    counts = snapshot.group_by("_hoodie_partition_path").aggregate([("order_id", "count")]).sort_by("_hoodie_partition_path")
    for partition, n in zip(counts["_hoodie_partition_path"].to_pylist(), counts["order_id_count"].to_pylist()):
        print(f"  {partition:<18} {n:>7,}")
    print(f"  {'total':<18} {snapshot.num_rows:>7,}")
    top = snapshot.filter(pc.equal(snapshot["status"], "delivered")).sort_by([("amount", "descending")]).slice(0, 5)
    print("sample query: the five largest delivered orders")
    for r in top.select(["order_id", "region", "amount", "updated_at"]).to_pylist():
        print(f"  {r['order_id']}  {r['region']:<8} {r['amount']:>8.2f}  updated_at={r['updated_at']}")
    if MorTable.exists(config.table.quarantine_location):
        bad = MorTable.load(config.table.quarantine_location).snapshot(columns=["topic", "partition", "offset", "reason"])
        print(f"quarantine  {bad.num_rows} malformed messages in {config.table.quarantine_location}:")
        for r in bad.sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist():
            print(f"  {r['topic']}[{r['partition']}]@{r['offset']}: {r['reason']}")
    batches = hudi.HudiTableBuilder.from_base_uri(config.table.path).build().read()
    theirs = sum(b.num_rows for b in batches)
    verdict = "same row count" if theirs == snapshot.num_rows else "DIFFERENT row count"
    print(f"hudi-rs  reads {theirs:,} rows: {verdict} as our snapshot reader")
    if theirs != snapshot.num_rows:
        raise SystemExit(1)


if __name__ == "__main__":
    sys.exit(main())
