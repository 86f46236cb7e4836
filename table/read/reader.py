"""Reading file slices: base file plus the log blocks of visible instants, merged by record key.

One function reads a run of slices, so the pure-Python reader, the Spark data source and the
services share it; the log blocks of a run's slices decode together, and its slices merge together.
Blocks of instants that are not visible (inflight, rolled back, after the time-travel instant)
are skipped, so a half-written commit never shows.

A slice without log files is its base file (one row per key), read without merging: only the
columns asked for, and with predicates only the row groups whose statistics may match. With log
files, the base file is read whole, since a base row that fails a predicate can still outrank a
log row that passes it; predicates then filter the merged rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.errors import FormatError
from table.file_group.fs_view import FileSlice
from table.file_group.log_file.block import CommandBlock, DataBlock, DeleteBlock, LogBlock
from table.file_group.log_file.reader import read_log_files
from table.file_group.parquet_options import read_parquet
from table.read.merge import DELETE_COMMIT_TIME, DELETE_KEY, DELETE_ORDERING, MergeRule, merge_slice
from table.read.predicate import Predicate, columns_of, filter_rows, row_groups_to_read
from table.schema import META_FIELDS, RECORD_KEY
from table.storage.file_io import Storage
from table.timeline.timeline import CompletedInstants

# The files' bytes of a run of slices read and merged together: enough for hundreds of small
# file groups, few enough that a reader holds little more than one large group at a time.
RUN_BYTES = 32 << 20


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
    """The merged rows of each file slice, in order. Consecutive slices are read in runs of up to
    `RUN_BYTES` of files: a run's log blocks decode in one pass (`read_log_files`) and its slices
    merge in one merge, rather than each slice paying the decoder's and the merge's fixed costs."""
    run: list[FileSlice] = []
    size = 0
    for file_slice in file_slices:
        run.append(file_slice)
        size += sum(log.size for log in file_slice.log_files) + (
            file_slice.base_file.size if file_slice.base_file else 0
        )
        if size >= RUN_BYTES:
            yield from _read_run(storage, run, spec)
            run, size = [], 0
    yield from _read_run(storage, run, spec)


def _read_run(storage: Storage, file_slices: list[FileSlice], spec: SliceReadSpec) -> Iterator[pa.Table]:
    logs = [[log.path for log in s.sorted_log_files()] for s in file_slices]
    blocks = iter(read_log_files(storage, [path for paths in logs for path in paths]))
    with_logs = [(s, [b for _ in paths for b in next(blocks)]) for s, paths in zip(file_slices, logs) if paths]
    merged = iter(_merged_slices(storage, with_logs, spec))
    for file_slice, paths in zip(file_slices, logs):
        yield next(merged) if paths else read_base_file(storage, file_slice, spec)


def _merged_slices(
    storage: Storage, slices: list[tuple[FileSlice, list[LogBlock]]], spec: SliceReadSpec
) -> list[pa.Table]:
    """Each slice's base file merged with its log `blocks`, every slice in one merge: a record
    key is prefixed by its slice's place in the run while they merge, so that the keys of two
    slices never meet."""
    if not slices:
        return []
    ordering_field = spec.ordering_field
    if ordering_field is None:
        raise FormatError(
            f"file group {slices[0][0].file_id} has log files to merge, and the table has no ordering "
            "(precombine) field: this engine merges the versions of a key by one"
        )
    bases: list[pa.Table] = []
    base_places: list[int] = []
    parts: list[pa.Table] = []
    part_places: list[int] = []
    deletes: list[DeleteBlock] = []
    delete_places: list[int] = []
    for place, (file_slice, blocks) in enumerate(slices):
        if file_slice.base_file is not None:
            bases.append(_conform(read_parquet(storage.open_input(file_slice.base_file.path)), spec.schema))
            base_places.append(place)
        rolled_back = {b.target_instant for b in blocks if isinstance(b, CommandBlock) and b.target_instant is not None}
        for block in blocks:
            instant = getattr(block, "instant", None)
            if instant not in spec.visible_instants or instant in rolled_back:
                continue
            if isinstance(block, DataBlock):
                parts.append(_conform(block.records, spec.schema))
                part_places.append(place)
            elif isinstance(block, DeleteBlock):
                deletes.append(block)
                delete_places.append(place)
    if not parts and not bases:
        return [_project(spec.schema.empty_table(), spec.columns)] * len(slices)
    merged = merge_slice(
        _keyed_by_place(_placed(bases, base_places), RECORD_KEY) if bases else None,
        _keyed_by_place(_placed(parts, part_places), RECORD_KEY) if parts else None,
        _keyed_by_place(_delete_rows(deletes, delete_places, spec.schema.field(ordering_field).type), DELETE_KEY)
        if deletes
        else None,
        ordering_field,
        spec.merge_rule,
    )
    keys = pc.utf8_slice_codeunits(merged[RECORD_KEY], _PLACE_WIDTH)
    merged = filter_rows(
        merged.set_column(merged.schema.get_field_index(RECORD_KEY), RECORD_KEY, keys), spec.predicates
    )
    merged = merged.take(pc.sort_indices(merged[_PLACE]))  # stable: each slice's rows keep their order
    bounds = np.searchsorted(merged[_PLACE].to_numpy(), np.arange(len(slices) + 1))
    merged = merged.drop_columns([_PLACE])
    return [_project(merged.slice(a, b - a), spec.columns) for a, b in pairwise(bounds)]


# While the slices of a run merge, each row carries its slice's place in the run, and its record
# key that place as a prefix of fixed width.
_PLACE = "_slice_in_run"
_PLACE_WIDTH = 8


def _placed(tables: list[pa.Table], places: list[int]) -> pa.Table:
    """The tables as one, each row with the place of the slice its table came from."""
    rows = pa.concat_tables(tables)
    return rows.append_column(_PLACE, _repeated(places, [t.num_rows for t in tables], pa.int32()))


def _repeated(values: Sequence[object], counts: list[int], type_: pa.DataType) -> pa.Array:
    """Each value `count` times, in order."""
    return pa.array(values, type_).take(pa.array(np.repeat(np.arange(len(values)), counts)))


def _keyed_by_place(rows: pa.Table, key_column: str) -> pa.Table:
    """`rows` (of `_placed` slices) with each key prefixed by its slice's place."""
    places = pc.take(_place_prefixes(pc.max(rows[_PLACE]).as_py() + 1), rows[_PLACE])
    keys = pc.binary_join_element_wise(places, rows[key_column].cast(pa.string()), "")
    return rows.set_column(rows.schema.get_field_index(key_column), key_column, keys)


def _place_prefixes(count: int) -> pa.Array:
    return pa.array([f"{place:0{_PLACE_WIDTH}d}" for place in range(count)], pa.string())


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


def _delete_rows(blocks: list[DeleteBlock], places: list[int], ordering_type: pa.DataType) -> pa.Table:
    """The deletes of the blocks as one table of key, ordering value and instant, with places."""
    ordering = [block.ordering for block in blocks]
    counts = [len(values) for values in ordering]
    return pa.table(
        {
            DELETE_KEY: pa.concat_arrays([block.record_keys for block in blocks]),
            DELETE_ORDERING: pa.concat_arrays(
                [v if v.type == ordering_type else v.cast(ordering_type) for v in ordering]
            ),
            DELETE_COMMIT_TIME: _repeated([block.instant for block in blocks], counts, pa.string()),
            _PLACE: _repeated(places, counts, pa.int32()),
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
