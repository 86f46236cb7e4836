"""Scenario `writers` (on request): what optimistic concurrency costs (`table.concurrency:
optimistic_concurrency_control`, docs/operations.md "Writing beside the stream").

- **The commit lock per commit.** Our in-process writer commits the same small batches to two
  tables, one under the writer lease (`single_writer`) and one under optimistic concurrency
  (heartbeat, commit lock, conflict check, fenced completion); the difference of their mean
  commit times is what the lock adds.
- **The stream beside a backfill.** `streamer run --once` takes W1's upsert batches from Kafka
  alone, then again into a new table while a backfill process commits rows of other partitions
  (regions W1 never uses) into that table every second; the stream's records/s beside the
  backfill over alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench import broker, spark, streaming
from bench.measure import PathResult
from bench.report import Check, Section
from bench.workload import W1, WorkloadFiles, kafka_records
from streamer.sandbox.topics import create_topic, produce
from table import Concurrency, MorTable, TableSpec, WriteOptions

TOPIC = "orders"
TOPIC_PARTITIONS = 2
LOCK_COMMITS = 40
LOCK_BATCH_ROWS = 2_000
#: The backfill beside the stream: a commit of this many rows every `BACKFILL_PERIOD_SECONDS`.
BACKFILL_ROWS = 20_000
BACKFILL_PERIOD_SECONDS = 1.0
LOCK_TARGET_MS = 50.0
BESIDE_TARGET = 0.8

NOTES = [
    f"commit lock: {LOCK_COMMITS} commits of {LOCK_BATCH_ROWS:,} W1 rows by our in-process writer into each table "
    "(local disk), single_writer and optimistic_concurrency_control taking turns; ms per commit are means over "
    "the commits after the first.",
    "stream beside a backfill: the job (kafka-arrow, local[2], services off, optimistic_concurrency_control in "
    f"both runs) takes W1's upsert batches; the backfill is a process of its own committing {BACKFILL_ROWS:,} rows "
    f"of regions W1 never writes every {BACKFILL_PERIOD_SECONDS:.0f} s through our in-process writer, from the "
    "job's start to its end, on the same 2 cores.",
]


def scenario(w: W1, work: Path) -> Section:
    lock = _lock_cost(work / "lock", w)
    files = WorkloadFiles(work / "w1")
    files.write(w.tables())
    results = []
    with broker.kafka(work) as bootstrap:
        records = kafka_records(files.load())
        for batch in files.batches():
            records += kafka_records(batch)
        create_topic(bootstrap, TOPIC, partitions=TOPIC_PARTITIONS)
        produce(bootstrap, TOPIC, records)
        optimistic = {"concurrency": "optimistic_concurrency_control"}
        print("  ours: streamer run --once, optimistic, alone", flush=True)
        alone, _ = streaming.run(work / "alone", w, bootstrap, TOPIC, TOPIC_PARTITIONS, name="alone", table=optimistic)
        print("  ours: streamer run --once, optimistic, beside a backfill", flush=True)
        table_path = work / "beside" / "table"
        backfill = _BackfillProcess(table_path, work / "backfill.json")
        try:
            beside, _ = streaming.run(
                work / "beside", w, bootstrap, TOPIC, TOPIC_PARTITIONS, name="beside-backfill", table=optimistic
            )
        finally:
            backfilled = backfill.stop()
        beside.details["backfill"] = backfilled
        alone = replace(alone, label="ours, optimistic: alone")
        # the table also holds the backfill's rows, some committed after the job's count: not compared
        beside = replace(beside, label="ours, optimistic: beside a backfill", table_rows=None, expected_rows=None)
        results += [alone, beside]
    section = Section(f"Writers beside the stream ({spark.MASTER})", "alone", results, NOTES)
    section.details["commit_lock"] = lock
    section.tables.append(_lock_table(lock))
    section.checks = _checks(lock, alone, beside)
    return section


def _lock_cost(work: Path, w: W1) -> dict:
    rows = next(iter(w.tables())).slice(0, LOCK_BATCH_ROWS)
    spec = TableSpec(
        "orders",
        rows.schema.remove(rows.schema.get_field_index("is_deleted")),
        ("order_id",),
        "updated_at",
        ("region",),
    )
    writers = {}
    for mode in (Concurrency.SINGLE_WRITER, Concurrency.OPTIMISTIC):
        table = MorTable.create(str(work / mode.value), spec)
        options = WriteOptions(initial_buckets=4, delete_field="is_deleted", concurrency=mode)
        writers[mode] = table.writer(options, description=f"bench {mode.value}").open()
    seconds: dict[Concurrency, list[float]] = {mode: [] for mode in writers}
    try:
        for i in range(LOCK_COMMITS):
            batch = rows.set_column(
                rows.schema.get_field_index("updated_at"), "updated_at", pa.array(np.full(len(rows), 10**13 + i))
            )
            for mode, writer in writers.items():
                started = time.perf_counter()
                writer.upsert(batch)
                seconds[mode].append(time.perf_counter() - started)
    finally:
        for writer in writers.values():
            writer.close()
    means = {mode.value: statistics.mean(s[1:]) * 1000 for mode, s in seconds.items()}
    return {
        "commits": LOCK_COMMITS,
        "rows_per_commit": LOCK_BATCH_ROWS,
        "mean_ms": means,
        "median_ms": {mode.value: statistics.median(s[1:]) * 1000 for mode, s in seconds.items()},
        "added_ms": means[Concurrency.OPTIMISTIC.value] - means[Concurrency.SINGLE_WRITER.value],
    }


def _lock_table(lock: dict) -> str:
    lines = ["the commit lock: ms per commit of our in-process writer (mean, median)"]
    for mode, mean in lock["mean_ms"].items():
        lines.append(f"  {mode:<34} {mean:8.1f} {lock['median_ms'][mode]:8.1f}")
    lines.append(f"  {'added by optimistic concurrency':<34} {lock['added_ms']:8.1f}")
    return "\n".join(lines)


def _checks(lock: dict, alone: PathResult, beside: PathResult) -> list[Check]:
    ratio = beside.records_per_second / alone.records_per_second if alone.records_per_second else 0.0
    return [
        Check(
            "the commit lock, per commit on local disk",
            f"{lock['added_ms']:.1f} ms",
            f"<= {LOCK_TARGET_MS:.0f} ms",
            lock["added_ms"] <= LOCK_TARGET_MS,
        ),
        Check(
            "the stream beside a backfill of other partitions, over alone",
            f"{ratio:.2f}x",
            f">= {BESIDE_TARGET}x",
            ratio >= BESIDE_TARGET,
        ),
    ]


class _BackfillProcess:
    """A process committing rows of regions W1 never writes into the stream's table, paced, until stopped."""

    SCRIPT = """
import json, sys, time
import numpy as np
import pyarrow as pa
from table import Concurrency, MorTable, WriteOptions
path, out, rows, period = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
while not MorTable.exists(path):
    time.sleep(0.1)
table = MorTable.load(path)
options = WriteOptions(initial_buckets=4, delete_field="is_deleted", concurrency=Concurrency.OPTIMISTIC)
done, conflicts, n = [], 0, 0
with table.writer(options, description="bench backfill") as writer:
    schema = pa.schema([f for f in table.schema()]).append(pa.field("is_deleted", pa.bool_()))
    while True:
        started = time.monotonic()
        ids = np.arange(n * rows, (n + 1) * rows)
        batch = pa.table({f.name: (
            pa.array([f"bf-{i:09d}" for i in ids]) if f.name == "order_id" else
            pa.array([f"backfill-{i % 4}" for i in ids]) if f.name == "region" else
            pa.array(np.full(rows, 10**13, dtype=np.int64)) if f.name == "updated_at" else
            pa.array(np.zeros(rows, dtype=bool)) if f.name == "is_deleted" else
            pa.nulls(rows, f.type)) for f in schema})
        try:
            writer.upsert(batch)
            done.append(time.monotonic() - started)
        except Exception as e:
            conflicts += 1
        n += 1
        with open(out, "w") as f:
            json.dump({"commits": len(done), "rows": len(done) * rows, "failed": conflicts,
                       "mean_commit_seconds": sum(done) / len(done) if done else None}, f)
        time.sleep(max(0.0, period - (time.monotonic() - started)))
"""

    def __init__(self, table_path: Path, out: Path):
        self.out = out
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                self.SCRIPT,
                str(table_path),
                str(out),
                str(BACKFILL_ROWS),
                str(BACKFILL_PERIOD_SECONDS),
            ],
            env={**os.environ},
        )

    def stop(self) -> dict:
        self.process.terminate()
        self.process.wait(30)
        return json.loads(self.out.read_text()) if self.out.exists() else {"commits": 0}
