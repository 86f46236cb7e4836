"""Which micro-batches the driver writes itself."""

from __future__ import annotations

import pytest

from streamer.driver_write import DriverWrites, SourcePlan
from streamer.kafka.schema import OFFSET_RANGES_SCHEMA

RANGES = [(("orders", 0), 100, 400), (("orders", 1), 50, 250)]  # 500 records


@pytest.mark.unit
def test_the_driver_takes_a_batch_up_to_its_limit_and_not_past_it():
    assert DriverWrites.of("local[2]", 500).takes(RANGES)
    assert not DriverWrites.of("local[2]", 499).takes(RANGES)


@pytest.mark.unit
@pytest.mark.parametrize(
    "master, limit, ranges",
    [
        ("spark://master:7077", 1_000_000, RANGES),  # on a cluster, Spark's tasks write every batch
        ("local[*]", 0, RANGES),  # turned off
        ("local[*]", 1_000_000, []),  # nothing to read
    ],
)
def test_spark_writes_the_batches_the_driver_does_not_take(master, limit, ranges):
    assert not DriverWrites.of(master, limit).takes(ranges)


@pytest.mark.spark
def test_the_sources_plan_agrees_with_ranges_of_the_same_spans_however_split(spark):
    planned = [("orders", 0, 100, 250), ("orders", 0, 250, 400), ("orders", 1, 50, 250)]
    assert SourcePlan(spark.createDataFrame(planned, OFFSET_RANGES_SCHEMA), RANGES).agrees()
    moved = [("orders", 0, 100, 400), ("orders", 1, 40, 250)]
    assert not SourcePlan(spark.createDataFrame(moved, OFFSET_RANGES_SCHEMA), RANGES).agrees()
    assert not SourcePlan(spark.createDataFrame(planned[:2], OFFSET_RANGES_SCHEMA), RANGES).agrees()


@pytest.mark.spark
def test_a_plan_asked_first_gives_the_driver_each_partitions_whole_span_with_records(spark):
    planned = [("orders", 0, 100, 250), ("orders", 0, 250, 400), ("orders", 1, 50, 250), ("orders", 2, 7, 7)]
    plan = SourcePlan(spark.createDataFrame(planned, OFFSET_RANGES_SCHEMA))
    assert plan.ranges == RANGES and plan.agrees()
