"""What Apache Kafka does under the real job: transactions (aborted records and the offsets their
markers take), retention deleting offsets the table still wanted, and partitions added to a topic
while a job reads it. A broker restart under a running job is in
tests/e2e/test_broker_faults.py.

Each test checks the table against an oracle of what was sent and the offsets the table committed
against Kafka's end offsets.
"""

from __future__ import annotations

import json
import re
import signal
import time
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
)

from streamer import app
from streamer.app import TableOutcome
from streamer.config.loading import config_from_mapping
from streamer.sandbox.change_events import as_kafka_records, change_events
from streamer.sink import DATA_LOSS_KEY
from table.mor_table import MorTable
from table.timeline.commit_metadata import CommitMetadata
from tests.support import kafka_broker
from tests.support.ingestion import (
    JobOutput,
    assert_table_matches,
    committed_offsets,
    end_offsets,
    expected_rows,
    has_read,
    hudi_rs_rows,
    order_config,
    our_rows,
    produce_orders,
    settled,
    settled_change_events,
    streamer_process,
    write_config,
)

pytestmark = pytest.mark.e2e


def run_once(spark, mapping: dict) -> TableOutcome:
    (outcome,) = app.run([config_from_mapping(mapping)], spark, once=True).tables
    return outcome


def commit_metadata(table_path: str) -> list[dict]:
    """The extra metadata of every completed write."""
    timeline = MorTable.load(table_path).timeline()
    return [CommitMetadata.from_json(timeline.read_content(i)).extra_metadata for i in timeline.completed_writes()]


# -- transactions -----------------------------------------------------------------------------------
def produce_transactions(bootstrap: str, topic: str, transactions: list[tuple[list[dict], bool]]) -> int:
    """Each `(events, commit)` is one transaction, committed or aborted after its records reached
    the log. Returns the number of transaction markers written (one per partition a transaction
    touched)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"orders-{topic}",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    partitions = len(producer.list_topics(topic, timeout=10).topics[topic].partitions)
    markers = 0
    for events, commit in transactions:
        producer.begin_transaction()
        for key, value, _ in as_kafka_records(events):
            producer.produce(topic, key=key, value=value)
        producer.flush(30)  # the records are in the log, as Kafka holds them until the outcome
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
        markers += len({kafka_broker.partition_for_key(e["order_id"].encode(), partitions) for e in events})
    return markers


@dataclass
class TransactionalRound:
    """What one `--once` run over a round of transactions read, and where the table and Kafka ended."""

    outcome: TableOutcome
    committed_events: list[dict]  # of this round's committed transactions
    expected_rows: dict  # of every committed transaction so far
    our_rows: dict
    hudi_rs_rows: dict
    log_records: int  # records and markers the producer put in the log so far
    committed_offsets: dict[int, int]
    end_offsets: dict[int, int]


@pytest.fixture(scope="module")
def transactional_rounds(spark, kafka_bootstrap, tmp_path_factory) -> tuple[str, list[TransactionalRound]]:
    """Two rounds of transactions into one topic, each followed by a run of a read_committed job:
    the first round ends with an aborted transaction, the second starts with one."""
    tmp = tmp_path_factory.mktemp("transactions")
    topic = kafka_broker.create_topic(kafka_bootstrap, f"orders-transactions-{tmp.name}", partitions=2)
    events = change_events(2_400, seed=81)
    chunks = [events[i : i + 300] for i in range(0, len(events), 300)]
    outcomes = ([True, False, True, False], [False, True, True, True])
    mapping = order_config(
        tmp, "orders", kafka_bootstrap, topic, source={"options": {"kafka.isolation.level": "read_committed"}}
    )
    rounds: list[TransactionalRound] = []
    table_events: list[dict] = []
    log_records = 0
    for n, commits in enumerate(outcomes):
        transactions = list(zip(chunks[4 * n : 4 * n + 4], commits))
        log_records += sum(len(chunk) for chunk, _ in transactions)
        log_records += produce_transactions(kafka_bootstrap, topic, transactions)
        committed = [e for chunk, commit in transactions if commit for e in chunk]
        table_events += committed
        outcome = run_once(spark, mapping)
        path = mapping["table"]["path"]
        rounds.append(
            TransactionalRound(
                outcome,
                committed,
                expected_rows(settled(table_events)),
                our_rows(path),
                hudi_rs_rows(path),
                log_records,
                committed_offsets(path, topic),
                end_offsets(kafka_bootstrap, topic),
            )
        )
    return mapping["table"]["path"], rounds


def test_read_committed_ingests_only_committed_transactions_and_marker_gaps_are_not_data_loss(transactional_rounds):
    table_path, rounds = transactional_rounds
    for r in rounds:
        assert r.outcome.error is None and r.outcome.records == len(r.committed_events)
        assert r.our_rows == r.expected_rows and r.hudi_rs_rows == r.expected_rows
        assert sum(r.end_offsets.values()) == r.log_records  # aborted records and markers are in the log
        assert all(r.committed_offsets[p] <= r.end_offsets[p] for p in r.end_offsets)
    assert not [m for m in commit_metadata(table_path) if DATA_LOSS_KEY in m]


def test_read_committed_offsets_reach_the_end_of_each_partition_past_markers_and_aborted_records(transactional_rounds):
    _, rounds = transactional_rounds
    assert [r.committed_offsets for r in rounds] == [r.end_offsets for r in rounds]


# -- retention ----------------------------------------------------------------------------------------
def set_topic_config(bootstrap: str, topic: str, name: str, value: str | None) -> None:
    """Set (or with None, remove) a topic-level config and wait until the broker applies it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(name, value or "", incremental_operation=op)]
    )
    admin.incremental_alter_configs([resource])[resource].result(30)
    deadline = time.monotonic() + 30
    while True:
        entry = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        current = next(iter(entry.values())).result(30)[name]
        if (current.value == value) if value is not None else current.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
            return
        assert time.monotonic() < deadline, f"{topic}: {name} is still {current.value}"
        time.sleep(0.2)


def earliest_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offset-check"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0] for p in partitions}
    finally:
        consumer.close()


def age_out_everything(bootstrap: str, topic: str) -> dict[int, int]:
    """Let retention delete every record the topic holds now; returns the new earliest offsets."""
    ends = end_offsets(bootstrap, topic)
    set_topic_config(bootstrap, topic, "retention.ms", "1")
    deadline = time.monotonic() + 60
    while (earliest := earliest_offsets(bootstrap, topic)) != ends:
        assert time.monotonic() < deadline, f"retention left {earliest} of {ends}"
        time.sleep(0.5)
    set_topic_config(bootstrap, topic, "retention.ms", None)
    return earliest


def test_offsets_deleted_by_retention_stop_the_job_naming_them_unless_data_loss_is_tolerated(
    spark, kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=2, prefix="orders", config={"segment.ms": "100"})
    events = settled_change_events(3_000, seed=83)
    read, aged_out, kept = events[:1_000], events[1_000:2_000], events[2_000:]
    produce_orders(kafka_bootstrap, topic, read)
    mapping = order_config(tmp_path, "orders", kafka_bootstrap, topic)
    table_path = mapping["table"]["path"]
    assert run_once(spark, mapping).error is None
    wanted = committed_offsets(table_path, topic)
    produce_orders(kafka_bootstrap, topic, aged_out)
    earliest = age_out_everything(kafka_bootstrap, topic)
    assert all(earliest[p] > wanted[p] for p in wanted)
    produce_orders(kafka_bootstrap, topic, kept)
    commits = len(MorTable.load(table_path).timeline().completed_writes())

    outcome = run_once(spark, mapping)

    assert "KafkaDataLossError" in outcome.error and "source.fail_on_data_loss" in outcome.error
    named = re.findall(
        rf"Cannot read offsets \[(\d+), (\d+)\) of topic '{re.escape(topic)}' partition (\d+): "
        r"the earliest available offset is (\d+)",
        outcome.error,
    )
    assert named and all(
        (int(a), int(b), int(c)) == (wanted[int(p)], earliest[int(p)], earliest[int(p)]) for a, b, p, c in named
    )
    assert len(MorTable.load(table_path).timeline().completed_writes()) == commits  # nothing written
    assert committed_offsets(table_path, topic) == wanted

    mapping["source"]["fail_on_data_loss"] = False
    outcome = run_once(spark, mapping)

    assert outcome.error is None and outcome.records == len(kept)
    assert_table_matches(table_path, read + kept)
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)
    jumped = MorTable.load(table_path).last_commit_metadata().extra_metadata[DATA_LOSS_KEY]
    assert json.loads(jumped) == [
        {"topic": topic, "partition": p, "from": wanted[p], "to": earliest[p]} for p in sorted(wanted)
    ]


# -- partitions added ---------------------------------------------------------------------------------
def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    """Grow `topic` to `total` partitions and wait until each has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if len(partitions) == total and all(p.leader >= 0 for p in partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic} has {len(partitions)} partitions, not {total}"
        time.sleep(0.1)


def test_partitions_added_while_a_continuous_job_runs_are_ingested(kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = settled_change_events(3_000, seed=85)
    before, after = events[:1_500], events[1_500:]
    produce_orders(kafka_bootstrap, topic, before)
    path = write_config(
        tmp_path / "configs",
        order_config(tmp_path, "orders", kafka_bootstrap, topic, source={"max_offsets_per_trigger": 1_000}),
    )
    table_path = str(tmp_path / "tables" / "orders")
    job = JobOutput(streamer_process(["run", str(path)]))
    try:
        job.wait_for(lambda: has_read(table_path, topic, len(before)), "the records of the first partitions")

        add_partitions(kafka_bootstrap, topic, 4)
        produce_orders(kafka_bootstrap, topic, after)  # keyed: spread over all four partitions
        ends = end_offsets(kafka_bootstrap, topic)
        assert ends[2] > 0 and ends[3] > 0
        job.wait_for(lambda: committed_offsets(table_path, topic) == ends, "the records of the new partitions")

        job.proc.send_signal(signal.SIGTERM)
        assert job.finish() == 0, job.text[-5000:]
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.finish()

    assert_table_matches(table_path, events)
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)
