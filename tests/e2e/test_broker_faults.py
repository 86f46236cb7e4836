"""Broker faults: a broker that goes away and comes back under a running job, one that never comes
back, and a topic whose offsets are gone (deleted and recreated) under a table that holds them.

The outage scenario runs an Apache Kafka of its own (`streamer.sandbox.kafka_broker.KafkaBroker`), stopped and
started again on the same port and data, then frozen with SIGSTOP; the other scenarios use the
session's broker.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import pytest

from streamer import app
from streamer.config.loading import config_from_mapping
from streamer.sink import DATA_LOSS_KEY
from table.mor_table import MorTable
from tests.support import kafka_broker
from tests.support.ingestion import (
    JobOutput,
    assert_table_matches,
    committed_offsets,
    end_offsets,
    has_read,
    order_config,
    produce_orders,
    run_streamer,
    settled_change_events,
    streamer_process,
    write_config,
)

pytestmark = pytest.mark.e2e

OUTAGE_SECONDS = 10  # several triggers of the job and retries of its Kafka queries


def test_a_continuous_job_rides_out_a_broker_restart_and_a_hung_broker_without_loss_duplicates_or_restart(tmp_path):
    events = settled_change_events(6_000, seed=71)
    quarter = len(events) // 4
    before, while_down, after, hung = (
        events[:quarter],
        events[quarter : 2 * quarter],
        events[2 * quarter : 3 * quarter],
        events[3 * quarter :],
    )
    with kafka_broker.KafkaBroker(tmp_path / "kafka") as kafka:
        topic = kafka.create_topic("orders", partitions=2)
        produce_orders(kafka.bootstrap, topic, before)
        path = write_config(
            tmp_path / "configs",
            order_config(
                tmp_path,
                "orders",
                kafka.bootstrap,
                topic,
                source={"max_offsets_per_trigger": 1_000, "options": {"fetchOffset.timeoutMs": 5_000}},
                stream={"trigger_interval": "2 seconds"},
            ),
        )
        table_path = str(tmp_path / "tables" / "orders")
        job = JobOutput(streamer_process(["run", str(path)]))
        try:
            job.wait_for(lambda: has_read(table_path, topic, len(before)), "first records in the table")

            kafka.stop()  # down: connections refused
            producer = threading.Thread(target=produce_orders, args=(kafka.bootstrap, topic, while_down))
            producer.start()  # its records wait in the producer until the broker is back
            time.sleep(OUTAGE_SECONDS)
            kafka.start()  # the same port and data
            producer.join()
            produce_orders(kafka.bootstrap, topic, after)
            job.wait_for(
                lambda: has_read(table_path, topic, len(before) + len(while_down) + len(after)),
                "the records of and after the restart",
            )

            kafka.hang()  # connections open, nothing answered
            producer = threading.Thread(target=produce_orders, args=(kafka.bootstrap, topic, hung))
            producer.start()
            time.sleep(OUTAGE_SECONDS)
            kafka.wake()
            producer.join()
            job.wait_for(lambda: has_read(table_path, topic, len(events)), "the records of the hang")

            assert job.proc.poll() is None
            job.proc.send_signal(signal.SIGTERM)
            assert job.finish() == 0, job.text[-5000:]
        finally:
            if job.proc.poll() is None:
                job.proc.kill()
                job.finish()

        out = job.text
        assert out.count("orders: streaming orders ->") == 1  # one query from start to end
        assert re.search(rf"Kafka .+ to {re.escape(kafka.bootstrap)} failed \(attempt 1, .+\); retrying in .+: \S", out)
        assert "rdkafka#" not in out  # librdkafka's own lines go to the DEBUG log
        batch_records = [int(n.replace(",", "")) for n in re.findall(r"orders batch \d+: ([\d,]+) records", out)]
        assert sum(batch_records) == len(events)  # every record read once
        assert_table_matches(table_path, events)
        assert committed_offsets(table_path, topic) == end_offsets(kafka.bootstrap, topic)


def test_a_broker_down_for_ten_seconds_gives_a_short_output_one_line_per_retry_naming_it(tmp_path):
    """`streamer run --once` as a user runs it, against a port nothing listens on: librdkafka's
    "Connection refused" for each reconnect stays out of the console, the job says once per retry
    which broker failed and why, then ends with an error naming the broker."""
    bootstrap = f"127.0.0.1:{kafka_broker.free_port()}"  # nothing listens there
    path = write_config(
        tmp_path / "configs",
        order_config(tmp_path, "orders", bootstrap, "orders", source={"max_broker_outage_seconds": 10}),
    )

    started = time.monotonic()
    code, out = run_streamer(["run", str(path), "--once"], timeout=240)

    assert code == 1 and time.monotonic() - started < 180, out
    lines = out.splitlines()
    assert len(lines) < 20, out
    assert "rdkafka#" not in out and "Traceback" not in out, out
    retries = [
        line
        for line in lines
        if re.search(
            rf"WARNING streamer\.kafka\.admin: Kafka .+ to {re.escape(bootstrap)} "
            r"failed \(attempt \d+, .+\); retrying in .+: .*Connection refused",
            line,
        )
    ]
    assert len(retries) >= 1, out
    error = f"KafkaSourceTimeoutError: Kafka brokers {bootstrap} did not answer"
    assert re.search(rf"ERROR streamer\.app: orders: stopped with an error: {error}.*Connection refused", out), out
    assert re.search(
        rf"^orders: 0 batches, 0 records, 0 bad committed; last commit -: FAILED: {error}", out, re.MULTILINE
    ), out
    assert "maxBrokerOutageMs=10000" in out and "source.max_broker_outage_seconds" in out
    assert (
        not MorTable.exists(str(tmp_path / "tables" / "orders"))
        or MorTable.load(str(tmp_path / "tables" / "orders")).timeline().completed_writes() == []
    )


def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed after its deletion"
        time.sleep(0.2)
    kafka_broker.create_topic(bootstrap, topic, partitions=partitions)


def test_a_recreated_topic_stops_the_job_naming_the_offsets_unless_data_loss_is_tolerated(
    spark, kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = settled_change_events(3_000, seed=73)
    old, new = events[:2_000], events[2_000:]
    produce_orders(kafka_bootstrap, topic, old)
    mapping = order_config(tmp_path, "orders", kafka_bootstrap, topic)
    path = write_config(tmp_path / "configs", mapping)
    table_path = mapping["table"]["path"]
    assert app.run([config_from_mapping(mapping)], spark, once=True).tables[0].error is None
    wanted = committed_offsets(table_path, topic)

    _recreate(kafka_bootstrap, topic, partitions=2)
    produce_orders(kafka_bootstrap, topic, new)
    held = end_offsets(kafka_bootstrap, topic)
    assert all(held[p] < wanted[p] for p in held)  # the new topic's offsets start again at 0
    code, out = run_streamer(["run", str(path), "--once"])

    assert code == 1, out
    (summary,) = [line for line in out.splitlines() if line.startswith("orders: 0 batches")]
    assert "FAILED: KafkaDataLossError: " in summary
    for p in (0, 1):
        assert (
            f"topic '{topic}' partition {p}: the offset to read next is {wanted[p]} but the broker holds "
            f"offsets 0 to {held[p] - 1}"
        ) in summary
    assert "source.fail_on_data_loss" in summary
    assert committed_offsets(table_path, topic) == wanted
    assert_table_matches(table_path, old)

    mapping["source"]["fail_on_data_loss"] = False
    (outcome,) = app.run([config_from_mapping(mapping)], spark, once=True).tables

    assert outcome.error is None and outcome.records == len(new)
    assert_table_matches(table_path, old + new)
    assert committed_offsets(table_path, topic) == held
    jumped = MorTable.load(table_path).last_commit_metadata().extra_metadata[DATA_LOSS_KEY]
    assert json.loads(jumped) == [{"topic": topic, "partition": p, "from": wanted[p], "to": 0} for p in (0, 1)]
