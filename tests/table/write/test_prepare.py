"""Keeping the latest version of each key (`table.write.prepare.dedupe_latest`)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from table.schema import RECORD_KEY
from table.write.prepare import POSITION, dedupe_latest


@pytest.mark.unit
def test_the_greatest_ordering_value_wins_and_ties_go_to_the_later_row_the_rest_kept_in_order():
    rows = pa.table(
        {
            RECORD_KEY: ["a", "b", "a", "c", "b", "a"],
            "ts": [5, 1, 7, 3, 1, 7],
            "v": ["a5", "b1", "a7", "c3", "b1-later", "a7-later"],
            POSITION: [0, 1, 2, 3, 4, 5],
        }
    )
    assert dedupe_latest(rows, "ts")["v"].to_pylist() == ["c3", "b1-later", "a7-later"]


@pytest.mark.unit
def test_ties_follow_the_input_position_not_the_row_order():
    rows = pa.table({RECORD_KEY: ["a", "a"], "ts": ["x", "x"], "v": [1, 2], POSITION: [9, 4]})
    assert dedupe_latest(rows, "ts")["v"].to_pylist() == [1]


@pytest.mark.unit
def test_a_key_written_to_two_groups_keeps_its_latest_version_in_each():
    """A resize's dual write routes a key to its bucket's old and new file groups."""
    rows = pa.table(
        {
            RECORD_KEY: ["a", "a", "a", "a", "b"],
            "group": ["old", "new", "old", "new", "old"],
            "ts": [1, 1, 2, 2, 1],
            "v": [1, 2, 3, 4, 5],
        }
    )
    assert dedupe_latest(rows, "ts", group_column="group")["v"].to_pylist() == [3, 4, 5]
    assert dedupe_latest(rows, "ts")["v"].to_pylist() == [4, 5]


@pytest.mark.unit
def test_a_batch_without_repeated_keys_is_returned_as_it_is():
    rows = pa.chunked_array([["a", "b"], ["c"]])
    table = pa.table({RECORD_KEY: rows, "ts": [1, 1, 1]})
    assert dedupe_latest(table, "ts") is table
