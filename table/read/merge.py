"""Merging record versions into the latest one per record key.

The rule every reader of a table must share (ours, compaction's, hudi-rs's), so that they return
the same rows: for each record key the version with the greatest ordering value wins, ties go to
the greater `_hoodie_commit_seqno` (a later commit, or later in the same commit). A key is
dropped when a delete for it is newer: the delete's greatest ordering value is greater, or equal
with a later commit; a delete whose ordering value is zero is ordered by commit time alone.

Which versions compete depends on the table's payload class (`hoodie.compaction.payload.class`),
as in Hudi 0.15 (`MergeRule.of`):

- `DefaultHoodieRecordPayload` (the tables we create) and `EventTimeAvroPayload`: every version
  of a file slice, base file and log records alike;
- `OverwriteWithLatestAvroPayload`, Hudi's default: the log records compete among themselves
  (Hudi's log scanner pre-combines them by ordering value), and whatever they leave for a key,
  a version or a delete, replaces the base file's row whatever its ordering value
  (`combineAndGetUpdateValue` returns the newer record).
"""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa
import pyarrow.compute as pc

from table.errors import FormatError
from table.schema import COMMIT_SEQNO, COMMIT_TIME, RECORD_KEY

_PAYLOADS = "org.apache.hudi.common.model."


class MergeRule(StrEnum):
    """How a file slice's versions of a key are merged, by the table's payload class."""

    GREATEST_ORDERING = "greatest_ordering"  # base and logs alike
    LOGS_OVER_BASE = "logs_over_base"  # logs by ordering, then they replace the base row

    @classmethod
    def of(cls, payload_class: str | None) -> MergeRule:
        """The rule of a payload class; FormatError for one whose merge we do not implement."""
        rules = {
            f"{_PAYLOADS}DefaultHoodieRecordPayload": cls.GREATEST_ORDERING,
            f"{_PAYLOADS}EventTimeAvroPayload": cls.GREATEST_ORDERING,
            f"{_PAYLOADS}OverwriteWithLatestAvroPayload": cls.LOGS_OVER_BASE,
        }
        if payload_class not in rules:
            raise FormatError(
                f"payload class {payload_class!r} (hoodie.compaction.payload.class) is not one this "
                f"engine merges as Hudi does; it reads and writes tables of {sorted(rules)}"
            )
        return rules[payload_class]


#: Columns of the delete records handed to `merge_latest`.
DELETE_KEY = "record_key"
DELETE_ORDERING = "ordering_value"
DELETE_COMMIT_TIME = "commit_time"


def latest_per_key(records: pa.Table, ordering_field: str) -> pa.Table:
    """The winning version of every key among data records (no deletes applied)."""
    if records.num_rows <= 1:
        return records
    order = pc.sort_indices(
        records,
        sort_keys=[
            (RECORD_KEY, "descending"),
            (ordering_field, "descending"),
            (COMMIT_SEQNO, "descending"),
        ],
    )
    keys = pc.take(records[RECORD_KEY], order)
    first = _first_of_runs(keys)
    return records.take(pc.filter(order, first))


def merge_latest(records: pa.Table, deletes: pa.Table | None, ordering_field: str) -> pa.Table:
    """Latest live version of each key, with newer deletes applied. Sorts and lookups only: a
    table of many partitions merges many small slices, where a hash join's setup would cost
    more than the rows."""
    latest = latest_per_key(records, ordering_field)
    if deletes is None or deletes.num_rows == 0 or latest.num_rows == 0:
        return latest
    ordering_type = latest.schema.field(ordering_field).type
    keys, del_ordering = _greatest_per_key(deletes, DELETE_ORDERING)
    _, del_commit = _greatest_per_key(deletes, DELETE_COMMIT_TIME)
    found = pc.index_in(latest[RECORD_KEY], value_set=keys)  # each row's key among the deleted ones
    matched = pc.is_valid(found)
    if not pc.any(matched).as_py():
        return latest
    rows = pc.indices_nonzero(matched)
    at = pc.take(found, rows)
    del_ordering = pc.take(del_ordering, at).cast(ordering_type)
    del_commit = pc.take(del_commit, at)
    ordering = pc.take(latest[ordering_field], rows)
    newer_commit = pc.greater(del_commit, pc.take(latest[COMMIT_TIME], rows))
    zero = pc.equal(del_ordering, pa.scalar(0).cast(ordering_type)) if _is_integer(ordering_type) else None
    by_ordering = pc.or_(
        pc.greater(del_ordering, ordering),
        pc.and_(pc.equal(del_ordering, ordering), newer_commit),
    )
    deleted = pc.if_else(zero, newer_commit, by_ordering) if zero is not None else by_ordering
    deleted_rows = pc.filter(rows, pc.fill_null(deleted, False))
    keep = pc.invert(pc.is_in(pa.array(range(latest.num_rows), pa.uint64()), value_set=deleted_rows))
    return latest.filter(keep)


def merge_slice(
    base: pa.Table | None,
    logs: pa.Table | None,
    deletes: pa.Table | None,
    ordering_field: str,
    rule: MergeRule = MergeRule.GREATEST_ORDERING,
) -> pa.Table:
    """The live version of each key of a file slice: its base file's rows, its log records and
    its log deletes (`DELETE_*` columns), merged by `rule`. `base` and `logs` have the same schema;
    at least one of them is given."""
    if rule == MergeRule.GREATEST_ORDERING or base is None or base.num_rows == 0:
        records = pa.concat_tables([t for t in (base, logs) if t is not None])
        return merge_latest(records, deletes, ordering_field)
    from_logs = merge_latest(logs, deletes, ordering_field) if logs is not None else base.schema.empty_table()
    touched = [logs[RECORD_KEY]] if logs is not None else []
    touched += [deletes[DELETE_KEY].cast(pa.string())] if deletes is not None else []
    if not touched:
        return base
    replaced = pc.is_in(base[RECORD_KEY], value_set=pa.chunked_array(touched).combine_chunks())
    return pa.concat_tables([base.filter(pc.invert(replaced)), from_logs])


def _greatest_per_key(deletes: pa.Table, column: str) -> tuple[pa.Array, pa.Array]:
    """The distinct keys of the deletes and the greatest `column` of each, in the same order."""
    order = pc.sort_indices(deletes, sort_keys=[(DELETE_KEY, "ascending"), (column, "descending")])  # nulls last
    first = pc.filter(order, _first_of_runs(pc.take(deletes[DELETE_KEY], order)))
    return (pc.take(deletes[DELETE_KEY], first).combine_chunks(), pc.take(deletes[column], first).combine_chunks())


def _first_of_runs(sorted_keys: pa.ChunkedArray | pa.Array) -> pa.Array:
    """True where a key differs from the one before it in a sorted array."""
    keys = sorted_keys.combine_chunks() if isinstance(sorted_keys, pa.ChunkedArray) else sorted_keys
    n = len(keys)
    if n == 0:
        return pa.array([], pa.bool_())
    differs = pc.not_equal(keys.slice(1), keys.slice(0, n - 1))
    return pa.concat_arrays([pa.array([True]), pc.fill_null(differs, True)])


def _is_integer(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)
