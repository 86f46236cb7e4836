"""Helpers for the ingestion tests: table configs on disk, feeding a topic, checking a table."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import hudi
import pyarrow as pa
import yaml
from confluent_kafka import Consumer, TopicPartition

from harness.class_data import TEST_JAVA_OPTIONS
from streamer.checkpoint import CHECKPOINT_KEY, StreamCheckpoint, table_checkpoint
from streamer.sandbox.change_events import as_kafka_records, change_events
from table.file_group.fs_view import list_partitions
from table.file_group.log_file.reader import read_log_file
from table.mor_table import MorTable, TableSpec
from table.services.archive import read_archived_instants
from table.storage.layout import BaseFileName, LogFileName
from table.storage.markers import marked_files
from table.timeline.commit_metadata import CommitMetadata
from table.timeline.timeline import State
from table.write.writer import WriteOptions
from tests.support import kafka_broker
from tests.support.oracle import Oracle

REPO = Path(__file__).resolve().parents[2]
#: The `streamer` command of this venv, as a user runs it (`python -m` would put the working
#: directory first on the driver's path).
STREAMER_SCRIPT = Path(sys.executable).parent / "streamer"
VALUE_SCHEMA = (
    "order_id STRING, customer STRING, region STRING, amount DOUBLE, status STRING, "
    "note STRING, updated_at BIGINT, deleted BOOLEAN"
)
DATA_COLUMNS = ["order_id", "customer", "region", "amount", "status", "note", "updated_at"]
ORDER_SCHEMA = pa.schema(
    [
        ("order_id", pa.string()),
        ("customer", pa.string()),
        ("region", pa.string()),
        ("amount", pa.float64()),
        ("status", pa.string()),
        ("note", pa.string()),
        ("updated_at", pa.int64()),
        ("deleted", pa.bool_()),
    ]
)


def order_config(tmp: Path, name: str, bootstrap: str, topic: str, **overrides) -> dict:
    """The mapping of a JSON orders table config; `overrides` replace whole sections' keys."""
    config = {
        "table": {
            "name": name,
            "path": str(tmp / "tables" / name),
            "record_key": "order_id",
            "partition_by": "region",
            "ordering_field": "updated_at",
            "delete_field": "deleted",
        },
        # Micro-batches from the first record on: tests of the initial load turn it on.
        "source": {
            "bootstrap_servers": bootstrap,
            "topics": topic,
            "starting_offsets": "earliest",
            "max_offsets_per_trigger": 10000,
            "initial_load_max_records": 0,
        },
        "decode": {"key": {"format": "string"}, "value": {"format": "json", "schema": VALUE_SCHEMA}},
        "index": {"initial_buckets": 2},
        "stream": {"trigger_interval": "1 second", "checkpoint_location": str(tmp / "checkpoints" / name)},
    }
    for section, values in overrides.items():
        if isinstance(values, dict):
            config.setdefault(section, {}).update(values)
        else:
            config[section] = values
    return config


def shadowing_directory(directory: Path) -> Path:
    """A working directory whose entries are named like our packages and would be imported in
    their place by a Python that puts it first on its path: a `streamer/` package and a `table.py`
    that fail on import, and (a table's directory) room for `table/`."""
    (directory / "streamer").mkdir(parents=True)
    refusal = 'raise ImportError("the working directory\'s {} was imported in place of our package")\n'
    (directory / "streamer" / "__init__.py").write_text(refusal.format("streamer/"))
    (directory / "table.py").write_text(refusal.format("table.py"))
    return directory


def write_config(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{config['table']['name']}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def committed_table(path: str | Path, events: list[dict], offsets: dict[str, dict[int, int]]) -> MorTable:
    """A table of `events` written by the table engine alone (no Spark), in one deltacommit that
    records `offsets` as a job's commit does; a table already there gets one more deltacommit."""
    stored = ORDER_SCHEMA.remove(ORDER_SCHEMA.get_field_index("deleted"))  # the delete marker is not a column
    table = MorTable.create_or_load(
        str(path), TableSpec(Path(path).name, stored, ("order_id",), "updated_at", ("region",))
    )
    with table.writer(WriteOptions(initial_buckets=2, delete_field="deleted")) as writer:
        writer.upsert(
            pa.Table.from_pylist(events, schema=ORDER_SCHEMA),
            {CHECKPOINT_KEY: StreamCheckpoint("query", 0, offsets).to_json()},
        )
    return table


def produce_orders(bootstrap: str, topic: str, events: list[dict]) -> list[tuple[int, int]]:
    """Produce the events keyed by order id; returns each one's (partition, offset)."""
    return kafka_broker.produce(bootstrap, topic, as_kafka_records(events))


def settled(events: list[dict]) -> list[dict]:
    """The events without the updates that come after their order's delete with an older
    ordering value. Whether such an update shows depends on where batches fall (a delete of a
    key the table does not hold yet leaves nothing behind, as in Hudi), and a continuous job's
    batches fall where timing puts them."""
    deleted_at: dict[str, int] = {}
    kept = []
    for event in events:
        deleted = deleted_at.get(event["order_id"])
        if deleted is not None and event["updated_at"] < deleted:
            continue
        if event["deleted"]:
            deleted_at[event["order_id"]] = max(deleted or 0, event["updated_at"])
        kept.append(event)
    return kept


def settled_change_events(count: int, seed: int) -> list[dict]:
    return settled(change_events(count, seed=seed))


def expected_rows(events: list[dict]) -> dict:
    """The table the events must make: ordering values never repeat for a key in these
    streams, so one oracle batch gives the same rows as any batching."""
    oracle = Oracle("order_id", "updated_at", "deleted")
    oracle.apply_batch(events)
    return {k: {c: r[c] for c in DATA_COLUMNS} for k, r in oracle.rows().items()}


def our_rows(path: str) -> dict:
    rows = MorTable.load(path).snapshot(columns=DATA_COLUMNS).to_pylist()
    assert len(rows) == len({r["order_id"] for r in rows}), "a key appears twice in the snapshot"
    return {r["order_id"]: r for r in rows}


def hudi_rs_rows(path: str) -> dict:
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read()
    rows = [r for b in batches for r in b.select(DATA_COLUMNS).to_pylist()]
    assert len(rows) == len({r["order_id"] for r in rows}), "hudi-rs reads a key twice"
    return {r["order_id"]: r for r in rows}


def assert_table_matches(path: str, events: list[dict]) -> None:
    expected = expected_rows(events)
    ours = our_rows(path)
    assert ours == expected, _diff(ours, expected)
    assert hudi_rs_rows(path) == expected


def _diff(got: dict, want: dict) -> str:
    missing = sorted(set(want) - set(got))[:5]
    extra = sorted(set(got) - set(want))[:5]
    changed = [k for k in sorted(set(got) & set(want)) if got[k] != want[k]][:3]
    return (
        f"{len(got)} rows vs {len(want)} expected; missing {missing}, unexpected {extra}, "
        f"different {[(got[k], want[k]) for k in changed]}"
    )


def assert_data_files_belong_to_instants(path: str) -> None:
    """Every base and log file in the partitions belongs to a completed instant (named in its
    write stats while the instant is on the active timeline, else archived) or is marked by a
    pending instant; and every file a completed commit wrote into a slice readers still read
    exists."""
    table = MorTable.load(path)
    storage = table.storage
    timeline = table.timeline()
    archived = {i.timestamp for i in read_archived_instants(table) if i.state is State.COMPLETED}
    written: dict[str, str] = {}
    for instant in timeline.completed_writes():
        for stat in CommitMetadata.from_json(timeline.read_content(instant)).write_stats():
            written[stat.path] = instant.timestamp
    marked_by_pending = {f for i in timeline.pending() for f in marked_files(storage, i.timestamp)}
    orphans = []
    for partition in list_partitions(storage):
        for entry in storage.list_dir(partition):
            base = BaseFileName.parse(entry.name) if entry.name.endswith(".parquet") else None
            log = LogFileName.parse(entry.name)
            if (base is None and log is None) or entry.path in written or entry.path in marked_by_pending:
                continue
            if base is not None:
                writers = {base.instant}
            else:
                blocks = read_log_file(storage, entry.path)
                writers = {b.instant for b in blocks} if blocks else {None}
            if not writers <= archived:
                orphans.append(entry.path)
    assert not orphans, f"data files of no completed or pending instant: {orphans}"

    latest = {
        (s.partition_path, s.file_id): s.base_instant for s in table.file_system_view(timeline=timeline).latest_slices()
    }
    missing = []
    for file, instant in written.items():
        if storage.exists(file):
            continue
        partition, _, name = file.rpartition("/")
        parsed = BaseFileName.parse(name) if name.endswith(".parquet") else LogFileName.parse(name)
        slice_base = parsed.instant if isinstance(parsed, BaseFileName) else parsed.base_instant
        if latest.get((partition, parsed.file_id)) == slice_base:
            missing.append(f"{file} (written by {instant})")
    assert not missing, f"files of the latest slices missing: {missing}"


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offset-check"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()


def committed_offsets(path: str, topic: str, checkpoint_id: str | None = None) -> dict[int, int]:
    """The offsets the stream's last commit records: nothing before the first one."""
    checkpoint = table_checkpoint(MorTable.load(path), checkpoint_id=checkpoint_id) if MorTable.exists(path) else None
    return dict(checkpoint.offsets[topic]) if checkpoint else {}


def streamer_process(
    args: list[str], env: dict | None = None, java_options: str | None = TEST_JAVA_OPTIONS, **popen
) -> subprocess.Popen:
    """`streamer ...` in its own process, as a user runs it; the driver's JVM with `java_options`
    (None: the job's own)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable, **(env or {})}
    conf = ["--conf", f"spark.driver.extraJavaOptions={java_options}"] if java_options else []
    conf += [
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
    ]
    command = [str(STREAMER_SCRIPT), *args]
    if args and args[0] == "run":
        command += ["--master", "local[2]", *conf]
    return subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def run_streamer(args: list[str], env: dict | None = None, timeout: float = 300, **popen) -> tuple[int, str]:
    proc = streamer_process(args, env, **popen)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


class JobOutput:
    """The lines a job process prints, collected as they come (Spark fills a pipe quickly)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True)
        self._reader.start()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, condition, what: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"the job exited while waiting for {what}:\n{self.text[-5000:]}"
            assert time.monotonic() < deadline, f"no {what} after {timeout}s:\n{self.text[-5000:]}"
            time.sleep(0.5)

    def finish(self, timeout: float = 180) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code


def has_read(table_path: str, topic: str, records: int) -> bool:
    """True once the table's commits account for `records` offsets of `topic`."""
    return (
        MorTable.exists(table_path)
        and table_checkpoint(MorTable.load(table_path)) is not None
        and sum(committed_offsets(table_path, topic).values()) >= records
    )
