"""Writing one file group's share of a deltacommit: a new file group gets a Parquet base file
(so every Hudi reader sees it), an existing one gets one new log file holding a data block and/or
a delete block. The same functions run in-process and on Spark executors.

A task first marks every file its groups may write, in one marker file (`TaskFiles.mark`),
then writes them (`write_file_groups`): a group writes at most one file, whose name the target
and the task's identity fix before any row is looked at."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.config.choices import LogBlockFormat
from table.file_group.log_file.avro_binary import conform, log_schema
from table.file_group.log_file.block import DataBlock, DeleteBlock, LogBlock
from table.file_group.log_file.writer import encode_avro_runs, encode_blocks, write_log_bytes
from table.file_group.parquet_options import parquet_options
from table.schema import (
    COMMIT_SEQNO,
    COMMIT_TIME,
    FILE_NAME,
    META_FIELDS,
    PARTITION_PATH,
    RECORD_KEY,
    avro_schema_json,
)
from table.storage.file_io import Storage
from table.storage.layout import BaseFileName, LogFileName, write_token
from table.storage.markers import IOType, MarkedFile, write_markers
from table.timeline.commit_metadata import WriteStat
from table.units import MIB
from table.write.prepare import IS_DELETE
from table.write.routing import FILE_ID, FileGroupTarget, Routing


@dataclass(frozen=True)
class CommitContext:
    """What writing a file group needs to know about the commit (picklable, for executors)."""

    storage: Storage
    instant: str
    table_name: str
    data_schema: pa.Schema  # the table's columns, without meta fields
    ordering_field: str
    log_block_format: LogBlockFormat
    task_memory_bytes: int = 128 * MIB  # the rows a Spark write task holds at once (`WriteOptions`)

    @cached_property
    def log_schema_json(self) -> str:
        """The Avro schema every data block of the commit carries in its header, built once."""
        return avro_schema_json(self.data_schema, self.table_name, with_meta_fields=True)


@dataclass(frozen=True)
class WriteTask:
    """The task that writes: Spark's identity of a task attempt, which Hudi's write token names
    (`FSUtils.makeWriteToken`): its partition, its stage and the attempt's id, unique within the
    application, so that two attempts at one file group never write the same file name."""

    partition_id: int
    stage_id: int = 0
    attempt_id: int = 0

    @property
    def token(self) -> str:
        return write_token(self.partition_id, self.stage_id, self.attempt_id)


def planned_file(ctx: CommitContext, target: FileGroupTarget, task: WriteTask) -> MarkedFile:
    """The file `task` writes for the group, if it writes one: a new group's base file, else a
    log file of the group's slice."""
    if target.base_instant is None:
        name = BaseFileName(file_id=target.file_id, write_token=task.token, instant=ctx.instant).format()
        return MarkedFile(target.partition_path, name, IOType.CREATE)
    name = LogFileName(
        file_id=target.file_id, base_instant=target.base_instant, version=target.log_version, write_token=task.token
    ).format()
    return MarkedFile(target.partition_path, name, IOType.APPEND)


def write_file_groups(ctx: CommitContext, task: WriteTask, routing: Routing, rows: pa.Table) -> list[WriteStat]:
    """A task's share of a commit: `rows`, routed (`FILE_ID`) and one per key of each group, into
    their file groups: one marker file names every file the task may write, then the groups are
    written and synced (`TaskFiles`). Returns the stats of the files written."""
    groups = _TaskGroups.of(rows)
    targets = {f: routing.target(f, p) for f, p in zip(groups.file_ids, groups.partitions)}
    files = TaskFiles(ctx, task, targets)
    files.mark()
    files.write_groups(groups)
    return files.close()


class TaskFiles:
    """The files of a task's file groups, marked (`mark`) and then written from its rows in
    pieces: a piece holds some groups' rows, one per key. A group whose rows come in several
    pieces (a group larger than the task holds at once, its keys split among them) gets a row
    group of its base file, or a block of its log file, from each: its base file is written as a
    stream, its log file once its last piece is in. The meta columns, the types and the blocks'
    records are made for all of a piece's rows at once, so that a group costs its file and little
    more. The files are made durable together (`Storage.syncs`): `close` returns when all of
    them are."""

    def __init__(self, ctx: CommitContext, task: WriteTask, targets: Mapping[str, FileGroupTarget]):
        self.ctx = ctx
        self.task = task
        self.targets = targets
        self.files = {f: planned_file(ctx, t, task) for f, t in targets.items()}
        self._written_rows = 0  # numbers the rows of the task's pieces (their sequence numbers)
        self._bases: dict[str, _BaseStream] = {}
        self._logs: dict[str, _PendingLog] = {}
        self._stats: list[WriteStat] = []
        self._syncs = ctx.storage.syncs()

    def mark(self) -> None:
        """Before the task writes any file: one marker file naming the file each group may
        write, so that a rollback of the commit finds whatever the task wrote, whenever it was
        killed."""
        write_markers(self.ctx.storage, self.ctx.instant, self.task.attempt_id, list(self.files.values()))
        failpoints.reach("deltacommit.markers_written")

    def write(self, rows: pa.Table, finished: bool = True) -> None:
        """One piece: rows routed (`FILE_ID`), one per key of each group; with `finished` it is
        the last piece of each group it holds."""
        self.write_groups(_TaskGroups.of(rows), finished)

    def write_groups(self, groups: _TaskGroups, finished: bool = True) -> None:
        """`write` of rows already ordered into their groups."""
        ctx = self.ctx
        targets = [self.targets[f] for f in groups.file_ids]
        names = [
            self.files[f].file_name if t.base_instant is None else t.file_id for f, t in zip(groups.file_ids, targets)
        ]
        records = _with_meta_columns(
            ctx,
            groups.rows,
            pc.take(pa.array(names, pa.string()), groups.codes),
            self.task.partition_id,
            self._written_rows,
        )
        self._written_rows += records.num_rows
        log_records = (
            conform(records, log_schema(ctx.log_schema_json).arrow) if _logs_with_upserts(targets, groups) else records
        )
        row_bytes = records.nbytes / max(1, records.num_rows)
        deleted = _DeletedKeys.of(groups.rows, ctx.ordering_field)
        block_format = LogBlockFormat(ctx.log_block_format)
        avro_runs: list[tuple[str, int, int]] = []  # the groups' Avro data blocks: rows of log_records
        blocks: list[tuple[str, LogBlock]] = []  # their other blocks
        for g, (file_id, target) in enumerate(zip(groups.file_ids, targets)):
            start, upserts, deletes = groups.runs(g)
            if target.base_instant is None:
                if upserts:  # deleting keys from a group that does not exist yet: nothing to do
                    self._write_base(file_id, records.slice(start, upserts), row_bytes, finished)
                continue
            pending = self._logs.get(file_id)
            if pending is None:
                pending = self._logs[file_id] = _PendingLog(target.base_instant)
            if upserts:
                fmt = block_format.for_block(upserts)
                if fmt is LogBlockFormat.AVRO:
                    avro_runs.append((file_id, start, upserts))
                else:
                    data = DataBlock.create(log_records.slice(start, upserts), ctx.instant, ctx.log_schema_json, fmt)
                    blocks.append((file_id, data))
                pending.upserts += upserts
            if deletes:
                blocks.append((file_id, deleted.block(start + upserts, deletes, ctx.instant)))
                pending.deletes += deletes
        if avro_runs:  # a group's data block goes before its delete block, as Hudi's writer lays them out
            runs = [(start, count) for _, start, count in avro_runs]
            for (file_id, _, _), encoded in zip(
                avro_runs, encode_avro_runs(log_records, runs, ctx.instant, ctx.log_schema_json)
            ):
                self._logs[file_id].blocks.append(encoded)
        for (file_id, _), encoded in zip(blocks, encode_blocks([block for _, block in blocks])):
            self._logs[file_id].blocks.append(encoded)
        if finished:
            self._finish_logs([f for f in groups.file_ids if f in self._logs])

    def close(self) -> list[WriteStat]:
        """Finish the files still open and wait until all are durable; the stats of every file
        the task wrote."""
        for file_id in list(self._bases):
            self._finish_base(file_id)
        self._finish_logs(list(self._logs))
        self._syncs.wait()
        return self._stats

    def _write_base(self, file_id: str, records: pa.Table, row_bytes: float, finished: bool) -> None:
        stream = self._bases.get(file_id)
        if stream is None and finished:  # the whole group at once: one write of the whole file
            sink = pa.BufferOutputStream()
            pq.write_table(records, sink, **parquet_options(records, row_bytes))
            data = sink.getvalue()
            self.ctx.storage.write_new(self.files[file_id].path, data, durable=False)
            self._base_written(file_id, records.num_rows, data.size)
            return
        options = parquet_options(records, row_bytes)
        row_group_size = options.pop("row_group_size")
        if stream is None:
            out = self.ctx.storage.open_new(self.files[file_id].path)
            stream = self._bases[file_id] = _BaseStream(out, pq.ParquetWriter(out, records.schema, **options))
        stream.writer.write_table(records, row_group_size=row_group_size)
        stream.rows += records.num_rows
        if finished:
            self._finish_base(file_id)

    def _finish_base(self, file_id: str) -> None:
        stream = self._bases.pop(file_id)
        stream.writer.close()
        size = stream.out.tell()
        stream.out.close()
        self._base_written(file_id, stream.rows, size)

    def _base_written(self, file_id: str, rows: int, size: int) -> None:
        failpoints.reach("deltacommit.base_file_written")
        target, file = self.targets[file_id], self.files[file_id]
        self._syncs.add(file.path)
        self._stats.append(
            WriteStat(
                file_id=target.file_id,
                path=file.path,
                partition_path=target.partition_path,
                prev_commit="null",
                num_writes=rows,
                num_inserts=rows,
                num_update_writes=0,
                num_deletes=0,
                total_write_bytes=size,
                file_size_in_bytes=size,
            )
        )

    def _finish_logs(self, file_ids: list[str]) -> None:
        for file_id in file_ids:
            pending = self._logs.pop(file_id)
            if not pending.blocks:
                continue
            target, file = self.targets[file_id], self.files[file_id]
            size = write_log_bytes(self.ctx.storage, file.path, b"".join(pending.blocks), durable=False)
            self._syncs.add(file.path)
            failpoints.reach("deltacommit.log_file_written")
            self._stats.append(
                WriteStat(
                    file_id=target.file_id,
                    path=file.path,
                    partition_path=target.partition_path,
                    prev_commit=pending.base_instant,
                    num_writes=pending.upserts,
                    num_inserts=0,
                    num_update_writes=pending.upserts,
                    num_deletes=pending.deletes,
                    total_write_bytes=size,
                    file_size_in_bytes=size,
                    log_version=target.log_version,
                    log_offset=0,
                    base_file=target.base_file_name,
                    log_files=[file.file_name],
                    total_log_blocks=len(pending.blocks),
                )
            )


@dataclass
class _BaseStream:
    """A base file written a row group at a time."""

    out: Any  # the output stream (pyarrow's or a local file)
    writer: pq.ParquetWriter
    rows: int = 0


@dataclass
class _PendingLog:
    """A log file's blocks, encoded, until the group's last piece is in."""

    base_instant: str  # of the slice the log file extends
    blocks: list[bytes] = field(default_factory=list)
    upserts: int = 0
    deletes: int = 0


def _logs_with_upserts(targets: list[FileGroupTarget], groups: _TaskGroups) -> bool:
    """Whether any group gets a data block: only then are the records laid out as the log schema."""
    return any(t.base_instant is not None and groups.counts[g, 0] for g, t in enumerate(targets))


@dataclass(frozen=True)
class _DeletedKeys:
    """The columns a delete block takes, each one array for the whole piece: a group's delete
    block is slices of them, not a copy of its own."""

    record_keys: pa.Array
    partition_paths: pa.Array
    ordering_values: pa.Array

    @classmethod
    def of(cls, rows: pa.Table, ordering_field: str) -> _DeletedKeys:
        return cls(*(rows[c].combine_chunks() for c in (RECORD_KEY, PARTITION_PATH, ordering_field)))

    def block(self, start: int, count: int, instant: str) -> DeleteBlock:
        return DeleteBlock.create(
            record_keys=self.record_keys.slice(start, count),
            partition_paths=self.partition_paths.slice(start, count),
            ordering_values=self.ordering_values.slice(start, count),
            instant=instant,
        )


def in_group_order(rows: pa.Table) -> pa.Table:
    """The rows as a task writes them: ordered by file group, each group's upserts then its
    deletes. A task that orders its rows before it writes them no longer holds them unordered
    while the write makes their meta columns and files."""
    _, _, order = _group_order(rows)
    return rows if order is None else rows.take(pa.array(order))


def shares_in_group_order(rows: pa.Table, count: int) -> list[np.ndarray]:
    """The rows dealt out in whole file groups to at most `count` tasks side by side, the
    largest group first to the share with the fewest rows: each share's row indices, in the
    order its task writes them (`in_group_order`), for the task to take its rows at once."""
    if rows.num_rows == 0:
        return [np.arange(0)]
    groups, key, _ = _group_order(rows)
    codes = np.asarray(groups.indices)
    sizes = np.bincount(codes, minlength=len(groups.dictionary))
    share_of_group = np.empty(len(sizes), dtype=np.int64)
    loads = [0] * min(count, len(sizes))
    for group in np.argsort(-sizes, kind="stable"):
        share = loads.index(min(loads))
        share_of_group[group] = share
        loads[share] += int(sizes[group])
    order = np.argsort(share_of_group[codes] * (2 * len(sizes)) + key, kind="stable")
    ends = np.cumsum(loads)
    return [order[end - load : end] for load, end in zip(loads, ends)]


def _group_order(rows: pa.Table) -> tuple[pa.DictionaryArray, np.ndarray, np.ndarray | None]:
    """The rows' groups, each row's sort key (its group's code, then whether it deletes) and
    the order that sorts them, or None when they are already in it."""
    groups = pc.dictionary_encode(rows[FILE_ID].combine_chunks())
    codes = np.asarray(groups.indices).astype(np.int64)
    deletes = np.asarray(rows[IS_DELETE].combine_chunks()).astype(np.int64)
    key = codes * 2 + deletes
    order = np.argsort(key, kind="stable")
    return groups, key, None if bool(np.all(order[1:] > order[:-1])) else order


@dataclass(frozen=True)
class _TaskGroups:
    """A task's rows ordered by file group, each group's upserts then its deletes."""

    rows: pa.Table
    codes: pa.Array  # each row's group, an index into file_ids
    file_ids: list[str]
    partitions: list[str]
    starts: np.ndarray
    counts: np.ndarray  # [group, 0 upserts | 1 deletes]

    @classmethod
    def of(cls, rows: pa.Table) -> _TaskGroups:
        groups, key, order = _group_order(rows)
        ordered = rows if order is None else rows.take(pa.array(order))
        codes = np.asarray(groups.indices).astype(np.int64)
        if order is not None:
            codes = codes[order]
        counts = np.bincount(key, minlength=2 * len(groups.dictionary)).reshape(-1, 2)
        sizes = counts.sum(axis=1)
        starts = np.cumsum(sizes) - sizes  # none for a task without rows
        partitions = ordered[PARTITION_PATH].take(pa.array(starts)).to_pylist() if len(starts) else []
        return cls(ordered, pa.array(codes), groups.dictionary.to_pylist(), partitions, starts, counts)

    def runs(self, g: int) -> tuple[int, int, int]:
        """Where group `g` starts, its upserts and its deletes."""
        return int(self.starts[g]), int(self.counts[g, 0]), int(self.counts[g, 1])


def _with_meta_columns(
    ctx: CommitContext, rows: pa.Table, file_names: pa.Array, task_id: int, first_position: int = 0
) -> pa.Table:
    """The rows with Hudi's meta columns first, data columns in the table's types: the commit's
    time, a sequence number unique in the task, key, partition, and the file name of each row's group."""
    n = rows.num_rows
    positions = pa.array(np.arange(first_position, first_position + n, dtype=np.int64)).cast(pa.string())
    meta = {
        COMMIT_TIME: pa.repeat(pa.scalar(ctx.instant, pa.string()), n),
        COMMIT_SEQNO: pc.binary_join_element_wise(f"{ctx.instant}_{task_id}_", positions, ""),
        RECORD_KEY: rows[RECORD_KEY],
        PARTITION_PATH: rows[PARTITION_PATH],
        FILE_NAME: file_names,
    }
    columns = [meta[m] for m in META_FIELDS] + [rows[f.name].cast(f.type) for f in ctx.data_schema]
    fields = [pa.field(m, pa.string()) for m in META_FIELDS] + list(ctx.data_schema)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
