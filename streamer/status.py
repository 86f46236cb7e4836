"""`streamer status`: where each configured table stands against its topics.

For each table: its last commit, how many records it is behind the topics' end offsets (from the
offsets its last commit recorded), the service plans and writes still pending, and the last
error a job recorded for it (kept in `.hoodie/.aux/streamer-last-error.json`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from streamer.config import JobConfig
from streamer.kafka_offsets import lag
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
        status.lag = lag(config.source, checkpoint.offsets)
    storage = Storage(path)
    if storage.exists(LAST_ERROR_PATH):
        status.last_error = json.loads(storage.read_bytes(LAST_ERROR_PATH))
    return status
