"""The paths ours is compared with, each run in a process of its own by `bench.child`.

A peer is a function `(PeerInput) -> PathResult`. It times the initial load and each upsert
batch of W1 read from `WorkloadFiles` (reading a batch is not timed), and reports the rows its
table holds at the end, which must equal W1's live orders (ceilings have no table).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from bench.measure import PathResult
from bench.workload import WorkloadFiles

#: name -> (module of bench.peers, function): imported only in the peer's own process.
PEERS = {
    "mor-python": ("mor_library", "python_writer"),
    "mor-spark": ("mor_library", "spark_writer"),
    "hudi-spark": ("apache_hudi", "upsert"),
    "delta-merge": ("delta", "merge"),
    "spark-cow": ("spark_cow", "overwrite"),
    "kafka-consume": ("ceilings", "kafka_consume"),
    "parquet-write": ("ceilings", "parquet_write"),
}


@dataclass(frozen=True)
class PeerInput:
    workload: Path  # a WorkloadFiles directory
    table: Path  # where the peer writes; it does not exist yet
    bootstrap: str
    topic: str


def run_batches(
    name: str,
    label: str,
    files: WorkloadFiles,
    load: Callable[[pa.Table], object],
    upsert: Callable[[pa.Table], object],
    rows: Callable[[], int | None],
) -> PathResult:
    """Time `load` on the initial load and `upsert` on each batch; then count the table's rows
    (None where there is no table, only files)."""
    table = files.load()
    started = time.monotonic()
    load(table)
    load_seconds = time.monotonic() - started
    seconds, records = [], 0
    for batch in files.batches():
        started = time.monotonic()
        upsert(batch)
        seconds.append(time.monotonic() - started)
        records += batch.num_rows
    return PathResult(name, label, records, sum(seconds), seconds, load_seconds, rows())
