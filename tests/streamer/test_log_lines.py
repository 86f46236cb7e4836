"""`streamer run --log-format json`: one JSON object per line, which a log shipper parses."""

from __future__ import annotations

import io
import json
import logging

import pytest

from streamer.logs.lines import formatter

pytestmark = pytest.mark.unit


def test_a_json_log_line_is_one_object_with_time_level_logger_message_and_exception():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter("json"))
    logger = logging.getLogger("streamer.test_log_lines")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("orders batch %d: %s", 7, 'a "quoted"\nsecond line')
        try:
            raise ValueError("bad value")
        except ValueError:
            logger.exception("orders: stopped")
    finally:
        logger.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first, second = map(json.loads, lines)
    assert first["level"] == "WARNING" and first["logger"] == "streamer.test_log_lines"
    assert first["message"] == 'orders batch 7: a "quoted"\nsecond line'
    assert first["time"].endswith("+00:00") and "T" in first["time"]
    assert "exception" not in first
    assert second["message"] == "orders: stopped" and "ValueError: bad value" in second["exception"]
