"""Upserting a batch into file groups: the part of a deltacommit that writes data files.

A batch is first prepared (validated, keyed, deduplicated: greatest ordering value per key),
then routed through each partition's consistent-hashing ring to a file group (`Routing`), and
each file group's share is written by `write_file_group`: a new file group gets a Parquet base file (so
every Hudi reader sees it), an existing one gets one new log file holding a data block and/or a
delete block. The same function runs in-process for pyarrow batches and on Spark executors.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.base_file import parquet_options
from table.commit_metadata import WriteStat
from table.errors import InvalidBatchError
from table.index import consistent_hashing as ring
from table.layout import BaseFileName, LogFileName, write_token
from table.logfile import DataBlock, DeleteBlock, write_log_file
from table.markers import create_marker
from table.schema import (
    COMMIT_SEQNO,
    COMMIT_TIME,
    FILE_NAME,
    META_FIELDS,
    PARTITION_PATH,
    RECORD_KEY,
    avro_schema_json,
)
from table.storage import Storage

#: Column marking the rows of a prepared batch that are deletes.
IS_DELETE = "_mor_is_delete"
#: Column of a prepared batch holding its file group's id, for the shuffle.
FILE_ID = "_mor_file_id"
#: Column holding each row's position in the input, so ties still go to the later row after a shuffle.
POSITION = "_mor_position"


@dataclass(frozen=True)
class BatchSpec:
    """What preparing a batch needs to know about the table (picklable, for executors)."""

    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...]
    ordering_field: str
    hive_style_partitioning: bool
    url_encode_partitions: bool
    delete_field: str | None


@dataclass(frozen=True)
class FileGroupTarget:
    """Where one file group's records go in this commit."""

    partition_path: str
    file_id: str
    base_instant: str | None  # None: the group is new and gets a base file
    base_file_name: str | None  # '': the slice's base file is a pending compaction's output
    log_version: int


@dataclass(frozen=True)
class CommitContext:
    """What writing a file group needs to know about the commit (picklable, for executors)."""

    storage: Storage
    instant: str
    table_name: str
    data_schema: pa.Schema  # the table's columns, without meta fields
    ordering_field: str
    log_block_format: str  # "avro" or "parquet"


def prepare_batch(records: pa.Table, spec: BatchSpec, key_generator, dedupe: bool = True) -> pa.Table:
    """Validate, add record key and partition path, keep the latest version of each key.

    `dedupe=False` leaves duplicates for a later per-file-group pass (the Spark path).

    Returns the batch with `_hoodie_record_key`, `_hoodie_partition_path` and `IS_DELETE` added
    and the delete marker column removed. Raises InvalidBatchError naming the field at fault.
    """
    names = set(records.column_names)
    for f in (*spec.record_key_fields, *spec.partition_fields, spec.ordering_field):
        if f not in names:
            raise InvalidBatchError(f"field '{f}' is missing from the batch (columns: {sorted(names)})")
    ordering = records[spec.ordering_field]
    if not _orderable(ordering.type):
        raise InvalidBatchError(
            f"ordering field '{spec.ordering_field}' has type {ordering.type}; "
            "it must be a number, string, date or timestamp"
        )
    if ordering.null_count:
        raise InvalidBatchError(
            f"ordering field '{spec.ordering_field}' is null in {ordering.null_count} record(s)"
        )
    keys = key_generator.record_keys(records)
    partitions = key_generator.partition_paths(records)
    if spec.delete_field:
        if spec.delete_field not in names:
            is_delete = pa.repeat(pa.scalar(False), records.num_rows)
        else:
            is_delete = pc.fill_null(records[spec.delete_field].cast(pa.bool_()), False)
        records = records.drop_columns([spec.delete_field]) if spec.delete_field in names else records
    else:
        is_delete = pa.repeat(pa.scalar(False), records.num_rows)
    prepared = records.append_column(RECORD_KEY, keys).append_column(PARTITION_PATH, partitions)
    prepared = prepared.append_column(IS_DELETE, is_delete)
    return dedupe_latest(prepared, spec.ordering_field) if dedupe else prepared


class Routing:
    """Where each record of one commit goes: the rings of the partitions the table has and the
    file group target of each of their buckets.

    A partition the table does not have yet gets Hudi's initial ring, which is a function of
    the partition path and the bucket count (see `ring.initial_metadata`), so executors route
    its records without asking the driver; the commit records that ring when it completes.
    Picklable: Spark broadcasts it to the tasks that key and route a batch.
    """

    def __init__(self, spec: BatchSpec, key_generator, routers: dict[str, ring.Router],
                 targets: dict[str, FileGroupTarget], initial_buckets: int):
        self.spec = spec
        self.key_generator = key_generator
        self.routers = routers
        self.targets = targets
        self.initial_buckets = initial_buckets
        self._new_partitions: dict[str, ring.Router] = {}

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_new_partitions"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _new_partitions={})

    def prepare(self, records: pa.Table | pa.RecordBatch, dedupe: bool = True) -> pa.Table:
        table = records if isinstance(records, pa.Table) else pa.Table.from_batches([records])
        return prepare_batch(table, self.spec, self.key_generator, dedupe=dedupe)

    def router(self, partition_path: str) -> ring.Router:
        found = self.routers.get(partition_path) or self._new_partitions.get(partition_path)
        if found is None:
            found = self._new_partitions[partition_path] = ring.Router(
                ring.initial_metadata(partition_path, self.initial_buckets),
                index_key_fields=self.spec.record_key_fields)
        return found

    def is_new(self, partition_path: str) -> bool:
        return partition_path not in self.routers

    def target(self, file_id: str, partition_path: str) -> FileGroupTarget:
        """The target of a file group; a group of a new partition is new and gets a base file."""
        found = self.targets.get(file_id)
        if found is not None:
            return found
        if not self.is_new(partition_path):
            raise KeyError(f"file group {file_id} is not a bucket of partition '{partition_path}'")
        return FileGroupTarget(partition_path=partition_path, file_id=file_id, base_instant=None,
                               base_file_name=None, log_version=1)

    def route(self, rows: pa.Table | pa.RecordBatch) -> pa.Table:
        """The rows with the FILE_ID of their partition's bucket (its consistent-hashing ring
        applied to the record key). A row whose bucket a pending resize replaces comes twice:
        once for the old file group, once for the child's (the dual write that keeps both sides
        current)."""
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        if table.num_rows == 0:
            return table.append_column(FILE_ID, pa.array([], pa.string()))
        partitions = table[PARTITION_PATH].combine_chunks()
        keys = table[RECORD_KEY].combine_chunks()
        distinct = pc.unique(partitions).to_pylist()
        if len(distinct) == 1:
            file_ids, child_ids = self.router(distinct[0]).file_ids_with_children(keys)
            primary = table.append_column(FILE_ID, file_ids)
            if child_ids is None or child_ids.null_count == len(child_ids):
                return primary
        else:
            positions, routed, children = [], [], []
            for partition in distinct:
                idx = pc.indices_nonzero(pc.equal(partitions, partition))
                file_ids, child_ids = self.router(partition).file_ids_with_children(pc.take(keys, idx))
                positions.append(idx)
                routed.append(file_ids)
                children.append(child_ids if child_ids is not None else pa.nulls(len(idx), pa.string()))
            # Rows were gathered partition by partition; put each file id back at its row's position.
            order = pc.sort_indices(pa.concat_arrays(positions))
            primary = table.append_column(FILE_ID, pc.take(pa.concat_arrays(routed), order))
            child_ids = pc.take(pa.concat_arrays(children), order)
            if child_ids.null_count == len(child_ids):
                return primary
        dual = pc.is_valid(child_ids)
        duplicates = table.filter(dual).append_column(FILE_ID, pc.filter(child_ids, dual))
        return pa.concat_tables([primary, duplicates])


def file_group_slices(routed: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """The routed rows of each file group, as (file id, rows)."""
    if routed.num_rows == 0:
        return
    groups = pc.dictionary_encode(routed[FILE_ID].combine_chunks())
    if len(groups.dictionary) == 1:
        yield groups.dictionary[0].as_py(), routed
        return
    codes = np.asarray(groups.indices)
    ordered = routed.take(pa.array(np.argsort(codes, kind="stable")))
    ends = np.cumsum(np.bincount(codes, minlength=len(groups.dictionary)))
    start = 0
    for file_id, end in zip(groups.dictionary.to_pylist(), ends.tolist()):
        yield file_id, ordered.slice(start, end - start)
        start = end


def dedupe_latest(prepared: pa.Table, ordering_field: str) -> pa.Table:
    """One row per record key: the greatest ordering value, the later row on ties."""
    if prepared.num_rows <= 1 or pc.count_distinct(prepared[RECORD_KEY]).as_py() == prepared.num_rows:
        return prepared
    if POSITION in prepared.column_names:
        position = prepared[POSITION]
    else:
        position = pa.array(range(prepared.num_rows), pa.int64())
    order = pc.sort_indices(
        pa.table({"k": prepared[RECORD_KEY], "o": prepared[ordering_field], "p": position}),
        sort_keys=[("k", "ascending"), ("o", "descending"), ("p", "descending")],
    )
    keys = pc.take(prepared[RECORD_KEY], order).combine_chunks()
    n = len(keys)
    first = pa.concat_arrays([pa.array([True]), pc.not_equal(keys.slice(1), keys.slice(0, n - 1))])
    return prepared.take(pc.filter(order, first))


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


def _orderable(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_decimal(t)
    )
