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

import re
import statistics
import sys
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from bench import spark
from bench.measure import PathResult, run_measured
from bench.workload import VALUE_DDL, W1
from streamer.config.model import SourceSettings
from table.mor_table import MorTable

# A micro-batch's line, or the initial load's when a batch query makes it (`source.format: kafka`).
BATCH_LINE = re.compile(r"^(\S+ \S+) INFO streamer\.sink: orders (?:batch (\d+)|initial load): ([\d,]+) records, .* in ([\d.]+)s")
PHASE_LINE = re.compile(r"DEBUG streamer\.sink: orders batch (\d+) phases: (.*?)(?:; freshness ([\d.]+)s to ([\d.]+)s)?$")
CAUGHT_UP = re.compile(r"INFO streamer\.sink: orders batch \d+: .*; lag \S+ 0$", re.MULTILINE)
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
        "table": {"name": "orders", "path": str(work / "table"), "record_key": "order_id", "partition_by": "region",
                  "ordering_field": "updated_at", "delete_field": "is_deleted"},
        "source": {"bootstrap_servers": bootstrap, "topics": topic, "starting_offsets": "earliest",
                   "max_offsets_per_trigger": w.batch_rows + partitions,
                   "initial_load_max_records": min(w.initial_rows, INITIAL_LOAD_CAP) + partitions},
        "decode": {"key": {"format": "none"}, "value": {"format": "json", "schema": VALUE_DDL}},
        "index": {"initial_buckets": 4},
        "stream": {"checkpoint_location": str(work / "checkpoint")},
        "services": SERVICES_OFF,
    }


def run(work: Path, w: W1, bootstrap: str, topic: str, partitions: int,
        trigger: str | None = None, source_format: str = "kafka-arrow") -> tuple[PathResult, PathResult]:
    """The upsert batches (the baseline every ratio is against) and the whole run (JVM start,
    initial load through Kafka, upserts): `--once`, or continuous every `trigger`; read with
    `source_format` (Spark's own `kafka` with its connector's jars from the harness's cache)."""
    work.mkdir(parents=True)
    config_path = work / "orders.yaml"
    settings = config(work, w, bootstrap, topic, partitions)
    settings["source"]["format"] = source_format
    if trigger:
        settings["stream"]["trigger_interval"] = trigger
    config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    argv = [sys.executable, "-m", "streamer.cli", "run", str(config_path), "--master", spark.MASTER, "--log-level", "DEBUG"]
    argv += [] if trigger else ["--once"]
    conf = dict(spark.CONF)
    if source_format == "kafka":
        from harness.spark import kafka_connector

        conf["spark.jars"] = ",".join(str(jar) for jar in kafka_connector().jars)
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    log_path = work / "streamer.log"

    def caught_up() -> bool:
        return CAUGHT_UP.search(log_path.read_text()) is not None

    code, wall, rss = run_measured(argv, log_path, stop_when=caught_up if trigger else None)
    log = log_path.read_text()
    if code != 0:
        raise RuntimeError(f"streamer run exited {code}; log {log_path}:\n" + "\n".join(log.splitlines()[-30:]))
    lines = [m for m in map(BATCH_LINE.match, log.splitlines()) if m]
    batch_ids = [int(m[2]) if m[2] is not None else -1 for m in lines]
    batches = [(datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f"), int(m[3].replace(",", "")), float(m[4])) for m in lines]
    phases = {int(m[1]): {name: float(seconds.rstrip("s")) for name, seconds in
                          (part.split(" ") for part in m[2].split(", "))}
              for m in map(PHASE_LINE.search, log.splitlines()) if m}
    rows = MorTable.load(str(work / "table")).snapshot(columns=["order_id"]).num_rows
    details = {"micro_batches": len(batches), "config": settings}

    # A micro-batch belongs to the upsert phase when most of its records come after the load.
    read, load_end, upserts, upsert_phases = 0, None, [], []
    for batch_id, (ended, records, seconds) in zip(batch_ids, batches):
        read += records
        if read - w.initial_rows > records / 2:
            upserts.append((ended, records, seconds))
            upsert_phases.append(phases.get(batch_id, {}))
        else:
            load_end = ended
    details["phases"] = {name: statistics.median(p[name] for p in upsert_phases if name in p)
                         for name in (upsert_phases[0] if upsert_phases else {})}
    first_started = batches[0][0] - timedelta(seconds=batches[0][2])
    name, mode = ("ours-continuous", f"trigger {trigger}") if trigger else ("ours", "--once")
    ours = "ours"
    if source_format == "kafka":
        name, ours = f"{name}-spark-kafka", "ours, format kafka"
    upsert_result = PathResult(
        name, f"{ours}: streamer run {mode} (upserts)", sum(r for _, r, _ in upserts),
        (upserts[-1][0] - load_end).total_seconds(), [s for _, _, s in upserts],
        (load_end - first_started).total_seconds(), rows, w.expected_rows(), rss, details)
    whole = PathResult(
        f"{name}-whole-run", f"{ours}: {mode}, whole run (JVM, load)", read, wall, [s for _, _, s in batches],
        None, rows, w.expected_rows(), rss, details)
    return upsert_result, whole
