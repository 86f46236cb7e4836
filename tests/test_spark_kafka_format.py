"""`source.format: kafka`: the job on Spark's own Kafka connector (spark-sql-kafka-0-10, fetched
with `harness.spark`) instead of our `kafka-arrow` source. The sink must not care which: exactly
once, resumed from the table's offsets when the Spark checkpoint is gone, bad records skipped or
quarantined. The module's Spark session is launched with the connector's jars."""

from __future__ import annotations

import shutil

import pytest

import kafka_broker
from harness.spark import kafka_connector
from ingestion import (
    assert_table_matches,
    committed_offsets,
    end_offsets,
    order_config,
    produce_orders,
    settled_change_events,
)
from streamer import app
from streamer.config import JobConfig
from streamer.demo import MALFORMED, as_kafka_records, change_events
from table.mor_table import MorTable

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def spark_jars() -> tuple[str, ...]:
    return tuple(str(jar) for jar in kafka_connector().jars)


def spark_kafka_config(tmp_path, name: str, bootstrap: str, topic: str, **overrides) -> dict:
    mapping = order_config(tmp_path, name, bootstrap, topic, **overrides)
    mapping["source"]["format"] = "kafka"
    return mapping


def test_the_spark_kafka_format_ingests_exactly_once_and_resumes_from_the_table_without_its_checkpoint(
        spark, kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=3, prefix="orders")
    events = settled_change_events(3_000, seed=91)
    first, second = events[:2_000], events[2_000:]
    produce_orders(kafka_bootstrap, topic, first)
    mapping = spark_kafka_config(tmp_path, "orders", kafka_bootstrap, topic, source={"max_offsets_per_trigger": 700})
    table_path = mapping["table"]["path"]

    (outcome,) = app.run([JobConfig.from_mapping(mapping)], spark, once=True).tables

    assert outcome.error is None and outcome.batches >= 3 and outcome.records == len(first)
    assert_table_matches(table_path, first)
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)

    shutil.rmtree(mapping["stream"]["checkpoint_location"])
    produce_orders(kafka_bootstrap, topic, second)
    (outcome,) = app.run([JobConfig.from_mapping(mapping)], spark, once=True).tables

    assert outcome.error is None and outcome.records == len(second)  # from the table's offsets on
    assert_table_matches(table_path, events)
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)


def test_the_spark_kafka_format_skips_or_quarantines_bad_records_and_keeps_every_good_one(
        spark, kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(1_000, seed=93)
    records = as_kafka_records(events)
    records[500:500] = [(b"bad", raw, None) for raw in MALFORMED]
    placed = kafka_broker.produce(kafka_bootstrap, topic, records)
    bad_at = {placed[500 + i]: raw for i, raw in enumerate(MALFORMED)}
    skipping = spark_kafka_config(tmp_path, "skipping", kafka_bootstrap, topic, decode={"on_error": "skip"})
    quarantining = spark_kafka_config(tmp_path, "quarantining", kafka_bootstrap, topic,
                                      decode={"on_error": "quarantine"})

    result = app.run([JobConfig.from_mapping(skipping), JobConfig.from_mapping(quarantining)], spark, once=True)

    ends = end_offsets(kafka_bootstrap, topic)
    for mapping, outcome in zip((skipping, quarantining), result.tables):
        assert outcome.error is None
        assert (outcome.records, outcome.bad) == (len(records), len(MALFORMED))
        assert_table_matches(mapping["table"]["path"], events)
        assert committed_offsets(mapping["table"]["path"], topic) == ends
    assert not MorTable.exists(skipping["table"]["path"] + "_quarantine")
    quarantined = MorTable.load(quarantining["table"]["path"] + "_quarantine").snapshot(
        columns=["partition", "offset", "value"]).to_pylist()
    assert {(r["partition"], r["offset"]): r["value"] for r in quarantined} == bad_at
