"""Reads with predicates: only row groups whose statistics may match are read, and never a wrong row."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from table.read.predicate import Predicate, row_groups_to_read
from tests.support.orders import SCHEMA, make_table, write_options

pytestmark = pytest.mark.unit

ROWS = 120_000
WINDOW = (50_000, 51_999)


def _orders(ids: range, updated_at, status: str = "new") -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "order_id": [f"o{i:06d}" for i in ids],
            "region": ["emea"] * n,
            "amount": [float(i % 997) for i in ids],
            "status": [status] * n,
            "updated_at": list(updated_at),
            "is_deleted": [False] * n,
        },
        schema=SCHEMA,
    )


def _in_window() -> list[Predicate]:
    return [Predicate("updated_at", ">=", WINDOW[0]), Predicate("updated_at", "<=", WINDOW[1])]


def _keys(rows: pa.Table) -> set[str]:
    return set(rows["order_id"].to_pylist())


def test_a_window_on_a_base_file_in_column_order_reads_few_row_groups_and_exactly_its_rows(tmp_path):
    table = make_table(tmp_path / "orders")
    with table.writer(write_options(initial_buckets=1)) as writer:
        writer.upsert(_orders(range(ROWS), range(ROWS)))

    [file_slice] = table.file_system_view().latest_slices()
    metadata = pq.ParquetFile(tmp_path / "orders" / file_slice.base_file.path).metadata
    chosen = row_groups_to_read(metadata, _in_window())
    assert metadata.num_row_groups >= 4
    assert 1 <= len(chosen) <= 2

    got = table.snapshot(columns=["order_id", "status"], predicates=_in_window())
    assert got.column_names == ["order_id", "status"]
    assert _keys(got) == {f"o{i:06d}" for i in range(WINDOW[0], WINDOW[1] + 1)}
    assert _keys(table.read_optimized(predicates=_in_window())) == _keys(got)


def test_a_base_row_outside_the_window_still_outranks_an_older_log_row_inside_it(tmp_path):
    table = make_table(tmp_path / "orders")
    with table.writer(write_options(initial_buckets=1)) as writer:
        writer.upsert(_orders(range(ROWS), range(ROWS)))
        # Late, older versions of keys whose base rows lie after the window: they lose the merge.
        writer.upsert(_orders(range(60_000, 60_100), range(WINDOW[0], WINDOW[0] + 100), status="late"))
        # Newer versions moving keys of the window out of it, and keys from outside into it.
        writer.upsert(_orders(range(50_000, 50_010), [90_000] * 10, status="moved-out"))
        writer.upsert(_orders(range(70_000, 70_010), [WINDOW[1] + 10_000] * 10, status="unmoved"))
        writer.upsert(_orders(range(80_000, 80_010), range(80_000, 80_010), status="same"))

    every_row = table.snapshot()
    in_window = pc.and_(
        pc.greater_equal(every_row["updated_at"], WINDOW[0]), pc.less_equal(every_row["updated_at"], WINDOW[1])
    )
    expected = _keys(every_row.filter(in_window))
    got = table.snapshot(predicates=_in_window())
    assert _keys(got) == expected
    assert "late" not in got["status"].to_pylist()
    assert not expected & {f"o{i:06d}" for i in range(50_000, 50_010)}


def test_predicates_on_a_column_the_table_lacks_are_refused_by_name(tmp_path):
    table = make_table(tmp_path / "orders")
    with pytest.raises(ValueError, match="shipped_at"):
        table.snapshot(predicates=[Predicate("shipped_at", ">", 1)])
    with pytest.raises(ValueError, match="between"):
        Predicate("updated_at", "between", (1, 2))
