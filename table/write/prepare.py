"""Preparing a batch for a deltacommit: validated, keyed, and deduplicated (the greatest ordering
value per record key, the later row on ties)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from table.errors import InvalidBatchError
from table.schema import PARTITION_PATH, RECORD_KEY

if TYPE_CHECKING:
    from table.keys import KeyGenerator

#: Column marking the rows of a prepared batch that are deletes.
IS_DELETE = "_mor_is_delete"


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


def prepare_batch(records: pa.Table, spec: BatchSpec, key_generator: KeyGenerator, dedupe: bool = True) -> pa.Table:
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
    if not is_orderable_type(ordering.type):
        raise InvalidBatchError(
            f"ordering field '{spec.ordering_field}' has type {ordering.type}; "
            "it must be a number, string, date or timestamp"
        )
    if ordering.null_count:
        raise InvalidBatchError(f"ordering field '{spec.ordering_field}' is null in {ordering.null_count} record(s)")
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


def dedupe_latest(prepared: pa.Table, ordering_field: str, group_column: str | None = None) -> pa.Table:
    """One row per record key (per key of each group, with `group_column`): the greatest ordering
    value, the later row on ties. The rows kept stay in their order. Keys are hashed once, and
    only the rows of keys that repeat are sorted: a batch pays for its duplicates, not a sort of
    every row."""
    n = prepared.num_rows
    if n <= 1:
        return prepared
    ids, distinct = _codes(prepared[RECORD_KEY])
    if distinct == n:
        return prepared
    if group_column is not None:
        groups, group_count = _codes(prepared[group_column])
        group_of_key = np.empty(distinct, dtype=np.int64)
        group_of_key[ids] = groups
        if not np.array_equal(group_of_key[ids], groups):  # a key in two groups: a resize's dual write
            _, ids = np.unique(ids * group_count + groups, return_inverse=True)
            distinct = int(ids.max()) + 1
    repeats = np.bincount(ids, minlength=distinct)[ids] > 1
    repeated = np.flatnonzero(repeats)
    if not len(repeated):
        return prepared
    rows = pa.array(repeated)
    repeated_ids = ids[repeated]
    position = prepared[POSITION].take(rows) if POSITION in prepared.column_names else rows
    versions = pa.table({"k": repeated_ids, "o": prepared[ordering_field].take(rows), "p": position})
    order = np.asarray(
        pc.sort_indices(versions, sort_keys=[("k", "ascending"), ("o", "descending"), ("p", "descending")])
    )
    ordered_ids = repeated_ids[order]
    latest = np.ones(len(order), dtype=bool)
    latest[1:] = ordered_ids[1:] != ordered_ids[:-1]
    keep = ~repeats
    keep[repeated[order[latest]]] = True
    return prepared.filter(pa.array(keep))


def _codes(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """Each value's index among the column's distinct values, and how many there are."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    return np.asarray(encoded.indices, dtype=np.int64), len(encoded.dictionary)


def is_orderable_type(t: pa.DataType) -> bool:
    """Whether values of `t` can order a record's versions (the ordering field's type)."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_decimal(t)
    )
