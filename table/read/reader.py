"""Reading file slices: base file plus the log blocks of visible instants, merged by record key.

One function reads a run of slices, so the pure-Python reader, the Spark data source and the
services share it; the log blocks of a run's slices decode together.
Blocks of instants that are not visible (inflight, rolled back, after the time-travel instant)
are skipped, so a half-written commit never shows.

A slice without log files is its base file (one row per key), read without merging: only the
columns asked for, and with predicates only the row groups whose statistics may match. With log
files, the base file is read whole, since a base row that fails a predicate can still outrank a
log row that passes it; predicates then filter the merged rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from table.errors import FormatError
from table.file_group.fs_view import FileSlice
from table.file_group.log_file.block import CommandBlock, DataBlock, DeleteBlock, LogBlock
from table.file_group.log_file.reader import read_log_files
from table.file_group.parquet_options import read_parquet
from table.read.merge import DELETE_COMMIT_TIME, DELETE_KEY, DELETE_ORDERING, MergeRule, merge_slice
from table.read.predicate import Predicate, columns_of, filter_rows, row_groups_to_read
from table.schema import META_FIELDS
from table.storage.file_io import Storage
from table.timeline.timeline import CompletedInstants

# Log bytes whose blocks are decoded in one pass: enough for thousands of small blocks, few
# enough that a reader holds little more than one large file group's worth at a time.
LOG_BYTES_READ_TOGETHER = 32 << 20


@dataclass(frozen=True)
class SliceReadSpec:
    """What reading a slice needs besides its files (picklable, for Spark executors)."""

    visible_instants: CompletedInstants
    ordering_field: str | None  # the table's precombine field; without one only base files are read
    schema: pa.Schema  # meta fields + table columns
    columns: tuple[str, ...] | None = None
    predicates: tuple[Predicate, ...] = ()  # rows failing them may be left out; others are kept
    merge_rule: MergeRule = MergeRule.GREATEST_ORDERING  # the table's payload class's (`MergeRule.of`)

    def columns_to_read(self) -> list[str] | None:
        """The projection plus the columns the predicates test (None: every column)."""
        if self.columns is None:
            return None
        return list(dict.fromkeys(list(self.columns) + columns_of(self.predicates)))


def read_file_slice(storage: Storage, file_slice: FileSlice, spec: SliceReadSpec) -> pa.Table:
    """The merged rows of one file slice, projected to `spec.columns`."""
    (rows,) = read_file_slices(storage, [file_slice], spec)
    return rows


def read_file_slices(storage: Storage, file_slices: Iterable[FileSlice], spec: SliceReadSpec) -> Iterator[pa.Table]:
    """The merged rows of each file slice, in order. The log files of consecutive slices are read
    together, up to `LOG_BYTES_READ_TOGETHER` of them, so that their blocks decode in one pass
    (`read_log_files`) rather than one block at a time."""
    chunk: list[FileSlice] = []
    size = 0
    for file_slice in file_slices:
        chunk.append(file_slice)
        size += sum(max(log.size, 0) for log in file_slice.log_files)
        if size >= LOG_BYTES_READ_TOGETHER:
            yield from _read_chunk(storage, chunk, spec)
            chunk, size = [], 0
    yield from _read_chunk(storage, chunk, spec)


def _read_chunk(storage: Storage, file_slices: list[FileSlice], spec: SliceReadSpec) -> Iterator[pa.Table]:
    logs = [[log.path for log in s.sorted_log_files()] for s in file_slices]
    blocks = iter(read_log_files(storage, [path for paths in logs for path in paths]))
    for file_slice, paths in zip(file_slices, logs):
        if not paths:
            yield read_base_file(storage, file_slice, spec)
        else:
            yield _merged_slice(storage, file_slice, [b for _ in paths for b in next(blocks)], spec)


def _merged_slice(storage: Storage, file_slice: FileSlice, blocks: list[LogBlock], spec: SliceReadSpec) -> pa.Table:
    """A slice's base file merged with its log files' `blocks`."""
    ordering_field = spec.ordering_field
    if ordering_field is None:
        raise FormatError(
            f"file group {file_slice.file_id} has log files to merge, and the table has no ordering "
            "(precombine) field: this engine merges the versions of a key by one"
        )
    base = None
    if file_slice.base_file is not None:
        base = _conform(read_parquet(storage.open_input(file_slice.base_file.path)), spec.schema)
    parts: list[pa.Table] = []
    deletes: list[pa.Table] = []
    rolled_back = {b.target_instant for b in blocks if isinstance(b, CommandBlock) and b.target_instant is not None}
    for block in blocks:
        instant = getattr(block, "instant", None)
        if instant not in spec.visible_instants or instant in rolled_back:
            continue
        if isinstance(block, DataBlock):
            parts.append(_conform(block.records, spec.schema))
        elif isinstance(block, DeleteBlock):
            deletes.append(_delete_rows(block, spec.schema.field(ordering_field).type))
    if not parts and base is None:
        return _project(spec.schema.empty_table(), spec.columns)
    merged = merge_slice(
        base,
        pa.concat_tables(parts) if parts else None,
        pa.concat_tables(deletes) if deletes else None,
        ordering_field,
        spec.merge_rule,
    )
    return _project(filter_rows(merged, spec.predicates), spec.columns)


def read_base_file(storage: Storage, file_slice: FileSlice, spec: SliceReadSpec) -> pa.Table:
    """Read-optimized: the slice's base file alone, the row groups the predicates may match."""
    wanted = spec.columns_to_read()
    schema = pa.schema([spec.schema.field(c) for c in wanted]) if wanted else spec.schema
    if file_slice.base_file is None:
        return _project(schema.empty_table(), spec.columns)
    parquet = pq.ParquetFile(storage.open_input(file_slice.base_file.path))
    present = [c for c in schema.names if c in parquet.schema_arrow.names]
    if spec.predicates:
        rows = parquet.read_row_groups(row_groups_to_read(parquet.metadata, spec.predicates), columns=present)
    else:
        rows = parquet.read(columns=present)
    return _project(filter_rows(_conform(rows, schema), spec.predicates), spec.columns)


def _delete_rows(block: DeleteBlock, ordering_type: pa.DataType) -> pa.Table:
    keys = block.records
    n = keys.num_rows
    return pa.table(
        {
            DELETE_KEY: keys["record_key"],
            DELETE_ORDERING: keys["ordering_value"].cast(ordering_type),
            DELETE_COMMIT_TIME: pa.array([block.instant] * n, pa.string()),
        }
    )


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Same columns and types as the table schema; columns a file lacks read as null."""
    if table.schema.equals(schema):
        return table
    names = set(table.column_names)
    columns = []
    for field in schema:
        if field.name in names:
            column = table[field.name]
            columns.append(column if column.type == field.type else column.cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _project(table: pa.Table, columns: tuple[str, ...] | None) -> pa.Table:
    return table.select(list(columns)) if columns else table


def table_schema_with_meta(data_schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(m, pa.string()) for m in META_FIELDS] + list(data_schema))
