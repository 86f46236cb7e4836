"""Writing one file group's share of a deltacommit: a new file group gets a Parquet base file
(so every Hudi reader sees it), an existing one gets one new log file holding a data block and/or
a delete block. The same functions run in-process and on Spark executors.

A task first marks every file its groups may write, in one marker file (`mark_file_groups`),
then writes them (`write_file_group`): a group writes at most one file, whose name the target
and the task's identity fix before any row is looked at."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.file_group.base_file import parquet_options
from table.file_group.log_file.block import DataBlock, DeleteBlock
from table.file_group.log_file.writer import write_log_file
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
from table.write.prepare import IS_DELETE
from table.write.routing import FileGroupTarget


@dataclass(frozen=True)
class CommitContext:
    """What writing a file group needs to know about the commit (picklable, for executors)."""

    storage: Storage
    instant: str
    table_name: str
    data_schema: pa.Schema  # the table's columns, without meta fields
    ordering_field: str
    log_block_format: str  # "avro" or "parquet"

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
    name = LogFileName(file_id=target.file_id, base_instant=target.base_instant, version=target.log_version,
                       write_token=task.token).format()
    return MarkedFile(target.partition_path, name, IOType.APPEND)


def mark_file_groups(ctx: CommitContext, targets: list[FileGroupTarget], task: WriteTask) -> None:
    """Before the task writes any of `targets`: one marker file naming the file each may write,
    so that a rollback of the commit finds whatever the task wrote, whenever it was killed."""
    write_markers(ctx.storage, ctx.instant, task.attempt_id, [planned_file(ctx, t, task) for t in targets])
    failpoints.reach("deltacommit.markers_written")


def write_file_groups(ctx: CommitContext, task: WriteTask,
                      groups: list[tuple[FileGroupTarget, pa.Table]]) -> list[WriteStat]:
    """A task's share of a commit: one marker file naming every file it may write, each group's
    file, then all of them synced together; the stats of the files written."""
    mark_file_groups(ctx, [target for target, _ in groups], task)
    stats = [stat for target, rows in groups if (stat := write_file_group(ctx, target, rows, task)) is not None]
    ctx.storage.sync_files([stat.path for stat in stats])
    return stats


def write_file_group(ctx: CommitContext, target: FileGroupTarget, rows: pa.Table, task: WriteTask) -> WriteStat | None:
    """Write one file group's share of the commit, which `mark_file_groups` marked; returns its
    write stat (None if nothing to write). The file is not synced yet: the task syncs all of its
    files at once (`Storage.sync_files`) before it reports their stats."""
    storage = ctx.storage
    upserts = rows.filter(pc.invert(rows[IS_DELETE]))
    deletes = rows.filter(rows[IS_DELETE])
    file = planned_file(ctx, target, task)
    if target.base_instant is None:
        if upserts.num_rows == 0:
            return None  # deleting keys from a group that does not exist yet: nothing to do
        return _write_base_file(storage, ctx, target, upserts, file, task.partition_id)
    return _write_log_file(storage, ctx, target, upserts, deletes, file, task.partition_id)


def _with_meta_columns(ctx: CommitContext, upserts: pa.Table, file_name: str, task_id: int) -> pa.Table:
    n = upserts.num_rows
    positions = pa.array(np.arange(n, dtype=np.int64)).cast(pa.string())
    seqnos = pc.binary_join_element_wise(f"{ctx.instant}_{task_id}_", positions, "")
    meta = {
        COMMIT_TIME: pa.repeat(pa.scalar(ctx.instant, pa.string()), n),
        COMMIT_SEQNO: seqnos,
        RECORD_KEY: upserts[RECORD_KEY],
        PARTITION_PATH: upserts[PARTITION_PATH],
        FILE_NAME: pa.repeat(pa.scalar(file_name, pa.string()), n),
    }
    columns = [meta[m] for m in META_FIELDS] + [
        upserts[f.name].cast(f.type) for f in ctx.data_schema
    ]
    fields = [pa.field(m, pa.string()) for m in META_FIELDS] + list(ctx.data_schema)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _write_base_file(
    storage: Storage, ctx: CommitContext, target: FileGroupTarget, upserts: pa.Table, file: MarkedFile, task_id: int
) -> WriteStat:
    path = file.path
    rows = _with_meta_columns(ctx, upserts, file.file_name, task_id)
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink, **parquet_options(rows))
    data = sink.getvalue()
    storage.write_new(path, data, durable=False)
    failpoints.reach("deltacommit.base_file_written")
    size = data.size
    return WriteStat(
        file_id=target.file_id,
        path=path,
        partition_path=target.partition_path,
        prev_commit="null",
        num_writes=rows.num_rows,
        num_inserts=rows.num_rows,
        num_update_writes=0,
        num_deletes=0,
        total_write_bytes=size,
        file_size_in_bytes=size,
    )


def _write_log_file(
    storage: Storage,
    ctx: CommitContext,
    target: FileGroupTarget,
    upserts: pa.Table,
    deletes: pa.Table,
    file: MarkedFile,
    task_id: int,
) -> WriteStat | None:
    blocks = []
    if upserts.num_rows:
        rows = _with_meta_columns(ctx, upserts, target.file_id, task_id)
        blocks.append(DataBlock.create(rows, ctx.instant, ctx.log_schema_json, ctx.log_block_format))
    if deletes.num_rows:
        blocks.append(
            DeleteBlock.create(
                record_keys=deletes[RECORD_KEY],
                partition_paths=deletes[PARTITION_PATH],
                ordering_values=deletes[ctx.ordering_field],
                instant=ctx.instant,
            )
        )
    if not blocks:
        return None
    path = file.path
    size = write_log_file(storage, path, blocks, durable=False)
    failpoints.reach("deltacommit.log_file_written")
    return WriteStat(
        file_id=target.file_id,
        path=path,
        partition_path=target.partition_path,
        prev_commit=target.base_instant,
        num_writes=upserts.num_rows,
        num_inserts=0,
        num_update_writes=upserts.num_rows,
        num_deletes=deletes.num_rows,
        total_write_bytes=size,
        file_size_in_bytes=size,
        log_version=target.log_version,
        log_offset=0,
        base_file=target.base_file_name,
        log_files=[file.file_name],
        total_log_blocks=len(blocks),
    )


