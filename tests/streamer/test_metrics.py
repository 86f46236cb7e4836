"""The metrics a table exports from what is kept with it, read at scrape time."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from streamer.metrics import Metrics

pytestmark = pytest.mark.unit


def test_the_last_verify_verdict_kept_with_a_table_is_exported_at_the_next_scrape():
    metrics = Metrics()
    table = metrics.table("orders", trigger_seconds=10, stuck_after_triggers=10)
    verdicts = [None, {"time": "2026-12-02T05:00:00Z", "rows": 9, "missing": 1, "extra": 0, "different": 2}]
    table.verdict_source = lambda: verdicts[0]
    table.refresh()
    assert b"mor_streamer_verify_differing_rows{" not in generate_latest(metrics.registry)
    verdicts.pop(0)
    table._verdict_asked_at = float("-inf")  # the next scrape, past the refresh interval
    table.refresh()
    scraped = generate_latest(metrics.registry).decode()
    assert 'mor_streamer_verify_differing_rows{table="orders"} 3.0' in scraped
    assert 'mor_streamer_verify_timestamp_seconds{table="orders"} 1.7961876e+09' in scraped
