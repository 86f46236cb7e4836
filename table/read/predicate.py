"""Simple column predicates a query hands to the readers, to skip what cannot match.

A predicate compares one top-level column with a constant. Readers use a conjunction of them
twice: against Parquet row-group statistics, to read only the row groups that may hold a match,
and against the rows read, to hand on fewer rows. Both are only ever narrowing: the engine
that asked (Spark) still applies its own filters, so a predicate a reader cannot judge (a type
the statistics do not carry, a column a file lacks) keeps everything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.errors import InvalidRequestError

#: op -> (does a [min, max] range possibly hold a match, the row-wise Arrow comparison)
_OPS: dict[str, tuple[Callable[[Any, Any, Any], bool], Callable[[Any, Any], Any]]] = {
    "=": (lambda lo, hi, v: lo <= v <= hi, pc.equal),
    "<": (lambda lo, hi, v: lo < v, pc.less),
    "<=": (lambda lo, hi, v: lo <= v, pc.less_equal),
    ">": (lambda lo, hi, v: hi > v, pc.greater),
    ">=": (lambda lo, hi, v: hi >= v, pc.greater_equal),
}
IN = "in"
NOT_NULL = "not_null"
OPS = (*_OPS, IN, NOT_NULL)


@dataclass(frozen=True)
class Predicate:
    """`column op value`: op one of =, <, <=, >, >=, in (value a tuple), not_null (no value)."""

    column: str
    op: str
    value: Any = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise InvalidRequestError(f"predicate on {self.column!r}: unknown op {self.op!r}; one of {OPS}")

    def may_match(self, lo: Any, hi: Any, null_count: int | None, num_values: int) -> bool:
        """Whether values within [lo, hi] (statistics of a row group) may satisfy it."""
        if self.op == NOT_NULL:
            return null_count is None or null_count < num_values
        try:
            if self.op == IN:
                return any(lo <= v <= hi for v in self.value)
            return _OPS[self.op][0](lo, hi, self.value)
        except TypeError:  # statistics of a type the constant does not compare with
            return True

    def mask(self, column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
        """Row-wise result; all true when the constant does not convert to the column's type."""
        if self.op == NOT_NULL:
            return pc.is_valid(column)
        try:
            if self.op == IN:
                return pc.is_in(column, value_set=pa.array(list(self.value), column.type))
            return _OPS[self.op][1](column, pa.scalar(self.value).cast(column.type))
        except (pa.ArrowException, TypeError, ValueError):
            return pa.repeat(pa.scalar(True), len(column))


def row_groups_to_read(metadata: pq.FileMetaData, predicates: Sequence[Predicate]) -> list[int]:
    """Row groups whose statistics do not rule out every predicate holding."""
    columns = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    keep = []
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if all(_may_hold(group, columns.get(p.column), p) for p in predicates):
            keep.append(g)
    return keep


def _may_hold(group: pq.RowGroupMetaData, index: int | None, predicate: Predicate) -> bool:
    if index is None:
        return True
    stats = group.column(index).statistics
    if stats is None:
        return True
    if not stats.has_min_max:  # every value null, or statistics not written
        return not (stats.has_null_count and stats.null_count == group.num_rows)
    return predicate.may_match(stats.min, stats.max, stats.null_count, group.num_rows)


def filter_rows(rows: pa.Table, predicates: Sequence[Predicate]) -> pa.Table:
    """Rows satisfying every predicate on a column they have (null comparisons drop the row)."""
    masks = [p.mask(rows[p.column]) for p in predicates if p.column in rows.column_names]
    if not masks:
        return rows
    combined = masks[0]
    for m in masks[1:]:
        combined = pc.and_(combined, m)
    return rows.filter(pc.fill_null(combined, False))


def columns_of(predicates: Sequence[Predicate]) -> list[str]:
    return list(dict.fromkeys(p.column for p in predicates))
