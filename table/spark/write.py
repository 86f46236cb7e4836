"""Distributed upsert of a Spark DataFrame: one deltacommit, one pass over the rows, one shuffle.

A micro-batch of 100,000 records is cheap to key, route and write in Python and Arrow, and
expensive to move between the JVM and Python, so the rows cross as few times as possible:

1. One pass (`mapInArrow`) takes each Arrow batch of the input, turns it into batches of table
   rows (an optional function: the streamer's reader and decoder), keys and routes them through the commit's
   `Routing` (broadcast once), and packs each file group's rows into one Arrow IPC stream, a
   single binary value. The JVM sees a few dozen values per batch, not a row per record.
2. One shuffle moves those packed values to the write tasks, about one per core, among which
   the file groups are dealt out evenly (`_WriteTasks`).
3. Each write task groups the packed values it received by file group; for each group it
   unpacks the rows, keeps the latest version of each key and writes the group's base or log
   file (`table.write.file_group_writer.write_file_group`).

Only the write stats come back to the driver, which completes the commit. Spark runs it as two
stages (the shuffle's map stage and the write), whatever the batch holds: one job, or two with
adaptive query execution on.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import accumulators
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from table.schema import PARTITION_PATH
from table.timeline.commit_metadata import WriteStat
from table.write.delta_commit import DeltaCommit
from table.write.file_group_writer import CommitContext, write_file_group
from table.write.prepare import POSITION, dedupe_latest
from table.write.routing import FILE_ID, Routing, file_group_slices
from table.write.writer import TableWriter

PACKED = "rows"
#: The key the shuffle partitions by: one value per write task, so that the file groups are
#: dealt out evenly (`_WriteTasks`) instead of hashed, which leaves some tasks twice the groups of
#: others.
WRITE_TASK = "_mor_write_task"
PACKED_SCHEMA = f"{FILE_ID} string, {WRITE_TASK} int, {PACKED} binary"
STAT_SCHEMA = "stat string, seconds double"
_STAT_ARROW = pa.schema([("stat", pa.string()), ("seconds", pa.float64())])
#: Position of a row in its task's input: task id in the high bits, as monotonically_increasing_id.
_TASK_POSITION_SHIFT = 33
#: Write tasks per core: one wave of tasks, each writing several file groups one after another.
TASKS_PER_CORE = 1

#: An input batch to the batches of table rows it holds (the streamer's: Kafka records, or the
#: offset ranges to read them from, decoded).
ToRows = Callable[[pa.RecordBatch], Iterator[pa.RecordBatch | pa.Table]]


@dataclass
class PassMetrics:
    """What the pass did, summed over its tasks (task-seconds, not wall time)."""

    rows: int = 0
    input_seconds: float = 0.0  # waiting for the next input batch: reading it and handing it over
    to_rows_seconds: float = 0.0
    route_seconds: float = 0.0

    def add(self, other: "PassMetrics") -> "PassMetrics":
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


class _PassMetricsParam(AccumulatorParam):
    def zero(self, value: PassMetrics) -> PassMetrics:
        return PassMetrics()

    def addInPlace(self, value1: PassMetrics, value2: PassMetrics) -> PassMetrics:
        return value1.add(value2)


@contextmanager
def released_accumulator(sc, zero, param: AccumulatorParam) -> Iterator[Accumulator]:
    """An accumulator for the Spark jobs of one write, dropped from PySpark's registry after
    them. The registry keeps every accumulator of the application, and their values, for good:
    one per micro-batch adds up over weeks. An update that comes after (a task cancelled late)
    finds no accumulator and is ignored; the value read so far stays readable."""
    acc = sc.accumulator(zero, param)
    try:
        yield acc
    finally:
        accumulators._accumulatorRegistry.pop(acc.aid, None)


@dataclass
class DataFrameWriteResult:
    stats: list[WriteStat]
    metrics: PassMetrics
    write_seconds: float  # task-seconds the write tasks spent writing files
    wall_seconds: float
    tasks: int


def upsert_dataframe(writer: TableWriter, df: DataFrame, extra_metadata: dict[str, str] | None = None) -> str | None:
    """Upsert a DataFrame as one deltacommit; returns the instant, or None for an empty DataFrame."""
    incoming = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
    commit = writer.begin_delta_commit(writer.check_schema(incoming))
    # A failed write stays inflight: tasks Spark is still cancelling may yet write files, and
    # the next writer's rollback deletes whatever its markers name.
    result = write_dataframe(commit, df)
    if result.metrics.rows == 0:
        commit.abandon()
        return None
    return commit.complete(result.stats, extra_metadata)


def write_dataframe(commit: DeltaCommit, df: DataFrame, to_rows: ToRows | None = None) -> DataFrameWriteResult:
    """Write the DataFrame's rows (each input batch through `to_rows` first, when given) into
    the commit's file groups; the commit is left for the caller to complete or abandon."""
    started = time.monotonic()
    sc = df.sparkSession.sparkContext
    routing = sc.broadcast(commit.routing)
    try:
        with released_accumulator(sc, PassMetrics(), _PassMetricsParam()) as metrics:
            tasks = _WriteTasks.of(df.sparkSession, commit.routing)
            packed = df.mapInArrow(partial(_key_route_pack, routing, tasks, to_rows, metrics), PACKED_SCHEMA)
            write = partial(_write_file_groups, commit.context, routing)
            rows = packed.repartition(tasks.count, WRITE_TASK).mapInArrow(write, STAT_SCHEMA).collect()
    finally:
        routing.destroy()  # its blocks in the JVM and its file on the driver's disk, one a batch otherwise
    stats = [WriteStat.from_dict(json.loads(r.stat)) for r in rows if r.stat is not None]
    return DataFrameWriteResult(stats, metrics.value, sum(r.seconds for r in rows), time.monotonic() - started,
                                tasks.count)


@dataclass(frozen=True)
class _WriteTasks:
    """The write stage's tasks and how file groups are dealt to them: the groups the table has,
    in turn; a group new in this commit (a partition's first write) by a hash of its id.

    Spark places a row by `pmod(hash(key), count)`, so each task gets the key that Spark sends to
    it (`write_task_keys`)."""

    count: int
    keys: tuple[int, ...]  # the shuffle key of each task
    turns: dict[str, int]  # file id -> its task

    @classmethod
    def of(cls, spark, routing: Routing) -> "_WriteTasks":
        cores = spark.sparkContext.defaultParallelism
        most = max(1, cores * TASKS_PER_CORE)
        groups = sorted(routing.targets)
        count = min(len(groups), most) if groups else most
        return cls(count, write_task_keys(count), {file_id: i % count for i, file_id in enumerate(groups)})

    def key(self, file_id: str) -> int:
        task = self.turns.get(file_id)
        return self.keys[task if task is not None else zlib.crc32(file_id.encode()) % self.count]


@cache
def write_task_keys(count: int) -> tuple[int, ...]:
    """For each of `count` shuffle partitions, the smallest int that `repartition(count, column)`
    sends to it: Spark places a row by `pmod(hash(key), count)`."""
    first: dict[int, int] = {}
    key = 0
    while len(first) < count:
        first.setdefault(spark_hash_int(key) % count, key)
        key += 1
    return tuple(first[task] for task in range(count))


_MASK32 = 0xFFFFFFFF


def spark_hash_int(value: int) -> int:
    """Spark SQL's `hash()` of an int column: Murmur3 (x86, 32-bit) of its four bytes, seed 42,
    as a signed int. Known here, it costs the first batch no Spark job to learn the write tasks'
    keys; it is the hash Spark's bucketed tables depend on, so it does not change."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _MASK32

    k = rotl(value * 0xCC9E2D51 & _MASK32, 15) * 0x1B873593 & _MASK32
    h = rotl(42 ^ k, 13) * 5 + 0xE6546B64 & _MASK32
    h ^= 4  # the input's length in bytes
    h = (h ^ h >> 16) * 0x85EBCA6B & _MASK32
    h = (h ^ h >> 13) * 0xC2B2AE35 & _MASK32
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


# ---- executors ---------------------------------------------------------------------------------

def _key_route_pack(routing_bc, tasks: _WriteTasks, to_rows: ToRows | None, metrics,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The pass: input batches in, one packed row per file group and batch out."""
    from pyspark import TaskContext

    routing: Routing = routing_bc.value
    position = TaskContext.get().partitionId() << _TASK_POSITION_SHIFT
    done = PassMetrics()
    lap = _Lap()
    for batch in batches:
        done.input_seconds += lap()
        for rows in to_rows(batch) if to_rows is not None else (batch,):
            done.to_rows_seconds += lap()
            if rows.num_rows:
                prepared = routing.prepare(rows, dedupe=False)
                prepared = prepared.append_column(POSITION, pa.array(np.arange(position, position + rows.num_rows)))
                position += rows.num_rows
                done.rows += rows.num_rows
                yield pack(file_group_slices(routing.route(prepared)), tasks)
            done.route_seconds += lap()
        done.to_rows_seconds += lap()  # the input batch's last, empty turn of `to_rows`
    metrics.add(done)


class _Lap:
    """Seconds since the previous call (since creation, the first time)."""

    def __init__(self):
        self._last = time.perf_counter()

    def __call__(self) -> float:
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed


def pack(groups: Iterator[tuple[str, pa.Table]], tasks: _WriteTasks) -> pa.RecordBatch:
    """One row per file group: its id, its write task's key and its rows as one Arrow IPC stream."""
    file_ids, ends = [], [0]
    sink = pa.BufferOutputStream()
    for file_id, rows in groups:
        rows = rows.drop_columns([FILE_ID])
        with pa.ipc.new_stream(sink, rows.schema) as stream:
            stream.write_table(rows)
        file_ids.append(file_id)
        ends.append(sink.tell())
    data = sink.getvalue()
    offsets = pa.py_buffer(np.array(ends, dtype=np.int32).tobytes())
    streams = pa.Array.from_buffers(pa.binary(), len(file_ids), [None, offsets, data])
    keys = pa.array([tasks.key(file_id) for file_id in file_ids], pa.int32())
    return pa.RecordBatch.from_arrays([pa.array(file_ids, pa.string()), keys, streams], names=[FILE_ID, WRITE_TASK, PACKED])


def unpack(streams: pa.Array | pa.ChunkedArray) -> pa.Table:
    tables = [pa.ipc.open_stream(value.as_buffer()).read_all() for value in streams]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _write_file_groups(ctx: CommitContext, routing_bc, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A write task: the packed rows of the file groups the shuffle gave it, grouped here rather
    than by a sort in the JVM, then each group's base or log file written."""
    from pyspark import TaskContext

    task = TaskContext.get()
    streams: dict[str, list[pa.Array]] = {}
    for batch in batches:
        ids = batch.column(FILE_ID)
        packed = batch.column(PACKED)
        for file_id in pc.unique(ids).to_pylist():
            streams.setdefault(file_id, []).append(packed.filter(pc.equal(ids, file_id)))
    routing: Routing = routing_bc.value
    for file_id, parts in streams.items():
        started = time.perf_counter()
        rows = dedupe_latest(unpack(pa.chunked_array(parts)), ctx.ordering_field)
        target = routing.target(file_id, rows[PARTITION_PATH][0].as_py())
        stat = write_file_group(ctx, target, rows, task.partitionId(), task.attemptNumber())
        yield pa.RecordBatch.from_pydict(
            {"stat": [json.dumps(stat.to_dict()) if stat else None], "seconds": [time.perf_counter() - started]},
            schema=_STAT_ARROW)
