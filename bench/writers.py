"""Scenario `writers` (on request): what optimistic concurrency costs (`table.concurrency:
optimistic_concurrency_control`, docs/operations.md "Writing beside the stream").

- **The commit lock per commit.** Our in-process writer commits the same small batches to two
  tables, one under the writer lease (`single_writer`) and one under optimistic concurrency
  (heartbeat, commit lock, conflict check, fenced completion); the difference of their mean
  commit times is what the lock adds.
- **The commit lock on S3.** On S3Proxy: the requests of taking and releasing the lock alone, and
  the requests per commit of our in-process writer under each mode, by kind.
- **The stream beside a backfill.** `streamer run --once` takes W1's upsert batches from Kafka
  alone, then again into a new table while a backfill process commits rows of other partitions
  (regions W1 never uses) into that table every second; the stream's records/s beside the
  backfill over alone.
- **Three writers killed at random.** `tests.support.three_writers`' rounds (`--kill-rounds`, 20
  by default): the stream, a backfill and a delete, each a `streamer` process, all three at once,
  their first attempts SIGKILLed at random (every fourth round one of them at the commit lock);
  after every round the table through our reader and hudi-rs against the oracle, after the last
  through Apache Hudi 0.15 too: records lost, duplicated, or there that should not be.
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
from harness.s3 import KINDS, S3Server
from streamer.sandbox.topics import create_topic, produce
from table import Concurrency, MorTable, ObjectStoreCommitLock, Storage, TableSpec, WriteOptions
from tests.support.ingestion import DATA_COLUMNS
from tests.support.three_writers import ThreeWriters

TOPIC = "orders"
TOPIC_PARTITIONS = 2
LOCK_COMMITS = 40
LOCK_BATCH_ROWS = 2_000
#: The backfill beside the stream: a commit of this many rows every `BACKFILL_PERIOD_SECONDS`.
BACKFILL_ROWS = 20_000
BACKFILL_PERIOD_SECONDS = 1.0
LOCK_TARGET_MS = 50.0
S3_LOCK_TARGET_REQUESTS = 3
S3_COMMITS = 10
BESIDE_TARGET = 0.8
KILL_ROUNDS = 20
KILL_TOPIC = "kill-rounds"

NOTES = [
    f"commit lock: {LOCK_COMMITS} commits of {LOCK_BATCH_ROWS:,} W1 rows by our in-process writer into each table "
    "(local disk), single_writer and optimistic_concurrency_control taking turns; ms per commit are means over "
    "the commits after the first.",
    "stream beside a backfill: the job (kafka-arrow, local[2], services off, optimistic_concurrency_control in "
    f"both runs) takes W1's upsert batches; the backfill is a process of its own committing {BACKFILL_ROWS:,} rows "
    f"of regions W1 never writes every {BACKFILL_PERIOD_SECONDS:.0f} s through our in-process writer, from the "
    "job's start to its end, on the same 2 cores.",
]


def scenario(w: W1, work: Path, kill_rounds: int = KILL_ROUNDS) -> Section:
    lock = _lock_cost(work / "lock", w)
    s3_lock = _s3_lock_requests(work / "s3", w)
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
        kills = _kill_rounds(work / "kill-rounds", bootstrap, kill_rounds) if kill_rounds else None
    section = Section(f"Writers beside the stream ({spark.MASTER})", "alone", results, NOTES)
    section.details["commit_lock"] = lock
    section.tables.append(_lock_table(lock))
    section.checks = _checks(lock, alone, beside)
    section.details["s3_commit_lock"] = s3_lock
    section.tables.append(_s3_lock_table(s3_lock))
    section.checks.append(
        Check(
            "the commit lock, requests per commit on S3",
            f"{s3_lock['lock_requests_per_take']:g}",
            f"<= {S3_LOCK_TARGET_REQUESTS}",
            s3_lock["lock_requests_per_take"] <= S3_LOCK_TARGET_REQUESTS,
        )
    )
    if kills is not None:
        section.details["kill_rounds"] = kills
        section.tables.append(_kills_table(kills))
        wrong = sum(sum(found.values()) for found in kills["wrong"].values())
        section.checks.append(
            Check(
                f"records lost or duplicated in {kills['rounds']} rounds of three writers killed at random",
                str(wrong),
                "0",
                wrong == 0,
            )
        )
    return section


def _kill_rounds(work: Path, bootstrap: str, rounds: int) -> dict:
    """Rounds of the three-writer kill test; what each reader found wrong, summed over rounds."""
    from bench.peers.apache_hudi import start_judge

    create_topic(bootstrap, KILL_TOPIC, partitions=TOPIC_PARTITIONS)
    writers = ThreeWriters(work, bootstrap, KILL_TOPIC, seed=2026, rounds=rounds)
    lanes: dict[str, dict[str, int]] = {}
    wrong: dict[str, dict[str, int]] = {}
    started = time.monotonic()
    for number in range(1, rounds + 1):
        runs = writers.round(number, writers.random_plan(number))
        for lane, run in runs.items():
            tally = lanes.setdefault(lane, {"attempts": 0, "killed": 0, "conflicts": 0})
            tally["attempts"] += run.attempts
            tally["killed"] += run.killed
            tally["conflicts"] += run.conflicts
        expected = writers.expected(number)
        for reader, rows in (("ours", _our_rows(writers.path)), ("hudi-rs", _hudi_rs_rows(writers.path))):
            _add(wrong.setdefault(reader, {}), _wrong(rows, expected))
        print(
            f"  kill round {number}/{rounds}: {json.dumps({k: r.killed for k, r in runs.items()})} killed", flush=True
        )
    judge = start_judge(work / "judge")
    try:
        hudi_rows = judge.snapshot(writers.path).select(DATA_COLUMNS).to_pylist()
        wrong["Apache Hudi 0.15"] = _wrong(hudi_rows, writers.expected(rounds))
    finally:
        judge.stop()
    return {
        "rounds": rounds,
        "seconds": time.monotonic() - started,
        "rows": len(writers.expected(rounds)),
        "lanes": lanes,
        "wrong": wrong,
    }


def _our_rows(path: str) -> list[dict]:
    return MorTable.load(path).snapshot(columns=DATA_COLUMNS).to_pylist()


def _hudi_rs_rows(path: str) -> list[dict]:
    import hudi

    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read()
    return [r for b in batches for r in b.select(DATA_COLUMNS).to_pylist()]


def _wrong(rows: list[dict], expected: dict) -> dict[str, int]:
    """Records of `expected` a reader misses or shows changed, shows twice, or shows unasked."""
    found = {r["order_id"]: r for r in rows}
    return {
        "lost": sum(1 for k, row in expected.items() if found.get(k) != row),
        "duplicated": len(rows) - len(found),
        "unexpected": sum(1 for k in found if k not in expected),
    }


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v


def _kills_table(kills: dict) -> str:
    lines = [
        f"three writers killed at random: {kills['rounds']} rounds, {kills['rows']:,} rows at the end, "
        f"{kills['seconds']:.0f} s",
        f"  {'lane':<10} {'attempts':>9} {'killed':>7} {'conflicts':>10}",
    ]
    for lane, tally in kills["lanes"].items():
        lines.append(f"  {lane:<10} {tally['attempts']:>9} {tally['killed']:>7} {tally['conflicts']:>10}")
    lines.append(f"  {'reader':<18} {'lost':>6} {'duplicated':>11} {'unexpected':>11}")
    for reader, found in kills["wrong"].items():
        lines.append(f"  {reader:<18} {found['lost']:>6} {found['duplicated']:>11} {found['unexpected']:>11}")
    return "\n".join(lines)


def _lock_batch(w: W1) -> tuple[pa.Table, TableSpec]:
    """The small batch the lock's costs are measured with, and its table's spec."""
    rows = next(iter(w.tables())).slice(0, LOCK_BATCH_ROWS)
    schema = rows.schema.remove(rows.schema.get_field_index("is_deleted"))
    return rows, TableSpec("orders", schema, ("order_id",), "updated_at", ("region",))


def _lock_cost(work: Path, w: W1) -> dict:
    rows, spec = _lock_batch(w)
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


def _s3_lock_requests(work: Path, w: W1) -> dict:
    """Requests to S3Proxy: of the commit lock taken and released alone, and per commit of our
    in-process writer under each mode (the same small batches, after the writer opened)."""
    rows, spec = _lock_batch(w)
    per_commit: dict[str, dict[str, float]] = {}
    with S3Server(work / "s3proxy") as server:
        bucket = server.create_bucket("writers")
        lock = ObjectStoreCommitLock(Storage(f"s3://{bucket}/lock-alone", server.storage_options), "bench")
        mark = server.requests.mark()
        for _ in range(S3_COMMITS):
            with lock.held():
                pass
        alone = server.requests.since(mark, bucket)
        for mode in (Concurrency.SINGLE_WRITER, Concurrency.OPTIMISTIC):
            table = MorTable.create(f"s3://{bucket}/{mode.value}", spec, server.storage_options)
            options = WriteOptions(initial_buckets=4, delete_field="is_deleted", concurrency=mode)
            with table.writer(options, description=f"bench {mode.value}") as writer:
                writer.upsert(rows)  # the partitions' first slices: not counted
                mark = server.requests.mark()
                for i in range(S3_COMMITS):
                    column = pa.array(np.full(len(rows), 10**13 + i))
                    writer.upsert(rows.set_column(rows.schema.get_field_index("updated_at"), "updated_at", column))
                found = server.requests.since(mark, bucket)
            per_commit[mode.value] = {k: found[k] / S3_COMMITS for k in KINDS if found[k]}
    return {
        "commits": S3_COMMITS,
        "lock_alone": {k: alone[k] / S3_COMMITS for k in KINDS if alone[k]},
        "lock_requests_per_take": sum(alone.values()) / S3_COMMITS,
        "per_commit": per_commit,
    }


def _s3_lock_table(s3: dict) -> str:
    lines = [f"on S3 (S3Proxy): requests per commit, {s3['commits']} commits of {LOCK_BATCH_ROWS:,} rows"]
    kinds = [k for k in KINDS if any(k in found for found in (s3["lock_alone"], *s3["per_commit"].values()))]
    lines.append(f"  {'':<46}" + "".join(f"{k:>8}" for k in kinds) + f"{'all':>8}")
    rows = {"the commit lock alone": s3["lock_alone"], **{f"a commit, {m}": f for m, f in s3["per_commit"].items()}}
    for label, found in rows.items():
        lines.append(f"  {label:<34}" + "".join(f"{found.get(k, 0):>8g}" for k in kinds) + f"{sum(found.values()):>8g}")
    return "\n".join(lines)


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
