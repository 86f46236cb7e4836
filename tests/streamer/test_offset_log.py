"""Reading back the offsets Spark planned for a micro-batch from its checkpoint's offset log."""

from __future__ import annotations

import pytest

from streamer.checkpoint import planned_offsets, planned_ranges

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


def _log(directory, batch_id: int, offsets: str) -> None:
    (directory / "offsets").mkdir(exist_ok=True)
    (directory / "offsets" / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offsets}')


def test_a_batchs_ranges_run_from_where_the_batch_before_it_ended(tmp_path):
    _log(tmp_path, 6, '{"orders":{"0":100,"1":40},"refunds":{"0":3}}')
    ends = {"orders": {0: 150, 1: 40}, "refunds": {0: 9}}
    assert planned_ranges(str(tmp_path), 7, ends) == [(("orders", 0), 100, 150), (("refunds", 0), 3, 9)]


@pytest.mark.parametrize(
    "batch_id, before, why",
    [
        (0, None, "the query's first batch starts where the source's plan says"),
        (7, None, "no log of the batch before"),
        (7, '{"orders":{"0":100}}', "partition 1 is new to the query: it starts at Kafka's earliest offset"),
        (7, '{"orders":{"0":100,"1":90}}', "partition 1 went back: it is read from Kafka's earliest offset"),
    ],
)
def test_ranges_that_only_the_sources_plan_can_say_are_not_guessed(tmp_path, batch_id, before, why):
    if before is not None:
        _log(tmp_path, batch_id - 1, before)
    assert planned_ranges(str(tmp_path), batch_id, {"orders": {0: 150, 1: 60}}) is None, why
