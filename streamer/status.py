"""`streamer status`: where each configured table stands against its topics.

For each table: its last commit, how many records it is behind the topics' end offsets (from the
offsets its last commit recorded), the service plans and writes still pending, and the last
error a job recorded for it (kept in `.hoodie/.aux/streamer-last-error.json`).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field

from streamer.config import JobConfig
from streamer.sink import table_checkpoint
from table.mor_table import MorTable
from table.storage import Storage

LAST_ERROR_PATH = ".hoodie/.aux/streamer-last-error.json"


@dataclass
class TableStatus:
    name: str
    path: str
    exists: bool
    last_commit: str | None = None
    lag: dict[str, int] = field(default_factory=dict)  # topic -> records not yet in the table
    pending: list[str] = field(default_factory=list)  # "<instant> <action> <state>"
    last_error: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        if not self.exists:
            return [f"{self.name}: no table yet at {self.path}"]
        lag = ", ".join(f"{t} {n:,} behind" for t, n in sorted(self.lag.items())) or "no offsets committed yet"
        out = [f"{self.name}: last commit {self.last_commit or '-'}; {lag}"]
        out += [f"  pending  {p}" for p in self.pending]
        if self.last_error:
            out.append(f"  last error at {self.last_error['time']}: {self.last_error['message']}")
        return out


def record_error(table_path: str, message: str) -> None:
    """Keep a job's failure with the table, for `streamer status`."""
    error = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "message": message}
    Storage(table_path).write_bytes(LAST_ERROR_PATH, json.dumps(error).encode())


def table_status(config: JobConfig) -> TableStatus:
    path = config.table.path
    status = TableStatus(config.table.name, path, MorTable.exists(path))
    if not status.exists:
        return status
    table = MorTable.load(path)
    timeline = table.timeline()
    writes = timeline.completed_writes()
    status.last_commit = writes[-1].timestamp if writes else None
    status.pending = [f"{i.timestamp} {i.action} {i.state}" for i in timeline.instants if i.state != "completed"]
    checkpoint = table_checkpoint(table)
    if checkpoint is not None:
        ends = end_offsets(config, list(checkpoint.offsets))
        status.lag = {topic: sum(max(0, end - checkpoint.offsets.get(topic, {}).get(p, 0)) for p, end in parts.items())
                      for topic, parts in ends.items()}
    storage = Storage(path)
    if storage.exists(LAST_ERROR_PATH):
        status.last_error = json.loads(storage.read_bytes(LAST_ERROR_PATH))
    return status


def end_offsets(config: JobConfig, committed_topics: list[str]) -> dict[str, dict[int, int]]:
    """The end offset of every partition of the config's topics (those of its pattern that exist)."""
    from confluent_kafka import Consumer, TopicPartition

    source = config.source
    client = {"bootstrap.servers": source.bootstrap_servers, "group.id": "mor-streamer-status",
              "enable.auto.commit": "false",
              **{k[len("kafka."):]: v for k, v in source.options.items() if k.startswith("kafka.")}}
    consumer = Consumer(client)
    try:
        metadata = consumer.list_topics(timeout=30)
        if source.topics:
            topics = list(source.topics)
        else:
            pattern = re.compile(source.topic_pattern)
            topics = sorted(t for t in metadata.topics if pattern.fullmatch(t) and not t.startswith("__"))
        ends = {}
        for topic in sorted(set(topics) | set(committed_topics)):
            partitions = metadata.topics.get(topic)
            if partitions is None or partitions.error is not None:
                continue
            ends[topic] = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                           for p in sorted(partitions.partitions)}
        return ends
    finally:
        consumer.close()
