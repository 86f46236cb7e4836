"""Feeding a Kafka broker: topics created and deleted, records produced as a producer would,
and a wait until a broker answers. For whoever *feeds* a topic (the demo, `streamer kafka
produce`, the tests and the benchmarks), never part of the streamer's data path (`streamer.kafka`).

Any Kafka broker will do, the sandbox's local one (`streamer.sandbox.kafka_broker`) or another.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from streamer.errors import BrokerStartError, InvalidArgumentError, ProduceError, TopicTimeoutError
from streamer.logs.clients import client_config
from streamer.sandbox.ports import port_answers

__all__ = [
    "create_topic",
    "delete_topic",
    "murmur2",
    "partition_count",
    "partition_for_key",
    "produce",
    "topic_sizes",
    "wait_for_broker",
]


def _admin(bootstrap: str, **extra: Any):
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config({"bootstrap.servers": bootstrap, **extra}, f"admin client of {bootstrap}")[0])


def wait_for_broker(
    bootstrap: str, timeout: float = 30.0, is_alive=None, client: Mapping[str, str] | None = None
) -> float:
    """Block until the broker at `bootstrap` answers a Kafka metadata request listing at least
    one broker, asked by a client with the settings `client` (a secured listener's). Returns the
    seconds waited. `is_alive()` (optional) aborts the wait early when it returns False (e.g. the
    broker process died)."""
    start = time.monotonic()
    deadline = start + timeout
    host, _, port = bootstrap.split(",", maxsplit=1)[0].rpartition(":")
    # First the TCP port, so the Kafka client does not log connection-refused noise.
    while True:
        if is_alive is not None and not is_alive():
            raise BrokerStartError(f"broker at {bootstrap} exited while starting")
        if port_answers(host.strip("[]"), int(port), timeout=0.5):
            break
        if time.monotonic() > deadline:
            raise BrokerStartError(f"nothing listens on {bootstrap} after {timeout:.0f}s")
        time.sleep(0.02)
    admin = _admin(bootstrap, **(client or {}))
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if is_alive is not None and not is_alive():
            raise BrokerStartError(f"broker at {bootstrap} exited while starting")
        try:
            md = admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if md.brokers:
                return time.monotonic() - start
        except Exception as exc:  # noqa: BLE001 - KafkaException: transport or timeout
            last_error = exc
        time.sleep(0.05)
    raise BrokerStartError(f"broker at {bootstrap} did not answer metadata in {timeout:.0f}s: {last_error}")


# -- topics -------------------------------------------------------------------------------------
def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    exist_ok: bool = False,
) -> str:
    """Create `topic` and wait until every partition has a leader. Returns the topic name."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    new = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=dict(config or {}))
    future = admin.create_topics([new], request_timeout=timeout)[topic]
    try:
        future.result(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        if not (exist_ok and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) >= partitions
            and all(p.leader >= 0 and p.error is None for p in md.partitions.values())
        ):
            return topic
        if time.monotonic() > deadline:
            raise TopicTimeoutError(f"topic {topic!r} has no leader for every partition after {timeout}s")
        time.sleep(0.05)


def delete_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> bool:
    """Delete `topic` and wait until the broker no longer lists it; False when there was none."""
    from confluent_kafka import KafkaError, KafkaException

    admin = _admin(bootstrap)
    try:
        admin.delete_topics([topic], request_timeout=timeout)[topic].result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise
    deadline = time.monotonic() + timeout
    while topic in admin.list_topics(timeout=timeout).topics:
        if time.monotonic() > deadline:
            raise TopicTimeoutError(f"topic {topic!r} still listed {timeout}s after its deletion")
        time.sleep(0.1)
    return True


def partition_count(bootstrap: str, topic: str, timeout: float = 30.0) -> int | None:
    """How many partitions `topic` has; None when it does not exist. (Asks for every topic: a
    request for this one would create it on a broker that creates topics on first use.)"""
    md = _admin(bootstrap).list_topics(timeout=timeout).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        return None
    return len(md.partitions)


def topic_sizes(bootstrap: str, timeout: float = 10.0) -> dict[str, tuple[int, int]]:
    """Each topic but Kafka's internal ones: its partitions, and the records they hold."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = _admin(bootstrap)
    topics = {name: md for name, md in admin.list_topics(timeout=timeout).topics.items() if not name.startswith("__")}
    partitions = [TopicPartition(name, p) for name, md in topics.items() for p in md.partitions]
    if not partitions:
        return {}
    held: dict[tuple[str, int], int] = {}
    for spec, sign in ((OffsetSpec.latest(), 1), (OffsetSpec.earliest(), -1)):
        offsets = admin.list_offsets(dict.fromkeys(partitions, spec), request_timeout=timeout)
        for tp, future in offsets.items():
            offset = future.result(timeout).offset
            held[(tp.topic, tp.partition)] = held.get((tp.topic, tp.partition), 0) + sign * offset
    return {name: (len(md.partitions), sum(held[(name, p)] for p in md.partitions)) for name, md in topics.items()}


# -- partitioning (Java client's default for keyed records) ------------------------------------
def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java producer's default partitioner (and librdkafka's
    `murmur2_random`) picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# -- producing ----------------------------------------------------------------------------------
Record = tuple  # (key, value, partition[, headers[, timestamp_ms]])


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int]]:
    """Produce `records` to `topic`, in order per partition, and wait until all are acknowledged.

    Each record is `(key, value, partition)` or `(key, value, partition, headers)` or
    `(key, value, partition, headers, timestamp_ms)`; key and value are bytes or None, headers a
    list of (str, bytes|None) pairs or a dict (or None). A partition of None is chosen as the Java
    producer would for a keyed record (murmur2 of the key), and round-robin for a null key.

    Raises RuntimeError if any record was not delivered. Returns (partition, offset) per record,
    in the order given.
    """
    from confluent_kafka import Producer

    items = [tuple(r) for r in records]
    if not items:
        return []
    num_partitions: int | None = None
    rr = 0
    resolved: list[tuple[int, Any, Any, Any, Any]] = []
    for rec in items:
        if not 3 <= len(rec) <= 5:
            raise InvalidArgumentError(f"a record is (key, value, partition[, headers[, timestamp_ms]]): {rec!r}")
        key, value, partition = rec[0], rec[1], rec[2]
        headers = rec[3] if len(rec) > 3 else None
        ts = rec[4] if len(rec) > 4 else None
        if partition is None:
            if num_partitions is None:
                num_partitions = partition_count(bootstrap, topic, timeout)
                if num_partitions is None:
                    raise InvalidArgumentError(f"topic {topic!r} does not exist at {bootstrap}: create it first")
            if key is not None:
                partition = partition_for_key(key, num_partitions)
            else:
                partition, rr = rr % num_partitions, rr + 1
        resolved.append((int(partition), key, value, headers, ts))

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,  # keeps per-partition order even when requests are retried
        "linger.ms": 5,
        "message.timeout.ms": int(timeout * 1000),
        "queue.buffering.max.messages": 200_000,
    }
    conf.update(config or {})
    producer = Producer(client_config(conf, f"producer to {bootstrap}")[0])
    results: list[tuple[int, int] | None] = [None] * len(resolved)
    errors: list[str] = []

    def send(i: int) -> None:
        p, key, value, headers, ts = resolved[i]

        def on_delivery(err, msg, i=i):
            if err is not None:
                errors.append(f"record {i} (partition {p}): {err}")
            else:
                results[i] = (msg.partition(), msg.offset())

        kwargs: dict[str, Any] = {"key": key, "value": value, "partition": p, "on_delivery": on_delivery}
        if headers:
            kwargs["headers"] = headers
        if ts is not None:
            kwargs["timestamp"] = int(ts)
        while True:
            try:
                producer.produce(topic, **kwargs)
                return
            except BufferError:
                producer.poll(0.05)

    for i in range(len(resolved)):
        send(i)
        producer.poll(0)
    left = producer.flush(timeout)
    if left:
        raise ProduceError(f"{left} record(s) to {topic!r} still unacknowledged after {timeout}s")
    if errors:
        raise ProduceError(f"{len(errors)} record(s) to {topic!r} failed: " + "; ".join(errors[:5]))
    delivered = [r for r in results if r is not None]
    if len(delivered) < len(results):
        raise ProduceError(f"no delivery report for {len(results) - len(delivered)} record(s) to {topic!r}")
    return delivered
