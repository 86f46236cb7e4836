"""Reading back the offsets Spark planned for a micro-batch from its checkpoint's offset log."""

from __future__ import annotations

import pytest

from streamer.checkpoint import planned_offsets

pytestmark = pytest.mark.unit


def test_the_planned_end_offsets_are_read_from_the_batchs_log_file(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "7").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795465626424,"conf":{"spark.sql.shuffle.partitions":"4"}}\n'
        '{"orders":{"1":49989,"0":50012},"refunds":{"0":3}}'
    )
    assert planned_offsets(str(tmp_path), 7) == {"orders": {0: 50012, 1: 49989}, "refunds": {0: 3}}


@pytest.mark.parametrize(
    "content", [None, "v2\n{}\n{}", 'v1\n{}\n{"orders":{"0":1}}\n{"other":{}}', "v1\n{}\nnot json"]
)
def test_a_missing_or_unknown_log_says_nothing_rather_than_something_wrong(tmp_path, content, caplog):
    (tmp_path / "offsets").mkdir()
    if content is not None:
        (tmp_path / "offsets" / "3").write_text(content)
    assert planned_offsets(str(tmp_path), 3) is None
    assert "could not read the offsets Spark planned for batch 3" in caplog.text
