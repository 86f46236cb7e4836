"""Distributed upsert of a Spark DataFrame: one deltacommit, one pass over the rows, one shuffle.

A micro-batch of 100,000 records is cheap to key, route and write in Python and Arrow, and
expensive to move between the JVM and Python, so the rows cross as few times as possible, and
nothing is paid per file group that could be paid per batch:

1. One pass (`mapInArrow`) takes each Arrow batch of the input, turns it into batches of table
   rows (an optional function: the streamer's reader and decoder), keys and routes them through the commit's
   `Routing` (broadcast once), and packs the rows of each write task's file groups into one
   Arrow IPC stream, a single binary value. The JVM sees a value per write task and batch,
   however many file groups the batch touches.
2. One shuffle moves those packed values to the write tasks, about one per core, among which
   the file groups are dealt out evenly (`_WriteTasks`).
3. Each write task unpacks what it received into one table, keeps the latest version of each
   key of each file group in one pass, and writes its groups: one marker file naming them all,
   a base or log file per group (`table.write.file_group_writer`), made durable together.

Only the write stats come back to the driver, laid out as the commit file holds them, which
completes the commit. Spark runs it as two
stages (the shuffle's map stage and the write), whatever the batch holds: one job, or two with
adaptive query execution on.

A DataFrame whose rows are planned work (the `kafka-arrow` source's offset ranges, a few rows
that `to_rows` reads) is written the same way through RDD operations (`mapPartitions`,
`partitionBy`, `mapPartitions`): the JVM has no query plan to analyse for them, and the packed
values cross the shuffle as they are, without being made into Spark's rows and back.
"""

from __future__ import annotations

import ctypes
import math
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import IO, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Broadcast, SparkContext, TaskContext, accumulators
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from table.errors import InvalidRequestError
from table.schema import PARTITION_PATH
from table.timeline.commit_metadata import WriteStat
from table.write.delta_commit import DeltaCommit
from table.write.file_group_writer import CommitContext, TaskFiles, WriteTask, in_group_order
from table.write.prepare import POSITION, dedupe_latest
from table.write.routing import FILE_ID, KEY_HASH, Routing
from table.write.writer import TableWriter

PACKED = "rows"
#: The key the shuffle partitions by: one value per write task, so that the file groups are
#: dealt out evenly (`_WriteTasks`) instead of hashed, which leaves some tasks twice the groups of
#: others.
WRITE_TASK = "_mor_write_task"
_PACKED_ARROW = pa.schema([(WRITE_TASK, pa.int32()), (PACKED, pa.binary())])
_STAT_ARROW = pa.schema([("stat", pa.string()), ("values", pa.string()), ("seconds", pa.float64())])
#: The passes' output types, given to Spark as types: a DDL string is parsed in the JVM, a round
#: trip each micro-batch pays twice.
PACKED_SCHEMA = from_arrow_schema(_PACKED_ARROW)
STAT_SCHEMA = from_arrow_schema(_STAT_ARROW)
#: Position of a row in its task's input: task id in the high bits, as monotonically_increasing_id.
_TASK_POSITION_SHIFT = 33
#: Write tasks per core: one wave of tasks, each writing several file groups one after another.
TASKS_PER_CORE = 1
#: The largest packed value: the JVM holds each one whole, and one larger than half a G1 heap
#: region (1 MiB on a 1 GiB heap) is allocated among the long-lived objects, which grows the heap.
PACKED_VALUE_BYTES = 256 * 1024

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

    def add(self, other: PassMetrics) -> PassMetrics:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


class _PassMetricsParam(AccumulatorParam[PassMetrics]):
    def zero(self, value: PassMetrics) -> PassMetrics:
        return PassMetrics()

    def addInPlace(self, value1: PassMetrics, value2: PassMetrics) -> PassMetrics:
        return value1.add(value2)


_T = TypeVar("_T")


@contextmanager
def released_accumulator(sc: SparkContext, zero: _T, param: AccumulatorParam[_T]) -> Iterator[Accumulator[_T]]:
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
    with commit.writing():
        result = write_dataframe(commit, df)
    if result.metrics.rows == 0:
        commit.abandon()
        return None
    return commit.complete(result.stats, extra_metadata)


def write_dataframe(
    commit: DeltaCommit, df: DataFrame, to_rows: ToRows | None = None, *, planned: bool = False
) -> DataFrameWriteResult:
    """Write the DataFrame's rows (each input batch through `to_rows` first, when given) into
    the commit's file groups; the commit is left for the caller to complete or abandon.
    `planned`: each of the DataFrame's rows is work that `to_rows` reads, so they are few and
    the write runs as RDD operations (above)."""
    started = time.monotonic()
    sc = df.sparkSession.sparkContext
    routing = sc.broadcast(commit.routing)
    try:
        with released_accumulator(sc, PassMetrics(), _PassMetricsParam()) as metrics:
            tasks = _WriteTasks.of(df.sparkSession, commit.routing)
            if planned:
                reported = _write_planned(commit, df, to_rows, routing, tasks.keyed_by_index(), metrics)
            else:
                packed = df.mapInArrow(partial(_key_route_pack, routing, tasks, to_rows, metrics), PACKED_SCHEMA)
                write = partial(_write_batches, commit.context, routing)
                reported = packed.repartition(tasks.count, WRITE_TASK).mapInArrow(write, STAT_SCHEMA).toArrow()
    finally:
        routing.destroy()  # its blocks in the JVM and its file on the driver's disk, one a batch otherwise
    sent = reported.filter(reported.column("stat").is_valid())  # a task that wrote nothing sends a null stat
    stats = WriteStat.from_laid_out(sent.column("stat").to_pylist(), sent.column("values").to_pylist())
    return DataFrameWriteResult(
        stats, metrics.value, pc.sum(reported.column("seconds")).as_py() or 0.0, time.monotonic() - started, tasks.count
    )


def _write_planned(
    commit: DeltaCommit,
    df: DataFrame,
    to_rows: ToRows | None,
    routing: Broadcast[Routing],
    tasks: _WriteTasks,
    metrics: Accumulator[PassMetrics],
) -> pa.Table:
    """The write of planned work as RDD operations; the write tasks' stats."""
    work_schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
    reported = (
        df.rdd.mapPartitions(partial(_pass_planned, work_schema, routing, tasks, to_rows, metrics))
        .partitionBy(tasks.count, _task_index)
        .mapPartitions(partial(_write_pairs, commit.context, routing))
        .collect()
    )
    return pa.Table.from_pylist(reported, schema=_STAT_ARROW)


@dataclass(frozen=True)
class _WriteTasks:
    """The write stage's tasks and how file groups are dealt to them: the groups the table has,
    in turn; a group new in this commit (a partition's first write) by a hash of its id.

    Spark places a row by `pmod(hash(key), count)`, so each task gets the key that Spark sends to
    it (`write_task_keys`)."""

    count: int
    keys: tuple[int, ...]  # the shuffle key of each task
    turns: dict[str, int]  # file id -> its task

    def keyed_by_index(self) -> _WriteTasks:
        """The same tasks, each keyed by its index, as `partitionBy(count, _task_index)` places
        them."""
        return replace(self, keys=tuple(range(self.count)))

    @classmethod
    def of(cls, spark: SparkSession, routing: Routing) -> _WriteTasks:
        cores = spark.sparkContext.defaultParallelism
        most = max(1, cores * TASKS_PER_CORE)
        groups = sorted(routing.targets)
        count = min(len(groups), most) if groups else most
        return cls(count, write_task_keys(count), {file_id: i % count for i, file_id in enumerate(groups)})

    def task_of(self, file_id: str) -> int:
        """The index of the write task that writes the file group."""
        task = self.turns.get(file_id)
        return task if task is not None else zlib.crc32(file_id.encode()) % self.count


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


def _key_route_pack(
    routing_bc: Broadcast[Routing],
    tasks: _WriteTasks,
    to_rows: ToRows | None,
    metrics: Accumulator[PassMetrics],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The pass: input batches in, one packed row per file group and batch out."""
    routing = routing_bc.value
    position = _task_context().partitionId() << _TASK_POSITION_SHIFT
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
                yield pack(routing.route(prepared), tasks)
            done.route_seconds += lap()
        done.to_rows_seconds += lap()  # the input batch's last, empty turn of `to_rows`
    metrics.add(done)
    _return_freed_heap()  # what the task's fetched and decoded values left, which an idle worker would keep


class _Lap:
    """Seconds since the previous call (since creation, the first time)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def __call__(self) -> float:
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed


def pack(routed: pa.Table, tasks: _WriteTasks) -> pa.RecordBatch:
    """Rows of packed values for each write task the rows go to: its shuffle key and its rows,
    those of all its file groups, as Arrow IPC streams of at most about `PACKED_VALUE_BYTES`."""
    if routed.num_rows == 0:
        return pa.RecordBatch.from_pylist([], schema=_PACKED_ARROW)
    groups = pc.dictionary_encode(routed[FILE_ID].combine_chunks())
    task_of_group = np.array([tasks.task_of(f) for f in groups.dictionary.to_pylist()], dtype=np.int64)
    task_of_row = task_of_group[np.asarray(groups.indices)]
    counts = np.bincount(task_of_row, minlength=tasks.count)
    ordered = routed.take(pa.array(np.argsort(task_of_row, kind="stable")))
    sink = pa.BufferOutputStream()
    keys, ends, start = [], [0], 0
    row_bytes = ordered.nbytes / ordered.num_rows
    for task, count in enumerate(counts.tolist()):
        pieces = max(1, math.ceil(count * row_bytes / PACKED_VALUE_BYTES))
        for piece in range(pieces):
            rows = count // pieces + (piece < count % pieces)
            if rows:
                with pa.ipc.new_stream(sink, ordered.schema) as stream:
                    stream.write_table(ordered.slice(start, rows))
                keys.append(tasks.keys[task])
                ends.append(sink.tell())
                start += rows
    offsets = pa.py_buffer(np.array(ends, dtype=np.int32).tobytes())
    streams = pa.Array.from_buffers(pa.binary(), len(keys), [None, offsets, sink.getvalue()])
    return pa.RecordBatch.from_arrays([pa.array(keys, pa.int32()), streams], schema=_PACKED_ARROW)


class TaskShare:
    """What the shuffle gives one write task: packed values, taken in a few MiB at a time, held
    in memory up to the commit's `task_memory_bytes` and on the task's local disk beyond, with
    each file group's partition noted as it arrives. Spilled rows go to one of `SPILL_BUCKETS`
    files by a hash of their file group, so that a share too large to hold is written in parts,
    each a run of buckets of about `task_memory_bytes` read back alone: every row is written
    once and read once, but for a group larger than the task holds, which is split by key
    (`_SpillBucket.split_by_key`)."""

    def __init__(self, memory_bytes: int, directory: str | None = None):
        self.memory_bytes = memory_bytes
        self._directory = directory
        self._received: list[pa.Table] = []  # values not taken in yet, up to RECEIVED_CHUNK_BYTES
        self._received_bytes = 0
        self._held: list[pa.Table] = []
        self._buckets: list[_SpillBucket] | None = None  # once the share passes memory_bytes
        self._partitions: dict[str, str] = {}
        self.bytes = 0

    def __enter__(self) -> TaskShare:
        return self

    def __exit__(self, *exc: object) -> None:
        for bucket in self._buckets or ():
            bucket.close()

    def receive(self, values: Iterator[pa.Buffer]) -> None:
        """Take in the shuffle's packed values. Nothing of them is referenced once this returns
        but the rows the share holds, which it gives up as they are yielded."""
        for value in values:
            self.add(value)

    def add(self, value: pa.Buffer) -> None:
        self._received.append(pa.ipc.open_stream(value).read_all())
        self._received_bytes += value.size
        self.bytes += value.size
        if self._received_bytes >= RECEIVED_CHUNK_BYTES:
            self._take_in()

    @property
    def partitions(self) -> dict[str, str]:
        """The partition path of every file group received, by file id."""
        self._take_in()
        return self._partitions

    def _take_in(self) -> None:
        """The values received since the last call, as one chunk: their groups noted, then held,
        or spilled once the share passes `memory_bytes`."""
        if not self._received:
            return
        rows = pa.concat_tables(self._received) if len(self._received) > 1 else self._received[0]
        self._received, self._received_bytes = [], 0
        file_ids = rows[FILE_ID].combine_chunks()
        groups = pc.dictionary_encode(file_ids)
        new = [f for f in groups.dictionary.to_pylist() if f not in self._partitions]
        if new:
            first = pc.index_in(pa.array(new, pa.string()), value_set=file_ids)
            self._partitions.update(zip(new, rows[PARTITION_PATH].take(first).to_pylist()))
        if self._buckets is None and self.bytes > self.memory_bytes:
            self._buckets = [_SpillBucket(self._directory) for _ in range(SPILL_BUCKETS)]
            held, self._held = self._held, []
            for table in held:
                _spill(self._buckets, table)
        if self._buckets is None:
            self._held.append(rows)
        else:
            _spill(self._buckets, rows, groups)

    def pieces(self) -> Iterator[tuple[pa.Table, bool]]:
        """The share in pieces of about `memory_bytes`, each in the order the write takes
        (`in_group_order`) and with whether it is the last piece of every group it holds: runs of
        buckets; a bucket larger than that (a group larger than the task holds) split by record
        key into pieces of it, the last one finishing its groups, so that each key is still in
        one piece only. The share gives up a piece's rows as it yields them: once ordered, they
        are held only by the write."""
        self._take_in()
        if self._buckets is None:
            if self._held:
                yield self._give_up_held(), True
            return
        run: list[_SpillBucket] = []
        size = 0
        for bucket in (b for b in self._buckets if b.bytes):
            if run and size + bucket.bytes > self.memory_bytes:
                yield _read_and_close(run), True
                run, size = [], 0
            if bucket.bytes > self.memory_bytes:
                yield from bucket.split_by_key(math.ceil(bucket.bytes / self.memory_bytes), self._directory)
                continue
            run.append(bucket)
            size += bucket.bytes
        if run:
            yield _read_and_close(run), True

    def _give_up_held(self) -> pa.Table:
        held, self._held = self._held, []
        return in_group_order(pa.concat_tables(held) if len(held) > 1 else held[0])


def _read_and_close(buckets: list[_SpillBucket]) -> pa.Table:
    """The buckets' rows in the write's order, their files gone: a sync of the task's files
    (`Storage.syncs`) does not write back rows already read."""
    rows = pa.concat_tables([b.read() for b in buckets])
    for bucket in buckets:
        bucket.close()
    return in_group_order(rows)


#: The packed values (of about PACKED_VALUE_BYTES each) a write task takes in together: one
#: sort and a few runs per spill file for all of them, instead of for each.
RECEIVED_CHUNK_BYTES = 4 * 1024 * 1024
#: The most pieces a spill file too large for the task is split into by reading it once for each:
#: past that, the reads cost more than writing the rows once more.
REREAD_PIECES = 4
#: The files a write task's spilled rows are spread over, by file group.
SPILL_BUCKETS = 64
#: The rows a spill file holds back before writing them as one record batch: all of a task's
#: buckets together hold at most SPILL_BUCKETS times this in memory.
SPILL_WRITE_BYTES = 1024 * 1024


def _spill_bucket(file_id: str) -> int:
    return zlib.crc32(file_id.encode()) % SPILL_BUCKETS


def _spill(buckets: list[_SpillBucket], rows: pa.Table, groups: pa.DictionaryArray | None = None) -> None:
    """Append the rows to the spill buckets of their file groups."""
    if groups is None:
        groups = pc.dictionary_encode(rows[FILE_ID].combine_chunks())
    bucket_of_group = np.array([_spill_bucket(f) for f in groups.dictionary.to_pylist()], dtype=np.int64)
    bucket_of_row = bucket_of_group[np.asarray(groups.indices)]
    order = np.argsort(bucket_of_row, kind="stable")
    _write_runs(buckets, rows.take(pa.array(order)), np.bincount(bucket_of_row, minlength=len(buckets)))


def _write_runs(buckets: list[_SpillBucket], ordered: pa.Table, counts: np.ndarray) -> None:
    """Each bucket's run of the ordered rows, `counts[i]` rows for bucket i; the runs' sizes
    taken from the rows' average, as measuring a slice's bytes costs more than the slice."""
    row_bytes = ordered.nbytes / max(1, ordered.num_rows)
    start = 0
    for bucket, count in zip(buckets, counts.tolist()):
        if count:
            bucket.write(ordered.slice(start, count), int(count * row_bytes))
            start += count


class _SpillBucket:
    """One local file of spilled rows, an Arrow IPC stream written as they come, read back once."""

    def __init__(self, directory: str | None):
        self._directory = directory
        self._file: IO[bytes] | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._pending: list[pa.Table] = []  # rows not written yet, up to SPILL_WRITE_BYTES
        self._pending_bytes = 0
        self.bytes = 0

    def write(self, rows: pa.Table, nbytes: int) -> None:
        """Keep the rows (`nbytes` of them), written with others once they add up: a chunk of
        the share spreads over all the buckets, a few rows each, and a record batch per few
        rows would cost the write, the read and a split by key more than the rows themselves."""
        self._pending.append(rows)
        self._pending_bytes += nbytes
        self.bytes += nbytes
        if self._pending_bytes >= SPILL_WRITE_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        rows = pa.concat_tables(self._pending).combine_chunks()
        self._pending, self._pending_bytes = [], 0
        if self._writer is None:
            self._file = tempfile.TemporaryFile(dir=self._directory, prefix="mor-write-")  # noqa: SIM115 - closed by close()
            self._writer = pa.ipc.new_stream(pa.PythonFile(self._file, mode="w"), rows.schema)
        self._writer.write_table(rows)

    def read(self) -> pa.Table:
        return pa.Table.from_batches(list(self._batches()))

    def split_by_key(self, count: int, directory: str | None) -> Iterator[tuple[pa.Table, bool]]:
        """The rows in `count` pieces by their key's hash (`KEY_HASH`, as routing computed it),
        the last piece finishing its groups. Up to `REREAD_PIECES` pieces, each is taken from a
        read of the whole file: reading it again costs less than writing its rows a second time,
        which the kernel would also write back to disk. Beyond that, one read spreads the rows
        over a file per piece."""
        if count <= REREAD_PIECES:
            yield from self._reread_by_key(count)
        else:
            yield from self._spread_by_key(count, directory)

    def _reread_by_key(self, count: int) -> Iterator[tuple[pa.Table, bool]]:
        last = count - 1  # the last piece that has rows, known after the first read
        for shard in range(count):
            kept, rows_per_shard = [], np.zeros(count, np.int64)
            for batch in self._batches():
                shard_of_row = np.asarray(batch.column(KEY_HASH)) % count
                if shard == 0:
                    rows_per_shard += np.bincount(shard_of_row, minlength=count)
                kept.append(batch.filter(pa.array(shard_of_row == shard)))
            if shard == 0:
                last = int(np.flatnonzero(rows_per_shard)[-1])
            if shard == last:
                self.close()
            piece = in_group_order(pa.Table.from_batches(kept))
            kept = []
            if piece.num_rows:
                yield piece, shard == last
            if shard == last:
                return

    def _spread_by_key(self, count: int, directory: str | None) -> Iterator[tuple[pa.Table, bool]]:
        shards = [_SpillBucket(directory) for _ in range(count)]
        try:
            for batch in self._batches():
                shard = np.asarray(batch.column(KEY_HASH)) % count
                order = np.argsort(shard, kind="stable")
                ordered = pa.Table.from_batches([batch.take(pa.array(order))])
                _write_runs(shards, ordered, np.bincount(shard, minlength=count))
            self.close()
            filled = [piece for piece in shards if piece.bytes]  # one key's versions fill one shard only
            for i, piece in enumerate(filled):
                yield _read_and_close([piece]), i == len(filled) - 1
        finally:
            for piece in shards:
                piece.close()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        """The file's rows, from its start, as often as asked."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is None:
            return  # nothing was written
        self._file.seek(0)
        yield from pa.ipc.open_stream(pa.PythonFile(self._file, mode="r"))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()  # a temporary file: gone once closed
            self._file = self._writer = None


def _pass_planned(
    work_schema: pa.Schema,
    routing_bc: Broadcast[Routing],
    tasks: _WriteTasks,
    to_rows: ToRows | None,
    metrics: Accumulator[PassMetrics],
    rows: Iterator[Row],
) -> Iterator[tuple[int, bytes]]:
    """The pass over planned work: the partition's rows as one input batch, each packed value out
    as the pair `partitionBy` takes, its task's index and its bytes."""
    work = pa.RecordBatch.from_pylist([row.asDict() for row in rows], schema=work_schema)
    for packed in _key_route_pack(routing_bc, tasks, to_rows, metrics, iter([work] if work.num_rows else [])):
        yield from zip(packed.column(WRITE_TASK).to_pylist(), (value.as_py() for value in packed.column(PACKED)))


def _task_index(key: int) -> int:
    """`partitionBy`'s partition of a packed value: its key is its write task's index."""
    return key


def _write_pairs(
    ctx: CommitContext, routing_bc: Broadcast[Routing], pairs: Iterator[tuple[int, bytes]]
) -> Iterator[dict[str, object]]:
    """A write task of planned work: the pairs `partitionBy` gave it in, its stats out as rows."""
    for stats in _write_file_groups(ctx, routing_bc, (pa.py_buffer(value) for _, value in pairs)):
        yield from stats.to_pylist()


def _write_batches(
    ctx: CommitContext, routing_bc: Broadcast[Routing], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """A write task of `mapInArrow`: the shuffle's batches of packed values in, its stats out."""
    packed = (value.as_buffer() for batch in batches for value in batch.column(PACKED))
    return _write_file_groups(ctx, routing_bc, packed)


def _write_file_groups(
    ctx: CommitContext, routing_bc: Broadcast[Routing], packed: Iterator[pa.Buffer]
) -> Iterator[pa.RecordBatch]:
    """A write task: the rows of the file groups the shuffle gave it, kept (`TaskShare`), every
    group's file marked, then the groups written, in parts when the share is larger than the
    task holds at once, the latest version of each key of each group kept."""
    task = _task_context()
    with TaskShare(ctx.task_memory_bytes, _local_directory()) as share:
        share.receive(packed)
        if not share.partitions:
            return
        _return_freed_heap()  # what the worker's earlier tasks and the share's receipt left
        started = time.perf_counter()  # the shuffle's wait is not the write's
        routing = routing_bc.value
        writer = WriteTask(task.partitionId(), task.stageId(), task.taskAttemptId())
        targets = {f: routing.target(f, p) for f, p in sorted(share.partitions.items())}
        files = TaskFiles(ctx, writer, targets)
        files.mark()
        for rows, finished in share.pieces():
            _return_freed_heap()  # the piece's rows as they came, now that they are ordered
            rows = dedupe_latest(rows, ctx.ordering_field, group_column=FILE_ID)  # noqa: PLW2901 - let go of the rows with duplicates before the write
            files.write(rows, finished)
        stats = files.close()
    sent = [stat.sent() for stat in stats]
    reported: list[str | None] = [text for text, _ in sent] or [None]
    values: list[str | None] = [array for _, array in sent] or [None]
    seconds = [time.perf_counter() - started] + [0.0] * (len(reported) - 1)
    yield pa.RecordBatch.from_pydict({"stat": reported, "values": values, "seconds": seconds}, schema=_STAT_ARROW)


def _return_freed_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`, where the C
    library has it). The rows a write task receives from the JVM, and reads back from its spill
    files, arrive as Python bytes on the C heap, as do the values a pass task fetches; once
    they are freed the heap keeps their pages, and Spark keeps the worker, idle or not, for
    later tasks. Returning them costs about 15 ms per 100 MB (a pass task's median: 1 ms)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


def _task_context() -> TaskContext:
    """The Spark task this code runs in (the pass and the write run only in one)."""
    task = TaskContext.get()
    if task is None:
        raise InvalidRequestError("this part of a DataFrame write runs only inside a Spark task")
    return task


def _local_directory() -> str | None:
    """Where Spark keeps a task's local files (`spark.local.dir`), as PySpark's own spills do."""
    directories = os.environ.get("SPARK_LOCAL_DIRS")
    return directories.split(",")[0] if directories else None
