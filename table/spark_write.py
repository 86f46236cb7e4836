"""Distributed upsert of a Spark DataFrame: one deltacommit, one pass over the rows, one shuffle.

A micro-batch of 100,000 records is cheap to key, route and write in Python and Arrow, and
expensive to move between the JVM and Python, so the rows cross as few times as possible:

1. One pass (`mapInArrow`) takes each Arrow batch of the input, turns it into table rows (an
   optional function: the streamer's decoder), keys and routes them through the commit's
   `Routing` (broadcast once), and packs each file group's rows into one Arrow IPC stream, a
   single binary value. The JVM sees a few dozen values per batch, not a row per record.
2. One shuffle by file group moves those packed values.
3. One write task per file group unpacks its rows, keeps the latest version of each key and
   writes its base or log file (`table.write.write_file_group`).

Only the write stats come back to the driver, which completes the commit. Spark runs it as two
jobs (the shuffle's map stage and the write), whatever the batch holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
from pyspark import accumulators
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from table.commit_metadata import WriteStat
from table.mor_table import DeltaCommit, TableWriter
from table.schema import PARTITION_PATH
from table.write import FILE_ID, POSITION, CommitContext, Routing, dedupe_latest, file_group_slices, write_file_group

PACKED = "rows"
PACKED_SCHEMA = f"{FILE_ID} string, {PACKED} binary"
STAT_SCHEMA = "stat string, seconds double"
#: Position of a row in its task's input: task id in the high bits, as monotonically_increasing_id.
_TASK_POSITION_SHIFT = 33
#: Write tasks per core: one wave of tasks, each writing several file groups one after another.
TASKS_PER_CORE = 1

ToRows = Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table]


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
            packed = df.mapInArrow(partial(_key_route_pack, routing, to_rows, metrics), PACKED_SCHEMA)
            tasks = write_tasks(commit.routing, sc.defaultParallelism)
            ctx = commit.context

            def write(group: pa.Table) -> pa.Table:  # the type hints tell Spark which Arrow API this is
                return _write_file_group(ctx, routing, group)

            rows = packed.repartition(tasks, FILE_ID).groupBy(FILE_ID).applyInArrow(write, STAT_SCHEMA).collect()
    finally:
        routing.destroy()  # its blocks in the JVM and its file on the driver's disk, one a batch otherwise
    stats = [WriteStat.from_dict(json.loads(r.stat)) for r in rows if r.stat is not None]
    return DataFrameWriteResult(stats, metrics.value, sum(r.seconds for r in rows), time.monotonic() - started,
                                tasks)


def write_tasks(routing: Routing, cores: int) -> int:
    """Tasks of the write stage: as many as file groups, up to a few per core."""
    most = max(1, cores * TASKS_PER_CORE)
    groups = len(routing.targets)
    return min(groups, most) if groups else most


# ---- executors ---------------------------------------------------------------------------------

def _key_route_pack(routing_bc, to_rows: ToRows | None, metrics, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The pass: input batches in, one packed row per file group and batch out."""
    from pyspark import TaskContext

    routing: Routing = routing_bc.value
    position = TaskContext.get().partitionId() << _TASK_POSITION_SHIFT
    done = PassMetrics()
    clock = time.perf_counter()
    for batch in batches:
        now = time.perf_counter()
        done.input_seconds += now - clock
        rows = to_rows(batch) if to_rows is not None else batch
        clock, now = now, time.perf_counter()
        done.to_rows_seconds += now - clock
        if rows.num_rows:
            prepared = routing.prepare(rows, dedupe=False)
            prepared = prepared.append_column(POSITION, pa.array(np.arange(position, position + rows.num_rows)))
            position += rows.num_rows
            done.rows += rows.num_rows
            yield pack(file_group_slices(routing.route(prepared)))
        clock, now = now, time.perf_counter()
        done.route_seconds += now - clock
        clock = now
    metrics.add(done)


def pack(groups: Iterator[tuple[str, pa.Table]]) -> pa.RecordBatch:
    """One row per file group: its id and its rows as one Arrow IPC stream."""
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
    return pa.RecordBatch.from_arrays([pa.array(file_ids, pa.string()), streams], names=[FILE_ID, PACKED])


def unpack(streams: pa.Array | pa.ChunkedArray) -> pa.Table:
    tables = [pa.ipc.open_stream(value.as_buffer()).read_all() for value in streams]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _write_file_group(ctx: CommitContext, routing_bc, group: pa.Table) -> pa.Table:
    from pyspark import TaskContext

    started = time.perf_counter()
    task = TaskContext.get()
    file_id = group[FILE_ID][0].as_py()
    rows = dedupe_latest(unpack(group[PACKED]), ctx.ordering_field)
    target = routing_bc.value.target(file_id, rows[PARTITION_PATH][0].as_py())
    stat = write_file_group(ctx, target, rows, task.partitionId(), task.attemptNumber())
    return pa.table({"stat": pa.array([json.dumps(stat.to_dict()) if stat else None], pa.string()),
                     "seconds": pa.array([time.perf_counter() - started], pa.float64())})
