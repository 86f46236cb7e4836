"""Writing one file group's share of a deltacommit: a new file group gets a Parquet base file
(so every Hudi reader sees it), an existing one gets one new log file holding a data block and/or
a delete block. The same function runs in-process and on Spark executors."""

from __future__ import annotations

from dataclasses import dataclass

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
from table.storage.markers import create_marker
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


def write_file_group(
    ctx: CommitContext, target: FileGroupTarget, rows: pa.Table, task_id: int, attempt: int = 0
) -> WriteStat | None:
    """Write one file group's share of the commit; returns its write stat (None if nothing to write)."""
    storage = ctx.storage
    upserts = rows.filter(pc.invert(rows[IS_DELETE]))
    deletes = rows.filter(rows[IS_DELETE])
    token = write_token(task_id, 0, attempt)
    if target.base_instant is None:
        if upserts.num_rows == 0:
            return None  # deleting keys from a group that does not exist yet: nothing to do
        return _write_base_file(storage, ctx, target, upserts, token, task_id)
    return _write_log_file(storage, ctx, target, upserts, deletes, token, task_id)


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
    storage: Storage, ctx: CommitContext, target: FileGroupTarget, upserts: pa.Table, token: str, task_id: int
) -> WriteStat:
    name = BaseFileName(file_id=target.file_id, write_token=token, instant=ctx.instant).format()
    path = f"{target.partition_path}/{name}" if target.partition_path else name
    create_marker(storage, ctx.instant, target.partition_path, name, "CREATE")
    rows = _with_meta_columns(ctx, upserts, name, task_id)
    with storage.open_output(path) as out:
        pq.write_table(rows, out, **parquet_options(rows))
    failpoints.reach("deltacommit.base_file_written")
    size = storage.size(path)
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
    token: str,
    task_id: int,
) -> WriteStat | None:
    blocks = []
    header_schema = avro_schema_json(ctx.data_schema, ctx.table_name, with_meta_fields=True)
    if upserts.num_rows:
        rows = _with_meta_columns(ctx, upserts, target.file_id, task_id)
        blocks.append(DataBlock.create(rows, ctx.instant, header_schema, ctx.log_block_format))
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
    name = LogFileName(
        file_id=target.file_id, base_instant=target.base_instant, version=target.log_version, write_token=token
    ).format()
    path = f"{target.partition_path}/{name}" if target.partition_path else name
    create_marker(storage, ctx.instant, target.partition_path, name, "APPEND")
    size = write_log_file(storage, path, blocks)
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
        log_files=[name],
        total_log_blocks=len(blocks),
    )


