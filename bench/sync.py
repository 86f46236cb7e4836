"""Scenario `sync`: what the catalog sync adds to a micro-batch.

    PYTHONPATH=. python -m bench --scenario sync [--batches K]   (K at most BATCHES)

A Hive Metastore (Apache Hive's standalone metastore, `harness.hive_metastore`, Derby) and a JVM
with PySpark's Hive client (py4j, as the job's driver has it) run beside the benchmark. One
table of ours per run takes the same upsert batches (BATCH_ROWS records over P partitions, P = 8
and 200) from the in-process writer, and after each commit:

- `off`: nothing;
- `inline`: the sync runs on the writer's thread (`sync.mode: inline`), so the batch waits for it;
- `async`: the table's sync thread is woken (`sync.mode: async`) and the next batch starts at once.

A batch's seconds are its upsert plus what follows its commit, as the sink spends them before
the next micro-batch. The first batch creates the partitions and registers them (both tables),
so it is reported apart; the others update existing partitions, the steady state of a stream.
"Added" is a run's median batch less the median batch of `off` with as many partitions.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import pyarrow as pa

from bench.measure import PathResult
from bench.report import Section
from bench.workload import W1
from harness.hive_metastore import HiveMetastore
from streamer.catalog import CatalogSync
from streamer.config.model import SyncSettings
from streamer.metrics import Metrics
from table import HiveMetastoreClient, HiveSync, MorTable, SyncTarget, TableSpec, WriteOptions

PARTITIONS = (8, 200)
MODES = ("off", "inline", "async")
BATCH_ROWS = 20_000
BATCHES = 8
SCHEMA = pa.schema(
    [("order_id", pa.string()), ("day", pa.string()), ("amount", pa.float64()), ("updated_at", pa.int64())]
)


def batch(rng: random.Random, partitions: int, n: int) -> pa.Table:
    keys = [f"o-{rng.randrange(BATCH_ROWS * 4)}" for _ in range(BATCH_ROWS)]
    return pa.table(
        {
            "order_id": keys,
            "day": [f"d{int(k[2:]) % partitions:03d}" for k in keys],
            "amount": [rng.random() * 100 for _ in keys],
            "updated_at": [n] * len(keys),
        },
        schema=SCHEMA,
    )


def run(work: Path, jvm, metastore: HiveMetastore, partitions: int, mode: str, batches: int) -> PathResult:
    path = work / f"p{partitions}-{mode}"
    table = MorTable.create(str(path), TableSpec("orders", SCHEMA, ("order_id",), "updated_at", ("day",)))
    catalog = None
    metrics = Metrics()
    if mode != "off":
        settings = SyncSettings(mode=mode, metastore_uris=metastore.uri, database="bench")
        hive = HiveSync(
            table, SyncTarget("bench", f"orders_p{partitions}_{mode}"), lambda: HiveMetastoreClient(jvm, metastore.uri)
        )
        catalog = CatalogSync(settings, table, hive, metrics.table("orders", 1.0, 10))
    rng = random.Random(partitions)
    seconds: list[float] = []
    waited: list[float] = []  # what the batch spent after its commit, on the sync or on waking its thread
    with table.writer(WriteOptions(initial_buckets=2)) as writer:
        for n in range(batches):
            rows = batch(rng, partitions, n)
            started = time.monotonic()
            writer.upsert(rows)
            committed = time.monotonic()
            if catalog is not None:
                catalog.after_commit()
            seconds.append(time.monotonic() - started)
            waited.append(time.monotonic() - committed)
    behind_at_end = None
    if catalog is not None:
        finishing = time.monotonic()
        catalog.finish()
        behind_at_end = time.monotonic() - finishing
        catalog.close()
    steady = seconds[1:]
    syncs = metrics.registry.get_sample_value("mor_streamer_catalog_sync_duration_seconds_count", {"table": "orders"})
    sync_seconds = metrics.registry.get_sample_value(
        "mor_streamer_catalog_sync_duration_seconds_sum", {"table": "orders"}
    )
    return PathResult(
        f"p{partitions}-{mode}",
        f"{partitions} partitions, sync {mode}",
        BATCH_ROWS * len(steady),
        sum(steady),
        steady,
        load_seconds=seconds[0],
        details={
            "first_batch_seconds": seconds[0],
            "final_sync_seconds": behind_at_end,
            "first_wait_seconds": waited[0],
            "steady_wait_seconds": waited[1:],
            "syncs": syncs,
            "sync_seconds": sync_seconds,
            "state": catalog.state.__dict__ if catalog is not None else None,
        },
    )


def warm_up(work: Path, jvm, metastore: HiveMetastore) -> None:
    """One sync of a scratch table, so that the runs do not pay for loading Hive's client classes."""
    table = MorTable.create(str(work / "warm-up"), TableSpec("orders", SCHEMA, ("order_id",), "updated_at", ("day",)))
    with table.writer(WriteOptions(initial_buckets=1)) as writer:
        writer.upsert(batch(random.Random(0), 2, 0).slice(0, 10))
    sync = HiveSync(table, SyncTarget("bench", "warm_up"), lambda: HiveMetastoreClient(jvm, metastore.uri))
    sync.sync()
    sync.close()


def scenario(w: W1, work: Path) -> Section:
    from pyspark.java_gateway import launch_gateway

    work.mkdir(parents=True, exist_ok=True)
    batches = max(3, min(w.batches, BATCHES))
    gateway = launch_gateway()
    results: list[PathResult] = []
    try:
        with HiveMetastore(work / "metastore") as metastore:
            warm_up(work, gateway.jvm, metastore)
            for partitions in PARTITIONS:
                for mode in MODES:
                    print(f"  {partitions} partitions, sync {mode}", flush=True)
                    results.append(run(work, gateway.jvm, metastore, partitions, mode, batches))
    finally:
        gateway.shutdown()
        gateway.proc.kill()
        gateway.proc.wait()
    notes = [
        f"{BATCH_ROWS:,} records per batch, {batches - 1} steady batches per run after the first "
        '("load s": the first batch, which creates and registers the partitions); the client\'s JVM '
        "warmed up by one sync before the runs",
        "added: what the batch spent after its commit (inline: the sync; async: waking the thread), "
        "median of the steady batches, and on the first; sync: the syncs' own seconds, on the batch's "
        "thread or the sync thread (async takes the commits made meanwhile in one sync)",
    ]
    for partitions in PARTITIONS:
        for mode in ("inline", "async"):
            r = next(r for r in results if r.name == f"p{partitions}-{mode}")
            syncs, spent = r.details["syncs"] or 0, r.details["sync_seconds"] or 0.0
            notes.append(
                f"{partitions} partitions, {mode}: added {statistics.median(r.details['steady_wait_seconds']):.3f} s "
                f"per steady batch, {r.details['first_wait_seconds']:.2f} s on the first (registering "
                f"{partitions} partitions in two tables); {syncs:.0f} syncs, {spent:.2f} s in all"
            )
    return Section("catalog sync: seconds added to a micro-batch", "p8-off", results, notes)
