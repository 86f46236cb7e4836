"""The ingestion job end to end: a real broker, real Spark, real tables, checked against an oracle
and hudi-rs.

Most scenarios run the application in this process (`streamer.app.run`, what `streamer run`
calls); the crash, signal and spark-submit scenarios run `streamer` as its own process.
"""

from __future__ import annotations

import json
import shutil
import signal
import time

import pytest
from confluent_kafka import Producer

from streamer import app
from streamer.config.loading import config_from_mapping, load_configs
from streamer.config.model import JobConfig
from streamer.sandbox.change_events import change_events
from table.mor_table import MorTable
from table.timeline.commit_metadata import CommitMetadata
from tests.support import kafka_broker
from tests.support.ingestion import (
    assert_table_matches,
    committed_offsets,
    end_offsets,
    expected_rows,
    order_config,
    produce_orders,
    run_streamer,
    streamer_process,
    write_config,
)

pytestmark = pytest.mark.e2e


def run_once(spark, configs: list[JobConfig]) -> app.RunResult:
    return app.run(configs, spark, once=True)


def test_fifty_thousand_change_events_end_equal_to_the_oracle(spark, kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=3, prefix="orders")
    events = change_events(50_000, seed=7)
    produce_orders(kafka_bootstrap, topic, events)
    config = config_from_mapping(
        order_config(tmp_path, "orders", kafka_bootstrap, topic, source={"max_offsets_per_trigger": 12_000})
    )

    result = run_once(spark, [config])

    (outcome,) = result.tables
    assert outcome.error is None
    assert outcome.records == 50_000 and outcome.batches >= 5
    assert_table_matches(config.table.path, events)
    assert committed_offsets(config.table.path, topic) == end_offsets(kafka_bootstrap, topic)
    deltacommits = MorTable.load(config.table.path).timeline().completed("deltacommit")
    assert len(deltacommits) == outcome.batches


def test_a_backlog_into_an_empty_table_is_loaded_as_base_files_by_the_first_batch_then_streamed(
    spark, kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(6_000, seed=13)
    offsets = produce_orders(kafka_bootstrap, topic, events[:5_000])
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 700, "initial_load_max_records": 4_000},
        )
    )

    (outcome,) = run_once(spark, [config]).tables

    assert outcome.error is None and outcome.records == 5_000
    table = MorTable.load(config.table.path)
    first, *rest = table.timeline().completed("deltacommit")
    load = CommitMetadata.from_json(table.timeline().read_content(first))
    assert {s.path.rsplit(".", 1)[-1] for s in load.write_stats()} == {"parquet"}  # base files only
    checkpoint = json.loads(load.extra_metadata["mor.streamer.checkpoint"])
    assert checkpoint["batchId"] == 0
    loaded_up_to = {int(p): o for p, o in checkpoint["offsets"][topic].items()}
    loaded = [e for e, (p, o) in zip(events, offsets) if o < loaded_up_to[p]]
    assert 3_990 <= len(loaded) <= 4_000  # the limit, shared among partitions rounding down
    assert sum(s.num_writes for s in load.write_stats()) == len(expected_rows(loaded))
    assert len(rest) == 2  # the other 1,000 records, 700 at a time
    assert_table_matches(config.table.path, events[:5_000])

    produce_orders(kafka_bootstrap, topic, events[5_000:])  # the table has commits now: no second load
    (outcome,) = run_once(spark, [config]).tables
    assert outcome.records == 1_000 and outcome.batches == 2
    assert_table_matches(config.table.path, events)
    assert committed_offsets(config.table.path, topic) == end_offsets(kafka_bootstrap, topic)


def test_restart_without_the_spark_checkpoint_resumes_from_the_tables_offsets(
    spark, kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(8_000, seed=11)
    first, second = events[:5_000], events[5_000:]
    produce_orders(kafka_bootstrap, topic, first)
    config = config_from_mapping(order_config(tmp_path, "orders", kafka_bootstrap, topic))
    assert run_once(spark, [config]).tables[0].records == 5_000

    shutil.rmtree(config.checkpoint_location)
    produce_orders(kafka_bootstrap, topic, second)
    (outcome,) = run_once(spark, [config]).tables

    assert outcome.error is None
    assert outcome.records == 3_000  # only what came after the table's last commit
    assert_table_matches(config.table.path, events)
    assert committed_offsets(config.table.path, topic) == end_offsets(kafka_bootstrap, topic)


def test_two_tables_from_two_topics_run_in_one_application(spark, kafka_bootstrap, kafka_topic, tmp_path):
    topics = [kafka_topic(partitions=2, prefix=name) for name in ("eu", "us")]
    streams = [change_events(4_000, seed=21), change_events(6_000, seed=22)]
    for topic, events in zip(topics, streams):
        produce_orders(kafka_bootstrap, topic, events)
    for name, topic in zip(("eu_orders", "us_orders"), topics):
        write_config(tmp_path / "configs", order_config(tmp_path, name, kafka_bootstrap, topic))
    configs = load_configs(tmp_path / "configs")

    result = run_once(spark, configs)

    assert [t.error for t in result.tables] == [None, None]
    assert [t.records for t in result.tables] == [4_000, 6_000]
    for config, events in zip(configs, streams):
        assert_table_matches(config.table.path, events)


def test_one_failing_table_does_not_stop_the_other(spark, kafka_bootstrap, kafka_topic, tmp_path):
    good_topic, bad_topic = kafka_topic(prefix="good"), kafka_topic(prefix="bad")
    events = change_events(2_000, seed=31)
    produce_orders(kafka_bootstrap, good_topic, events)
    kafka_broker.produce(kafka_bootstrap, bad_topic, [(b"k", b"not json at all", None)])
    configs = [
        config_from_mapping(order_config(tmp_path, "good", kafka_bootstrap, good_topic)),
        config_from_mapping(order_config(tmp_path, "bad", kafka_bootstrap, bad_topic)),
    ]

    result = run_once(spark, configs)

    good, bad = result.tables
    assert good.error is None and bad.error is not None
    assert result.exit_code == 1
    assert_table_matches(configs[0].table.path, events)


# ---- malformed records -------------------------------------------------------------------------

MALFORMED = {
    b'{"order_id": "ord-x1", "region": "emea", "amount": 1.5, "updated_at": 1': "invalid JSON",
    b'{"order_id": "ord-x2", "region": "emea", "amount": "lots", "updated_at": 2, "deleted": false}': "amount",
    b'{"region": "emea", "amount": 3.5, "updated_at": 3, "deleted": false}': "order_id",
    b'{"order_id": null, "region": "emea", "amount": 4.5, "updated_at": 4, "deleted": false}': "order_id",
    b"\x00\x17\x2a garbage \xff\xfe": "UTF-8",
}


def _stream_with_bad_records(kafka_bootstrap, kafka_topic):
    topic = kafka_topic(partitions=1, prefix="mixed")
    events = change_events(3_000, seed=41)
    records = [(e["order_id"].encode(), json.dumps(e).encode(), None) for e in events]
    for i, raw in enumerate(MALFORMED):
        records.insert(500 * (i + 1), (b"bad", raw, None))
    kafka_broker.produce(kafka_bootstrap, topic, records)
    bad_offsets = sorted(i for i, r in enumerate(records) if r[0] == b"bad")
    return topic, events, bad_offsets


@pytest.mark.parametrize("driver_write_max_records", [500_000, 0], ids=["by-the-driver", "by-sparks-tasks"])
def test_malformed_records_go_to_quarantine_with_their_reason_and_good_ones_to_the_table(
    spark, kafka_bootstrap, kafka_topic, tmp_path, caplog, driver_write_max_records
):
    topic, events, bad_offsets = _stream_with_bad_records(kafka_bootstrap, kafka_topic)
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            decode={"on_error": "quarantine"},
            stream={"driver_write_max_records": driver_write_max_records},
        )
    )

    with caplog.at_level("INFO", logger="streamer.sink"):
        (outcome,) = run_once(spark, [config]).tables

    batch_lines = [r.getMessage() for r in caplog.records if " batch " in r.getMessage()]
    assert batch_lines and all(("by the driver" in line) == (driver_write_max_records > 0) for line in batch_lines)
    assert outcome.error is None and outcome.bad == len(MALFORMED)
    assert_table_matches(config.table.path, events)
    quarantined = MorTable.load(config.table.quarantine_location).snapshot().sort_by("offset").to_pylist()
    assert [r["offset"] for r in quarantined] == bad_offsets
    assert [r["value"] for r in quarantined] == list(MALFORMED)
    for row, expected_words in zip(quarantined, MALFORMED.values()):
        assert row["topic"] == topic and row["partition"] == 0
        assert expected_words in row["reason"]
    assert committed_offsets(config.table.path, topic) == end_offsets(kafka_bootstrap, topic)


ORDER_AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "order_id", "type": "string"},
            {"name": "customer", "type": ["null", "string"]},
            {"name": "region", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "status", "type": "string"},
            {"name": "note", "type": ["null", "string"]},
            {"name": "updated_at", "type": "long"},
            {"name": "deleted", "type": "boolean"},
        ],
    }
)


def test_confluent_avro_records_with_an_unknown_schema_id_go_to_quarantine(
    spark, kafka_bootstrap, kafka_topic, schema_registry_url, tmp_path
):
    import io

    import fastavro

    from streamer.decode.registry import SchemaRegistryClient, confluent_frame

    topic = kafka_topic(partitions=2, prefix="avro-orders")
    schema_id = SchemaRegistryClient(schema_registry_url).register(f"{topic}-value", ORDER_AVRO_SCHEMA)
    parsed = fastavro.parse_schema(json.loads(ORDER_AVRO_SCHEMA))

    def frame(event: dict, sid: int) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, event)
        return confluent_frame(sid, buf.getvalue())

    events = change_events(2_000, seed=45)
    records = [(e["order_id"].encode(), frame(e, schema_id), None) for e in events]
    records.insert(700, (b"bad", frame(events[0], 987_654), None))
    kafka_broker.produce(kafka_bootstrap, topic, records)
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            decode={
                "value": {"format": "confluent-avro"},
                "schema_registry": {"url": schema_registry_url},
                "on_error": "quarantine",
            },
        )
    )

    (outcome,) = run_once(spark, [config]).tables

    assert outcome.error is None and outcome.bad == 1
    assert_table_matches(config.table.path, events)
    (bad,) = MorTable.load(config.table.quarantine_location).snapshot().to_pylist()
    assert "unknown schema id 987654" in bad["reason"] and bad["key"] == b"bad"


def test_malformed_records_are_dropped_and_counted_under_skip(spark, kafka_bootstrap, kafka_topic, tmp_path):
    topic, events, _ = _stream_with_bad_records(kafka_bootstrap, kafka_topic)
    config = config_from_mapping(order_config(tmp_path, "orders", kafka_bootstrap, topic, decode={"on_error": "skip"}))

    (outcome,) = run_once(spark, [config]).tables

    assert outcome.error is None and outcome.bad == len(MALFORMED)
    assert_table_matches(config.table.path, events)
    assert not MorTable.exists(config.table.quarantine_location)
    stats = MorTable.load(config.table.path).last_commit_metadata().extra_metadata["mor.streamer.batch"]
    assert json.loads(stats)["badPolicy"] == "skip"


def test_a_malformed_record_stops_the_job_under_fail_and_names_where_it_is(
    spark, kafka_bootstrap, kafka_topic, tmp_path
):
    topic, _, bad_offsets = _stream_with_bad_records(kafka_bootstrap, kafka_topic)
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 100_000},
            decode={"on_error": "fail"},
        )
    )

    (outcome,) = run_once(spark, [config]).tables

    assert outcome.error is not None and "invalid JSON" in outcome.error
    assert all(f"{topic}[0]@{offset}: " in outcome.error for offset in bad_offsets)  # every one named
    assert (outcome.failed_batch, outcome.failed_records, outcome.failed_bad) == (
        "batch 0",
        3_000 + len(MALFORMED),
        len(MALFORMED),
    )
    assert outcome.batches == 0 and outcome.last_instant is None
    table = MorTable.load(config.table.path)
    assert table.timeline().completed_writes() == []  # the batch wrote nothing


def test_spark_kafka_format_without_its_connector_fails_at_start_with_what_to_add(spark, kafka_bootstrap, tmp_path):
    from streamer.errors import StartupError

    config = config_from_mapping(
        order_config(tmp_path, "orders", kafka_bootstrap, "orders", source={"format": "kafka"})
    )
    with pytest.raises(StartupError, match="spark-sql-kafka-0-10"):
        run_once(spark, [config])


# ---- entry points, crashes and signals ---------------------------------------------------------


def test_a_typo_in_a_config_key_fails_at_start_naming_the_key(tmp_path, kafka_bootstrap):
    config = order_config(tmp_path, "orders", kafka_bootstrap, "orders")
    config["table"]["ordering_feild"] = config["table"].pop("ordering_field")
    path = write_config(tmp_path / "configs", config)

    code, out = run_streamer(["run", str(path), "--once"], timeout=60)

    assert code == 2
    assert "table.ordering_feild" in out and "ordering_field" in out


def test_a_wrong_type_in_a_config_fails_at_start_naming_the_key(tmp_path, kafka_bootstrap):
    config = order_config(tmp_path, "orders", kafka_bootstrap, "orders", source={"max_offsets_per_trigger": "ten"})
    path = write_config(tmp_path / "configs", config)

    code, out = run_streamer(["run", str(path), "--once"], timeout=60)

    assert code == 2
    assert "source.max_offsets_per_trigger" in out


def test_sigterm_stops_a_continuous_job_cleanly_and_the_next_run_finishes(kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(6_000, seed=61)
    produce_orders(kafka_bootstrap, topic, events)
    path = write_config(
        tmp_path / "configs",
        order_config(tmp_path, "orders", kafka_bootstrap, topic, source={"max_offsets_per_trigger": 1_000}),
    )
    table_path = str(tmp_path / "tables" / "orders")

    proc = streamer_process(["run", str(path)])
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not _has_commit(table_path):
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)

    assert proc.returncode == 0, out
    timeline = MorTable.load(table_path).timeline()
    assert timeline.pending("deltacommit") == []
    code, out = run_streamer(["run", str(path), "--once"])
    assert code == 0, out
    assert_table_matches(table_path, events)


def _has_commit(table_path: str) -> bool:
    return MorTable.exists(table_path) and bool(MorTable.load(table_path).timeline().completed_writes())


def test_spark_submit_runs_the_application_file_with_the_same_arguments(kafka_bootstrap, kafka_topic, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pyspark

    import streamer.spark_app
    from harness.class_data import TEST_JAVA_OPTIONS
    from tests.support.ingestion import REPO

    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(3_000, seed=71)
    produce_orders(kafka_bootstrap, topic, events)
    write_config(tmp_path / "configs", order_config(tmp_path, "orders", kafka_bootstrap, topic))
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    done = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[2]",
            "--conf",
            f"spark.driver.extraJavaOptions={TEST_JAVA_OPTIONS}",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            streamer.spark_app.__file__,
            str(tmp_path / "configs"),
            "--once",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert_table_matches(str(tmp_path / "tables" / "orders"), events)


def test_a_table_configured_to_stop_the_application_stops_every_query_when_it_fails(
    spark, kafka_bootstrap, kafka_topic, tmp_path
):
    good_topic, bad_topic = kafka_topic(prefix="good"), kafka_topic(prefix="bad")
    produce_orders(kafka_bootstrap, good_topic, change_events(500, seed=32))
    kafka_broker.produce(kafka_bootstrap, bad_topic, [(b"k", b"not json at all", None)])
    configs = [
        config_from_mapping(order_config(tmp_path, "good", kafka_bootstrap, good_topic)),
        config_from_mapping(
            order_config(tmp_path, "bad", kafka_bootstrap, bad_topic, stream={"on_failure": "stop_application"})
        ),
    ]

    result = app.run(configs, spark, once=False)  # continuous: only the failure ends it

    good, bad = result.tables
    assert "BadRecordError" in bad.error and good.error is None
    assert not any(q.isActive for q in spark.streams.active)


def test_secrets_from_the_environment_reach_neither_logs_nor_table_files(kafka_bootstrap, kafka_topic, tmp_path):
    secret = "hunter2-do-not-print"
    topic = kafka_topic(prefix="orders")
    produce_orders(kafka_bootstrap, topic, change_events(500, seed=81))
    config = order_config(
        tmp_path,
        "orders",
        kafka_bootstrap,
        topic,
        source={"options": {"kafka.sasl.password": "${ORDERS_KAFKA_PASSWORD}"}},
    )
    path = write_config(tmp_path / "configs", config)

    code, out = run_streamer(["run", str(path), "--once"], env={"ORDERS_KAFKA_PASSWORD": secret})

    assert code == 0, out
    assert secret not in out
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".yaml"]
    assert any(p.name.endswith(".deltacommit") for p in written)
    leaking = [str(p) for p in written if secret.encode() in p.read_bytes()]
    assert leaking == []


def test_status_shows_each_tables_lag_and_last_error(spark, kafka_bootstrap, kafka_topic, tmp_path):
    good_topic, bad_topic = kafka_topic(partitions=2, prefix="good"), kafka_topic(prefix="bad")
    events = change_events(1_000, seed=91)
    produce_orders(kafka_bootstrap, good_topic, events[:700])
    kafka_broker.produce(kafka_bootstrap, bad_topic, [(b"k", b"not json at all", None)])
    write_config(tmp_path / "configs", order_config(tmp_path, "good", kafka_bootstrap, good_topic))
    write_config(tmp_path / "configs", order_config(tmp_path, "bad", kafka_bootstrap, bad_topic))
    run_once(spark, load_configs(tmp_path / "configs"))
    produce_orders(kafka_bootstrap, good_topic, events[700:])

    code, out = run_streamer(["status", str(tmp_path / "configs"), "--json"], timeout=60)

    assert code == 3, out  # a table has a problem: the bad one stopped with an error
    bad, good = json.loads(out)  # configs load sorted by file name
    assert good["name"] == "good" and good["lag"] == {good_topic: 300} and good["last_error"] is None
    assert good["problem"] is None
    assert bad["name"] == "bad" and "BadRecordError" in bad["last_error"]["message"] and bad["problem"]
    code, out = run_streamer(["status", str(tmp_path / "configs")], timeout=60)
    assert code == 3 and f"{good_topic} 300 behind" in out


def test_offsets_reach_the_consumer_group_and_each_batch_line_shows_the_lag(
    spark, kafka_bootstrap, kafka_topic, tmp_path, caplog
):
    from confluent_kafka import Consumer, TopicPartition

    topic = kafka_topic(partitions=2, prefix="orders")
    produce_orders(kafka_bootstrap, topic, change_events(3_000, seed=93))
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 1_000, "commit_offsets_to_group": "orders-lag-monitor"},
        )
    )

    with caplog.at_level("INFO", logger="streamer.sink"):
        (outcome,) = run_once(spark, [config]).tables

    assert outcome.error is None
    lines = [r.getMessage() for r in caplog.records if " batch " in r.getMessage()]
    assert len(lines) == outcome.batches >= 3
    first_lag = int(lines[0].rsplit(f"lag {topic} ", 1)[1].replace(",", ""))
    assert 1_900 <= first_lag <= 2_100 and lines[-1].endswith(f"lag {topic} 0")
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "orders-lag-monitor"})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == end_offsets(kafka_bootstrap, topic)


def test_batches_are_written_by_the_driver_up_to_its_limit_and_by_spark_past_it(
    spark, kafka_bootstrap, kafka_topic, tmp_path, caplog
):
    """Batches of at most `stream.driver_write_max_records` records are written by the driver:
    the query's first too, whose ranges the source's plan says (Spark's offset log cannot). A
    batch past the limit goes through Spark's tasks. The table is the same either way."""
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(4_000, seed=95)
    produce_orders(kafka_bootstrap, topic, events[:3_000])

    def run(limit: int) -> list[str]:
        config = config_from_mapping(
            order_config(
                tmp_path,
                "orders",
                kafka_bootstrap,
                topic,
                source={"max_offsets_per_trigger": 1_000, "initial_load_max_records": 0},
                stream={"driver_write_max_records": limit},
            )
        )
        caplog.clear()
        with caplog.at_level("INFO", logger="streamer.sink"):
            (outcome,) = run_once(spark, [config]).tables
        assert outcome.error is None
        return [r.getMessage() for r in caplog.records if " batch " in r.getMessage()]

    first = run(1_000)
    assert [line.split(":")[0].rsplit(" ", 1)[1] for line in first] == ["0", "1", "2"]
    assert ["by the driver" in line for line in first] == [True, True, True]
    produce_orders(kafka_bootstrap, topic, events[3_000:])
    (past_the_limit,) = run(999)
    assert "by the driver" not in past_the_limit
    path = str(tmp_path / "tables" / "orders")
    assert_table_matches(path, events)
    assert committed_offsets(path, topic) == end_offsets(kafka_bootstrap, topic)


def kafka_clients_made(bootstrap: str) -> int:
    """How many Kafka clients this process has made, this count's own included: librdkafka names
    each client with the next number of one counter for the process ("rdkafka#producer-7")."""
    names: list[str] = []
    probe = Producer(
        {
            "bootstrap.servers": bootstrap,
            "statistics.interval.ms": 10,
            "stats_cb": lambda stats: names.append(json.loads(stats)["name"]),
        }
    )
    deadline = time.monotonic() + 10
    while not names and time.monotonic() < deadline:
        probe.poll(0.05)
    probe.flush(5)
    return int(names[0].rsplit("-", 1)[1])


def test_a_job_makes_its_kafka_clients_once_not_for_each_batch(spark, kafka_bootstrap, kafka_topic, tmp_path):
    """The lag after each batch and the commits to the consumer group go through the same two
    clients for the whole run."""
    topic = kafka_topic(partitions=2, prefix="orders")
    produce_orders(kafka_bootstrap, topic, change_events(3_000, seed=97))
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 500, "commit_offsets_to_group": "orders-lag-monitor"},
        )
    )

    before = kafka_clients_made(kafka_bootstrap)
    (outcome,) = run_once(spark, [config]).tables
    made = kafka_clients_made(kafka_bootstrap) - before - 1

    assert outcome.error is None and outcome.batches >= 6
    assert made == 2  # an admin client for end offsets and lag, a consumer for the group's commits


def test_a_streaming_query_listener_sees_each_batchs_record_counts(spark, kafka_bootstrap, kafka_topic, tmp_path):
    from pyspark.sql.streaming import StreamingQueryListener

    class Counts(StreamingQueryListener):
        def __init__(self):
            self.observed = []

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            metrics = event.progress.observedMetrics.get("orders")
            if metrics is not None:
                self.observed.append(metrics)

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(2_000, seed=95)
    records = [(e["order_id"].encode(), json.dumps(e).encode(), None) for e in events] + [(b"bad", b"{oops", None)]
    kafka_broker.produce(kafka_bootstrap, topic, records)
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 700},
            decode={"on_error": "skip"},
        )
    )
    listener = Counts()
    spark.streams.addListener(listener)
    try:
        (outcome,) = run_once(spark, [config]).tables
        deadline = time.monotonic() + 30
        while sum(m["records"] for m in listener.observed) < 2_001 and time.monotonic() < deadline:
            time.sleep(0.2)  # progress events reach listeners asynchronously
    finally:
        spark.streams.removeListener(listener)

    assert outcome.error is None
    assert len(listener.observed) == outcome.batches
    assert sum(m["records"] for m in listener.observed) == 2_001
    assert all(0 < m["records"] <= 700 for m in listener.observed)  # each batch's own, within the trigger's cap
