"""Scenario `backlog`: a topic with a long history taken by a new job with the default config.

Each backlog (10M and 30M records by default) is in a topic of its own before the job starts:
W1's load events, new orders in its 8 regions, about 200 bytes of JSON each. The job runs as a
user first runs it, `streamer run --once` with the source settings at their defaults:
`max_offsets_per_trigger` and `initial_load_max_records` as shipped, so what one micro-batch
takes is the job's own choice. Services are off, as in every ingestion scenario.

Beside each, the same backlog taken in one micro-batch (`max_offsets_per_trigger: null`), the
job's default until it read a backlog 5,000,000 records at a time.

What counts is the memory one micro-batch needs, sampled from outside as the summed PSS of the
job's process tree (its Python driver, JVM and Python workers), and the records/s of the whole
load (from the first micro-batch's start to the last commit), which must not fall as the
backlog grows.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import yaml

from bench import broker, spark, streaming
from bench.measure import PathResult, run_measured
from bench.report import Check, Section
from bench.workload import VALUE_DDL, W1, inserts
from table import MorTable

BACKLOGS = (10_000_000, 30_000_000)
TOPIC_PARTITIONS = 2  # one per core
PSS_TARGET = 3 * 2**30

NOTES = [
    "each backlog is W1's load events (new orders, 8 regions, about 200 bytes of JSON each) in a topic "
    f"of {TOPIC_PARTITIONS} partitions, written back to disk (sync) before the job starts; the job is "
    f"streamer run --once ({spark.MASTER}) with the source's defaults (max_offsets_per_trigger and "
    "initial_load_max_records as shipped), 4 buckets, services off.",
    "seconds: from the first micro-batch's start to the last commit (JVM start and query planning before it "
    "are not in it); p50/p95 are the micro-batches' own seconds; peak PSS is the summed PSS of the job's whole "
    "process tree, sampled every 0.5 s.",
]


def scenario(w: W1, work: Path, backlogs: tuple[int, ...] = BACKLOGS) -> Section:
    """Each backlog of `backlogs` records taken by a new job (W1's size is not used)."""
    results, produced = [], {}
    with broker.kafka(work) as bootstrap:
        for records in sorted(backlogs):
            topic = f"backlog-{records}"
            produced[records] = broker.produce_json(bootstrap, topic, inserts(records), TOPIC_PARTITIONS)
            produced[records]["sync_seconds"] = _written_back()
            for one_batch in (False, True):
                print(f"  {_label(records, one_batch)}", flush=True)
                results.append(_run(work / _name(records, one_batch), records, bootstrap, topic, one_batch))
            broker.delete_topic(bootstrap, topic)
    title = f"A backlog taken with the default config ({spark.MASTER})"
    section = Section(title, results[0].name, results, NOTES, {"produced": produced})
    section.checks = targets(section)
    return section


def _written_back() -> float:
    """Write the topic just produced back to disk before the job starts, as a backlog long in
    Kafka has been: otherwise the job shares the disk with gigabytes of the producer's writes,
    the more of them the larger the backlog. Returns the seconds it took."""
    started = time.monotonic()
    os.sync()
    return time.monotonic() - started


def _name(records: int, one_batch: bool) -> str:
    return f"backlog-{records}" + ("-one-batch" if one_batch else "")


def _label(records: int, one_batch: bool) -> str:
    return f"ours{', one micro-batch' if one_batch else ''}: backlog of {records:,}"


def config(work: Path, bootstrap: str, topic: str, one_batch: bool = False) -> dict:
    """The table's YAML, with nothing of the source's that a new user would not write (or, with
    `one_batch`, the backlog in one micro-batch)."""
    source = {"bootstrap_servers": bootstrap, "topics": topic, "starting_offsets": "earliest"}
    if one_batch:
        source["max_offsets_per_trigger"] = None
    return {
        "table": {
            "name": "orders",
            "path": str(work / "table"),
            "record_key": "order_id",
            "partition_by": "region",
            "ordering_field": "updated_at",
            "delete_field": "is_deleted",
        },
        "source": source,
        "decode": {"key": {"format": "none"}, "value": {"format": "json", "schema": VALUE_DDL}},
        "index": {"initial_buckets": 4},
        "stream": {"checkpoint_location": str(work / "checkpoint")},
        "services": streaming.SERVICES_OFF,
    }


def _run(work: Path, records: int, bootstrap: str, topic: str, one_batch: bool) -> PathResult:
    work.mkdir(parents=True)
    config_path = work / "orders.yaml"
    settings = config(work, bootstrap, topic, one_batch)
    config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    log_path = work / "streamer.log"
    code, wall, rss = run_measured(streaming.command(config_path), log_path, timeout=3 * 3600)
    log = log_path.read_text()
    if code != 0:
        tail = "\n".join(log.splitlines()[-30:])
        return PathResult(
            _name(records, one_batch),
            _label(records, one_batch),
            0,
            0.0,
            expected_rows=records,
            peak_rss=rss,
            details={"error": f"streamer run exited {code}; log {log_path}:\n{tail}"},
        )
    done = streaming.batches(log)
    rows = MorTable.load(str(work / "table")).snapshot(columns=["order_id"]).num_rows
    seconds = (done[-1].ended - done[0].started).total_seconds()
    details = {
        "config": settings,
        "wall_seconds": wall,
        "micro_batches": len(done),
        "batches": [
            {"batch_id": b.batch_id, "records": b.records, "seconds": b.seconds, "files": b.files, "phases": b.phases}
            for b in done
        ],
    }
    return PathResult(
        _name(records, one_batch),
        _label(records, one_batch),
        sum(b.records for b in done),
        seconds,
        [b.seconds for b in done],
        None,
        rows,
        records,
        rss,
        details,
    )


def targets(section: Section) -> list[Check]:
    """The largest backlog within the memory target, at no less than the smallest's records/s,
    both with the default config."""
    defaults = [r for r in section.results if not r.name.endswith("-one-batch")]
    largest, smallest = defaults[-1], defaults[0]
    if "error" in largest.details:
        return [Check(f"a backlog of {largest.expected_rows:,}", "job failed", "taken", False)]
    pss = largest.peak_rss.get("pss", 0)
    checks = [
        Check(f"peak PSS, backlog of {largest.records:,}", f"{pss / 2**30:.2f} GiB", "<= 3 GiB", pss <= PSS_TARGET)
    ]
    if largest is not smallest and "error" not in smallest.details:
        ratio = largest.records_per_second / smallest.records_per_second
        checks.append(
            Check(
                f"records/s at {largest.records:,} over at {smallest.records:,}",
                f"{ratio:.2f}x",
                ">= 1.0x",
                ratio >= 1.0,
            )
        )
    return checks
