"""`source.format: kafka`: the job on Spark's own Kafka connector (spark-sql-kafka-0-10, fetched
with `harness.spark`) instead of our `kafka-arrow` source. The sink must not care which: exactly
once, resumed from the table's offsets when the Spark checkpoint is gone, bad records skipped or
quarantined. The module's Spark session is launched with the connector's jars. And `streamer run`,
as a user runs it, has Spark fetch the connector itself, or says how to provide it."""

from __future__ import annotations

import re
import shutil

import pytest

from harness.spark import kafka_connector
from streamer import app
from streamer.config.loading import config_from_mapping
from streamer.sandbox.change_events import MALFORMED, as_kafka_records, change_events
from table.mor_table import MorTable
from tests.support import kafka_broker
from tests.support.ingestion import (
    assert_table_matches,
    committed_offsets,
    end_offsets,
    order_config,
    produce_orders,
    run_streamer,
    settled_change_events,
    write_config,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def spark_jars() -> tuple[str, ...]:
    return tuple(str(jar) for jar in kafka_connector().jars)


def spark_kafka_config(tmp_path, name: str, bootstrap: str, topic: str, **overrides) -> dict:
    mapping = order_config(tmp_path, name, bootstrap, topic, **overrides)
    mapping["source"]["format"] = "kafka"
    return mapping


def test_the_spark_kafka_format_ingests_exactly_once_and_resumes_from_the_table_without_its_checkpoint(
    spark, kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=3, prefix="orders")
    events = settled_change_events(3_000, seed=91)
    first, second = events[:2_000], events[2_000:]
    produce_orders(kafka_bootstrap, topic, first)
    mapping = spark_kafka_config(tmp_path, "orders", kafka_bootstrap, topic, source={"max_offsets_per_trigger": 700})
    table_path = mapping["table"]["path"]

    (outcome,) = app.run([config_from_mapping(mapping)], spark, once=True).tables

    assert outcome.error is None and outcome.batches >= 3 and outcome.records == len(first)
    assert_table_matches(table_path, first)
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)

    shutil.rmtree(mapping["stream"]["checkpoint_location"])
    produce_orders(kafka_bootstrap, topic, second)
    (outcome,) = app.run([config_from_mapping(mapping)], spark, once=True).tables

    assert outcome.error is None and outcome.records == len(second)  # from the table's offsets on
    assert_table_matches(table_path, events)
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)


def test_the_spark_kafka_format_skips_or_quarantines_bad_records_and_keeps_every_good_one(
    spark, kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(1_000, seed=93)
    records = as_kafka_records(events)
    records[500:500] = [(b"bad", raw, None) for raw in MALFORMED]
    placed = kafka_broker.produce(kafka_bootstrap, topic, records)
    bad_at = {placed[500 + i]: raw for i, raw in enumerate(MALFORMED)}
    skipping = spark_kafka_config(tmp_path, "skipping", kafka_bootstrap, topic, decode={"on_error": "skip"})
    quarantining = spark_kafka_config(
        tmp_path, "quarantining", kafka_bootstrap, topic, decode={"on_error": "quarantine"}
    )

    result = app.run([config_from_mapping(skipping), config_from_mapping(quarantining)], spark, once=True)

    ends = end_offsets(kafka_bootstrap, topic)
    for mapping, outcome in zip((skipping, quarantining), result.tables):
        assert outcome.error is None
        assert (outcome.records, outcome.bad) == (len(records), len(MALFORMED))
        assert_table_matches(mapping["table"]["path"], events)
        assert committed_offsets(mapping["table"]["path"], topic) == ends
    assert not MorTable.exists(skipping["table"]["path"] + "_quarantine")
    quarantined = (
        MorTable.load(quarantining["table"]["path"] + "_quarantine")
        .snapshot(columns=["partition", "offset", "value"])
        .to_pylist()
    )
    assert {(r["partition"], r["offset"]): r["value"] for r in quarantined} == bad_at


# -- `streamer run` fetches the connector itself -------------------------------------------------
def test_streamer_run_fetches_the_connector_itself_for_a_kafka_format_table(kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = settled_change_events(1_000, seed=95)
    produce_orders(kafka_bootstrap, topic, events)
    mapping = spark_kafka_config(tmp_path, "orders", kafka_bootstrap, topic)
    path = write_config(tmp_path / "configs", mapping)

    code, out = run_streamer(["run", str(path), "--once"], timeout=600)

    assert code == 0, out[-5000:]
    assert "spark-sql-kafka-0-10_2.13" in out  # Spark's own report of what it fetched
    assert re.search(rf"^orders: \d+ batches, {len(events):,} records, 0 bad", out, re.MULTILINE), out[-3000:]
    assert_table_matches(mapping["table"]["path"], events)
    assert committed_offsets(mapping["table"]["path"], topic) == end_offsets(kafka_bootstrap, topic)


def test_streamer_run_says_what_to_do_when_the_connector_cannot_be_fetched(tmp_path):
    nowhere = f"http://127.0.0.1:{kafka_broker.free_port()}/maven2"  # nothing listens there
    settings = tmp_path / "ivysettings.xml"  # the only repository Spark may fetch from
    settings.write_text(
        f'<ivysettings><settings defaultResolver="nowhere"/><resolvers>'
        f'<ibiblio name="nowhere" m2compatible="true" root="{nowhere}"/></resolvers></ivysettings>'
    )
    path = write_config(tmp_path / "configs", spark_kafka_config(tmp_path, "orders", "127.0.0.1:9", "orders"))

    code, out = run_streamer(
        [
            "run",
            str(path),
            "--once",
            "--conf",
            f"spark.jars.ivySettings={settings}",
            "--conf",
            f"spark.jars.ivy={tmp_path / 'ivy'}",
        ],
        timeout=300,
    )

    assert code == 2, out[-3000:]
    error = next(line for line in out.splitlines() if line.startswith("error: "))
    assert "source.format: kafka needs Spark's Kafka connector" in error
    assert re.search(r"org\.apache\.spark:spark-sql-kafka-0-10_2\.13:\d+\.\d+\.\d+", error)
    assert "spark.jars.repositories" in error and "spark.jars=" in error and "kafka-arrow" in error
