"""Which micro-batches the driver writes itself."""

from __future__ import annotations

import pytest

from streamer.driver_write import DriverWrites

pytestmark = pytest.mark.unit

RANGES = [(("orders", 0), 100, 400), (("orders", 1), 50, 250)]  # 500 records


def test_the_driver_takes_a_batch_up_to_its_limit_and_not_past_it():
    assert DriverWrites.of("local[2]", 500).takes(RANGES)
    assert not DriverWrites.of("local[2]", 499).takes(RANGES)


@pytest.mark.parametrize(
    "master, limit, ranges",
    [
        ("spark://master:7077", 1_000_000, RANGES),  # on a cluster, Spark's tasks write every batch
        ("local[*]", 0, RANGES),  # turned off
        ("local[*]", 1_000_000, None),  # ranges only the source's plan can say
        ("local[*]", 1_000_000, []),  # nothing to read
    ],
)
def test_spark_writes_the_batches_the_driver_does_not_take(master, limit, ranges):
    assert not DriverWrites.of(master, limit).takes(ranges)
