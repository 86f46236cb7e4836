"""What `streamer run` prints when a table fails, as its user reads it: each failure in one line,
a summary that tells what was committed and what failed, and no stack trace of Python, py4j or the
JVM (those are for `--log-level DEBUG`).

Two tables fail in one run: one on bad records under `decode.on_error: fail` (more of them than
the message names one by one), its table holding a commit of an earlier run; one whose transform
fails on its records (an ANSI cast). Then a transform Spark's analyser refuses stops the start.
"""

from __future__ import annotations

import json
import re

import pytest

from streamer.sandbox.change_events import as_kafka_records, change_events
from tests.support import kafka_broker
from tests.support.ingestion import committed_table, order_config, run_streamer, write_config

pytestmark = pytest.mark.e2e

BAD = [b'{"order_id": "ord-bad-%d", "region": "emea", "amount": "twelve", "updated_at": 1}' % i for i in range(7)]
#: What a stack trace or a logged exception looks like on the terminal.
STACK = re.compile(r"Traceback|^\s+at [\w$.]+\(|py4j|\"exception\"|^\s+File \"", re.MULTILINE)


def test_failed_tables_are_told_in_one_line_each_and_the_summary_tells_what_was_committed(
    kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=1, prefix="orders")
    events = change_events(300, seed=71)
    records = as_kafka_records(events) + [(b"bad", raw, None) for raw in BAD]
    kafka_broker.produce(kafka_bootstrap, topic, records)
    earlier = committed_table(tmp_path / "tables" / "orders", [], {topic: {0: 0}})  # an earlier run's commit
    (instant,) = [i.timestamp for i in earlier.timeline().completed_writes()]
    configs = tmp_path / "configs"
    write_config(configs, order_config(tmp_path, "orders", kafka_bootstrap, topic, decode={"on_error": "fail"}))
    write_config(
        configs,
        order_config(
            tmp_path,
            "casts",
            kafka_bootstrap,
            topic,
            decode={"on_error": "skip"},
            transform="SELECT *, CAST(order_id AS INT) AS number FROM source",
        ),
    )

    code, out = run_streamer(["run", str(configs), "--once"], timeout=300)

    assert code == 1, out[-3000:]
    assert not STACK.search(out), out
    summary = {
        line.split(":", 1)[0]: line for line in out.splitlines() if re.match(r"^(orders|casts): \d+ batches", line)
    }
    named = "; ".join(f"{topic}[0]@{300 + i}: field 'amount': expected double, got \"twelve\"" for i in range(5))
    assert summary["orders"] == (
        f"orders: 0 batches, 0 records, 0 bad committed; batch 0 ({len(records):,} records, 7 bad) failed, nothing "
        f"of it written; last commit {instant} (an earlier run's): FAILED: BadRecordError: orders: 7 record(s) of "
        f"batch 0 could not be decoded (decode.on_error is 'fail'; nothing of this batch was written): "
        f"{named}; and 2 more"
    )
    assert summary["casts"].startswith(
        "casts: 0 batches, 0 records, 0 bad committed; batch 0 failed, nothing of it written; last commit -: "
        "FAILED: NumberFormatException: [CAST_INVALID_INPUT] The value 'ord-000000' of the type \"STRING\" cannot "
        'be cast to "INT"'
    )
    assert len(out.splitlines()) < 40, out


def test_a_transform_spark_refuses_stops_the_start_with_sparks_message_in_one_line(kafka_bootstrap, tmp_path):
    config = order_config(
        tmp_path,
        "orders",
        kafka_bootstrap,
        "orders-never-read",
        transform="SELECT order_id, region, amout * 100 AS cents, updated_at, deleted FROM source",
    )
    path = write_config(tmp_path / "configs", config)

    code, out = run_streamer(["run", str(path), "--once"], timeout=300)

    assert code == 2, out
    assert not STACK.search(out) and "Project [" not in out, out
    (error,) = [line for line in out.splitlines() if line.startswith("error: ")]
    assert error.startswith(
        f"error: {path}: transform: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or "
        "function parameter with name `amout` cannot be resolved. Did you mean one of the "
        "following? [`amount`"
    )
    assert json.dumps(error)  # one line, nothing after it
