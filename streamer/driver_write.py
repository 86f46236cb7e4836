"""Micro-batches the driver writes itself, on a local master.

There the driver and Spark's tasks share the machine's cores, and a batch of a few hundred
thousand records costs Spark's two stages more than its own work: a Python worker's hand-over
to the JVM and back in each of them, the shuffle between them, and the barrier that holds the
write until the last read is done. So the driver reads such a batch's offset ranges, decodes,
routes and writes them in its own process, through the same decode step and deltacommit as
Spark's tasks: the same files, markers and failure points, on a thread for each core Spark was
given. Meanwhile Spark runs the batch's own query, which only hands back the ranges the source
planned (`SourcePlan`): its progress and observed metrics count the batch, and the ranges the
driver read are checked against the source's. Where Spark's offset log cannot say a batch's
ranges (`streamer.checkpoint.planned_ranges`: the query's first batch, for one), the source's plan
is collected first and the driver reads what it says. A larger batch, and every batch on a
cluster, go through Spark's tasks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame

from streamer.decode_step import DecodeStep
from streamer.kafka.planning import OffsetRange, TopicPartitionKey, spans_of
from streamer.kafka.schema import offset_ranges_batch
from table import DeltaCommit
from table.spark import DataFrameWriteResult, PassMetrics


@dataclass(frozen=True)
class DriverWrites:
    """Which batches the driver writes: those of at most `max_records` records (none at 0);
    with how many threads it reads and writes them: the cores Spark was given."""

    max_records: int = 0
    threads: int = 1

    @classmethod
    def of(cls, master: str | None, max_records: int, cores: int = 1) -> DriverWrites:
        """The driver writes on a local master only: on a cluster, its one machine would do
        the work of many."""
        return cls(max_records if (master or "").startswith("local") else 0, max(1, cores))

    def takes(self, ranges: Sequence[OffsetRange]) -> bool:
        return 0 < sum(end - start for _, start, end in ranges) <= self.max_records

    def describe(self) -> str:
        if self.max_records == 0:
            return "every batch is written by Spark's tasks"
        return f"batches of up to {self.max_records:,} records are written by the driver, larger ones by Spark's tasks"


def write_in_driver(
    commit: DeltaCommit, ranges: Sequence[OffsetRange], step: DecodeStep, schema: pa.Schema, threads: int
) -> DataFrameWriteResult:
    """Read and decode the ranges' records (`step`), then key, route and write them into the
    commit's file groups, each on `threads` threads; the commit is left for the caller to
    complete or abandon. `schema`: the rows' schema, for a batch without a good record."""
    started = time.monotonic()
    batches, read_seconds = _read(ranges, step, threads)
    rows = pa.Table.from_batches(batches, schema=schema)
    routing = time.perf_counter()
    prepared = commit.routing.prepare(rows) if rows.num_rows else None
    writing = time.perf_counter()
    stats = commit.write(prepared, threads) if prepared is not None else []
    done = time.perf_counter()
    metrics = PassMetrics(rows=rows.num_rows, to_rows_seconds=read_seconds, route_seconds=writing - routing)
    return DataFrameWriteResult(stats, metrics, done - writing, time.monotonic() - started, threads)


def _read(ranges: Sequence[OffsetRange], step: DecodeStep, threads: int) -> tuple[list[pa.RecordBatch], float]:
    """The ranges' rows in the ranges' order (a key's later version wins a tie on its ordering
    value), read and decoded on up to `threads` threads, a range to each at a time (whole, as a
    Spark task reads it: a range Kafka no longer holds is named whole); and the threads'
    seconds, summed."""
    in_order = sorted(ranges)
    tallied = step.tallied_to(_SerialTally(step.tally))

    def read(one: OffsetRange) -> tuple[list[pa.RecordBatch], float]:
        started = time.perf_counter()
        batches = list(tallied(offset_ranges_batch([one])))
        return batches, time.perf_counter() - started

    with ThreadPoolExecutor(min(threads, len(in_order)), thread_name_prefix="driver-read") as pool:
        done = list(pool.map(read, in_order))
    return [batch for batches, _ in done for batch in batches], sum(seconds for _, seconds in done)


class _SerialTally:
    """The batch's tally, added to by the reading threads one at a time."""

    def __init__(self, tally) -> None:
        self._tally = tally
        self._lock = threading.Lock()

    def add(self, term) -> None:
        with self._lock:
            self._tally.add(term)


class SourcePlan:
    """The offset ranges the source planned for a batch, from the batch's DataFrame.

    Given the `ranges` the driver reads, it is collected on a thread of its own while the
    driver writes them, and checked against them before the commit (`agrees`). Without, it is
    collected at once and its ranges are the ones to read: for a batch whose ranges Spark's
    offset log cannot say (the query's first, one that reads a partition new to the query or
    one that went back: `checkpoint.planned_ranges`)."""

    def __init__(self, df: DataFrame, ranges: Sequence[OffsetRange] | None = None):
        self._rows: list | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if ranges is None:
            self._rows = df.collect()
            ranges = [(tp, start, end) for tp, (start, end) in sorted(self._planned().items())]
        else:
            self._thread = threading.Thread(target=self._collect, args=(df,), name="source-plan", daemon=True)
            self._thread.start()
        self.ranges: Sequence[OffsetRange] = ranges

    def _collect(self, df: DataFrame) -> None:
        try:
            self._rows = df.collect()
        except BaseException as e:  # noqa: BLE001 - raised in the sink's thread by `agrees`
            self._error = e

    def _planned(self) -> dict[TopicPartitionKey, tuple[int, int]]:
        """Each topic-partition's span that holds records."""
        rows = self._rows or []
        spans = spans_of(((topic, partition), start, end) for topic, partition, start, end in rows)
        return {tp: (start, end) for tp, (start, end) in spans.items() if end > start}

    def agrees(self) -> bool:
        """Whether the source planned the same span of each partition as `ranges`."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._planned() == spans_of(self.ranges)
