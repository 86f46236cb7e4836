"""Our path end to end: `streamer run --once`, or continuously with a fixed trigger, over W1
already in a Kafka topic.

The job runs as a user runs it (its own process, local[2], a generated YAML config), with one
micro-batch per W1 batch (`source.max_offsets_per_trigger`). A continuous job is stopped with
SIGTERM once a batch logs no lag left. Its numbers come from its own
log: the sink's line per batch gives the records and the batch's duration (Kafka read, decode,
upsert and commit), its timestamp gives the wall time between batches. Table services are off:
every path here measures ingestion alone; what compaction costs is a scenario of its own.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from bench import spark
from bench.measure import PathResult, cpu_between, run_sampled
from bench.workload import VALUE_DDL, W1
from streamer.config.model import SourceSettings
from table import MorTable

# A micro-batch's line, or the initial load's when a batch query makes it (`source.format: kafka`).
BATCH_LINE = re.compile(
    r"^(\S+ \S+) INFO streamer\.sink: orders (?:batch (\d+)|initial load): ([\d,]+) records, "
    r".* (\d+) files -> deltacommit \S+ in ([\d.]+)s"
)
PHASE_LINE = re.compile(
    r"DEBUG streamer\.sink: orders batch (\d+) phases: (.*?)(?:; freshness ([\d.]+)s to ([\d.]+)s)?$"
)
CAUGHT_UP = re.compile(r"INFO streamer\.sink: orders batch \d+: .*; lag \S+ 0$", re.MULTILINE)
#: The job's first lines name what reads Kafka for `kafka-arrow` (`streamer.app._reader_lines`).
READER_LINE = re.compile(r"kafka-arrow reads Kafka with the (\w+) reader")
SERVICES_OFF = {name: {"mode": "off"} for name in ("compaction", "clustering", "clean", "archive")}


#: The job's own cap on the records its initial load takes at once: beyond it, W1's load
#: continues in micro-batches of `max_offsets_per_trigger`.
INITIAL_LOAD_CAP = SourceSettings.model_fields["initial_load_max_records"].default


def config(work: Path, w: W1, bootstrap: str, topic: str, partitions: int) -> dict:
    """The table's YAML. The source shares a trigger's records among partitions rounding down,
    so one more record per partition keeps micro-batches from drifting into a tiny last one. The
    first micro-batch is the initial load of W1's first rows (the empty table takes its backlog
    at once, up to the job's cap), the next ones W1's upsert batches."""
    return {
        "table": {
            "name": "orders",
            "path": str(work / "table"),
            "record_key": "order_id",
            "partition_by": "region",
            "ordering_field": "updated_at",
            "delete_field": "is_deleted",
        },
        "source": {
            "bootstrap_servers": bootstrap,
            "topics": topic,
            "starting_offsets": "earliest",
            "max_offsets_per_trigger": w.batch_rows + partitions,
            "initial_load_max_records": min(w.initial_rows, INITIAL_LOAD_CAP) + partitions,
        },
        "decode": {"key": {"format": "none"}, "value": {"format": "json", "schema": VALUE_DDL}},
        "index": {"initial_buckets": 4},
        "stream": {"checkpoint_location": str(work / "checkpoint")},
        "services": SERVICES_OFF,
    }


@dataclass(frozen=True)
class Batch:
    """One micro-batch as the sink logged it (-1: the initial load's batch query)."""

    batch_id: int
    ended: datetime  # when its line was logged, after its commit
    records: int
    seconds: float  # the sink's own: Kafka read, decode, upsert and commit
    files: int  # files its deltacommit wrote
    phases: dict[str, float]  # its DEBUG phase line, where logged

    @property
    def started(self) -> datetime:
        return self.ended - timedelta(seconds=self.seconds)


def batches(log: str) -> list[Batch]:
    """The micro-batches of a job's log, in order."""
    lines = log.splitlines()
    phases = {
        int(m[1]): {
            name: float(seconds.rstrip("s")) for name, seconds in (part.split(" ") for part in m[2].split(", "))
        }
        for m in map(PHASE_LINE.search, lines)
        if m
    }
    found = []
    for m in map(BATCH_LINE.match, lines):
        if m:
            batch_id = int(m[2]) if m[2] is not None else -1
            found.append(
                Batch(
                    batch_id,
                    datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f"),
                    int(m[3].replace(",", "")),
                    float(m[5]),
                    int(m[4]),
                    phases.get(batch_id, {}),
                )
            )
    return found


def command(config_path: Path, trigger: str | None = None, source_format: str = "kafka-arrow") -> list[str]:
    """`streamer run` of one config as a user runs it, local[2] with the bench's Spark settings."""
    argv = [
        sys.executable,
        "-m",
        "streamer.cli",
        "run",
        str(config_path),
        "--master",
        spark.MASTER,
        "--log-level",
        "DEBUG",
    ]
    argv += [] if trigger else ["--once"]
    conf = dict(spark.CONF)
    if source_format == "kafka":
        from harness.spark import kafka_connector

        conf["spark.jars"] = ",".join(str(jar) for jar in kafka_connector().jars)
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return argv


def run(
    work: Path,
    w: W1,
    bootstrap: str,
    topic: str,
    partitions: int,
    trigger: str | None = None,
    source_format: str = "kafka-arrow",
    name: str | None = None,
    table: dict | None = None,
    reader: str | None = None,
) -> tuple[PathResult, PathResult]:
    """The upsert batches (the baseline every ratio is against) and the whole run (JVM start,
    initial load through Kafka, upserts): `--once`, or continuous every `trigger`; read with
    `source_format` (Spark's own `kafka` with its connector's jars from the harness's cache),
    and for `kafka-arrow` with `reader` (its source option: `native`, `python`; None leaves the
    default, `auto`, which takes the native reader when it is installed).
    `table` overrides table settings (an `s3://` path and its storage options); `name` the
    result's name."""
    work.mkdir(parents=True)
    config_path = work / "orders.yaml"
    settings = config(work, w, bootstrap, topic, partitions)
    settings["source"]["format"] = source_format
    if reader is not None:
        settings["source"]["options"] = {"reader": reader}
    settings["table"].update(table or {})
    if trigger:
        settings["stream"]["trigger_interval"] = trigger
    config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    log_path = work / "streamer.log"

    def caught_up() -> bool:
        return CAUGHT_UP.search(log_path.read_text()) is not None

    load_average = os.getloadavg()  # the machine is shared: what else ran when this path did
    code, wall, rss, cpu = run_sampled(
        command(config_path, trigger, source_format), log_path, stop_when=caught_up if trigger else None
    )
    exited = datetime.now()
    log = log_path.read_text()
    if code != 0:
        raise RuntimeError(f"streamer run exited {code}; log {log_path}:\n" + "\n".join(log.splitlines()[-30:]))
    done = batches(log)
    rows = (
        MorTable.load(settings["table"]["path"], settings["table"].get("storage_options"))
        .snapshot(columns=["order_id"])
        .num_rows
    )
    details = {
        "micro_batches": len(done),
        "config": settings,
        "exited": exited.isoformat(),
        "load_average": [load_average, os.getloadavg()],  # 1, 5 and 15 minutes, at its start and end
    }
    if source_format == "kafka-arrow":
        used = READER_LINE.search(log)
        details["reader"] = used[1] if used else None

    # A micro-batch belongs to the upsert phase when most of its records come after the load.
    read, load, upserts = 0, [], []
    for batch in done:
        read += batch.records
        (upserts if read - w.initial_rows > batch.records / 2 else load).append(batch)
    load_end = load[-1].ended
    details["phases"] = {
        name: statistics.median(b.phases[name] for b in upserts if name in b.phases)
        for name in (upserts[0].phases if upserts else {})
    }
    details["load_records"] = sum(b.records for b in load)
    details["load_phases"] = {name: sum(b.phases.get(name, 0.0) for b in load) for name in load[0].phases}
    details["batches"] = [
        {
            "batch_id": b.batch_id,
            "ended": b.ended.isoformat(),
            "records": b.records,
            "seconds": b.seconds,
            "files": b.files,
        }
        for b in done
    ]
    upsert_records = sum(b.records for b in upserts)
    upsert_seconds = (upserts[-1].ended - load_end).total_seconds()
    if upsert_seconds > 0:
        used = cpu_between(cpu, load_end.timestamp(), upserts[-1].ended.timestamp())
        # CPU a record by role over the upserts (what bounds a job whose cores are busy), and how
        # busy the job kept the machine's cores
        details["upsert_cpu_us"] = {role: seconds / upsert_records * 1e6 for role, seconds in used.items()}
        details["upsert_cpu_busy"] = sum(used.values()) / (upsert_seconds * (os.cpu_count() or 1))
    first_started = done[0].started
    path, mode = ("ours-continuous", f"trigger {trigger}") if trigger else ("ours", "--once")
    ours = "ours"
    if source_format == "kafka":
        path, ours = f"{path}-spark-kafka", "ours, format kafka"
    elif reader == "python":
        path, ours = f"{path}-python-reader", "ours, python reader"
    name = name or path
    upsert_result = PathResult(
        name,
        f"{ours}: streamer run {mode} (upserts)",
        upsert_records,
        upsert_seconds,
        [b.seconds for b in upserts],
        (load_end - first_started).total_seconds(),
        rows,
        w.expected_rows(),
        rss,
        details,
    )
    whole = PathResult(
        f"{name}-whole-run",
        f"{ours}: {mode}, whole run (JVM, load)",
        read,
        wall,
        [b.seconds for b in done],
        None,
        rows,
        w.expected_rows(),
        rss,
        details,
    )
    return upsert_result, whole
