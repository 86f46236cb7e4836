"""The bench's Kafka broker: the one `KAFKA_BOOTSTRAP_SERVERS` names, else Apache Kafka itself,
started from its Maven Central jars (`streamer.sandbox.kafka_broker`), as the tests do; and a
producer fast enough for backlogs of tens of millions of events."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from bench.workload import json_values
from streamer.sandbox.kafka_broker import KAFKA_VERSION, KafkaBroker
from streamer.sandbox.topics import create_topic


@contextlib.contextmanager
def kafka(work: Path) -> Iterator[str]:
    """The broker's bootstrap servers, for the duration of the block."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        print(f"  Kafka: {external} (KAFKA_BOOTSTRAP_SERVERS)", flush=True)
        yield external
        return
    with KafkaBroker(work / "kafka") as broker:
        print(
            f"  Kafka: Apache Kafka {KAFKA_VERSION} at {broker.bootstrap} (up in {broker.startup_seconds:.1f}s)",
            flush=True,
        )
        yield broker.bootstrap


def produce_json(bootstrap: str, topic: str, tables: Iterable[pa.Table], partitions: int) -> dict:
    """Events as JSON messages keyed by order id into a new topic of `partitions`, in stream
    order, as fast as one Python thread goes: the values are built column-wise
    (`workload.json_values`) a table at a time and produced in a tight loop, so tens of millions
    of messages take a minute or two, not the hours of a dict per row. Returns what it produced."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions=partitions)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "acks": "all",
        }
    )
    failed: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            failed.append(error)

    started, messages, size = time.monotonic(), 0, 0
    for table in tables:
        values = json_values(table)
        size += len(values.buffers()[2])
        for key, value in zip(table.column("order_id").to_pylist(), values.to_pylist()):
            while True:
                try:
                    producer.produce(topic, value, key, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let the client send
                    producer.poll(0.05)
        messages += len(values)
        producer.poll(0)
    left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"{left} messages to {topic} not sent, {len(failed)} failed: {failed[:3]}")
    seconds = time.monotonic() - started
    print(f"  produced {messages:,} messages ({size / 2**20:,.0f} MiB) to {topic} in {seconds:.1f}s", flush=True)
    return {
        "topic": topic,
        "topic_partitions": partitions,
        "messages": messages,
        "message_bytes": size,
        "produce_seconds": seconds,
    }


def create_topics(bootstrap: str, topics: Sequence[str], partitions: int, timeout: float = 120) -> None:
    """Many topics in one request, waiting until each partition has a leader: a thousand of them
    one `create_topic` at a time would take minutes of admin clients."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, num_partitions=partitions) for t in topics]).values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        listed = admin.list_topics(timeout=timeout).topics
        if all(
            t in listed
            and len(listed[t].partitions) == partitions
            and all(p.leader >= 0 for p in listed[t].partitions.values())
            for t in topics
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {len(topics)} topics have no leader for every partition after {timeout}s")
        time.sleep(0.1)


def produce_records(bootstrap: str, records: Mapping[str, Sequence[tuple[bytes | None, bytes | None, None]]]) -> None:
    """(key, value, _) records into partition 0 of each topic through one producer for every
    topic (a producer per topic costs a connection and a metadata request each)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "queue.buffering.max.messages": 1_000_000})
    failed: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            failed.append(error)

    for topic, messages in records.items():
        for key, value, _ in messages:
            while True:
                try:
                    producer.produce(topic, value, key, partition=0, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let the client send
                    producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"{left} messages not sent, {len(failed)} failed: {failed[:3]}")


def delete_topic(bootstrap: str, topic: str) -> None:
    """Drop a topic whose messages a scenario no longer needs, to give the disk back."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(60)
