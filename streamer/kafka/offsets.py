"""The Kafka side of progress: end offsets, lag, and offsets committed to a consumer group.

The job's own record of progress is the table's commit metadata; these are views of it from
Kafka's side, for people and monitors. A running job asks after every batch, so `KafkaProgress`
keeps its clients for the life of the job and builds them again only after a failure. The
`status` and `doctor` commands ask once, with a short timeout: brokers that do not answer in it
are `BrokersUnreachableError`, which names them and why, and the table's own state is shown anyway.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Collection
from dataclasses import dataclass

from streamer.config.model import SourceSettings
from streamer.errors import BrokersUnreachableError
from streamer.kafka.options import SourceOptions
from streamer.logs.clients import ClientLog, client_config, connectivity_codes

log = logging.getLogger(__name__)

#: Seconds a metadata or offsets request may take before the answer is given up on.
REQUEST_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class PartitionRange:
    """The offsets a partition holds: from `earliest` to before `end`."""

    earliest: int
    end: int


@dataclass(frozen=True)
class TopicRanges:
    """What the brokers hold of the topics asked about."""

    ranges: dict[str, dict[int, PartitionRange]]  # topics that exist, each partition readable
    missing: list[str]  # topics the brokers do not have
    unreadable: dict[str, str]  # "topic[partition]" -> why its offsets could not be listed


class KafkaProgress:
    """One table job's long-lived Kafka clients: end offsets and lag through an admin client
    (one request for every partition), and commits to the consumer group
    `source.commit_offsets_to_group` through a consumer. Thread-safe."""

    def __init__(self, source: SourceSettings, timeout: float = REQUEST_TIMEOUT_SECONDS):
        self.source = source
        self.timeout = timeout
        self._options = SourceOptions.parse(source.reader_options())
        self._lock = threading.Lock()
        self._admin = None
        self._group = None
        self._group_id: str | None = None
        self._admin_log: ClientLog | None = None

    def end_offsets(self, extra_topics: Collection[str] = ()) -> dict[str, dict[int, int]]:
        """The end offset of every partition of the source's topics (those of its pattern that
        exist), as a consumer with the source's isolation level sees it."""
        with self._lock:
            return self._using("_admin", lambda a: self._end_offsets(a, extra_topics))

    def lag(self, committed: dict[str, dict[int, int]]) -> dict[str, int]:
        """Records per topic between the committed offsets and the end of the topic."""
        per_topic: dict[str, int] = {}
        for (topic, _), records in self.partition_lag(committed).items():
            per_topic[topic] = per_topic.get(topic, 0) + records
        return per_topic

    def partition_lag(self, committed: dict[str, dict[int, int]]) -> dict[tuple[str, int], int]:
        """Records per (topic, partition) between the committed offsets and the partition's end."""
        ends = self.end_offsets(list(committed))
        return {
            (topic, p): max(0, end - committed.get(topic, {}).get(p, 0))
            for topic, parts in ends.items()
            for p, end in parts.items()
        }

    def ranges(self, extra_topics: Collection[str] = ()) -> TopicRanges:
        """The earliest and end offsets of every partition of the source's topics and
        `extra_topics`; which of those topics are missing, and which partitions could not be
        read. Raises `BrokersUnreachableError` when the brokers do not answer within the timeout."""
        with self._lock:
            return self._using("_admin", lambda a: self._ranges(a, extra_topics))

    def earliest_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The earliest offset Kafka holds of each (topic, partition)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        wanted = [TopicPartition(topic, p) for topic, p in partitions]

        def earliest(admin) -> dict[tuple[str, int], int]:
            futures = self._list_offsets(admin, wanted, OffsetSpec.earliest())
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}

        with self._lock:
            return self._using("_admin", earliest)

    def commit_to_group(self, group_id: str, offsets: dict[str, dict[int, int]]) -> None:
        """Commit the table's offsets to a consumer group, so that standard lag monitors see the
        job. Only a view: the group is never read back."""
        from confluent_kafka import TopicPartition

        partitions = [TopicPartition(t, p, o) for t, parts in offsets.items() for p, o in parts.items()]
        with self._lock:
            if self._group is not None and self._group_id != group_id:
                self._drop("_group")
            self._group_id = group_id
            self._using("_group", lambda c: c.commit(offsets=partitions, asynchronous=False))

    def close(self) -> None:
        with self._lock:
            for name in ("_admin", "_group"):
                self._drop(name)

    def _new(self, name: str):
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        servers = self._options.bootstrap_servers
        if name == "_admin":
            conf, self._admin_log = client_config(self._options.admin_config(), f"admin client of {servers}")
            return AdminClient(conf)
        conf = {**self._options.consumer_config(), "group.id": self._group_id}
        return Consumer(client_config(conf, f"consumer of group {self._group_id} at {servers}")[0])

    def _using(self, name: str, call):
        client = getattr(self, name)
        if client is None:
            client = self._new(name)
            setattr(self, name, client)
        try:
            answer = call(client)
            client.poll(0)  # serves the client's log lines and error events, which wait for it
            return answer
        except BaseException as e:
            unreachable = self._unreachable(name, client, e)
            self._drop(name)  # the next call starts from a new connection
            if unreachable is not None:
                raise unreachable from None
            raise

    def _unreachable(self, name: str, client, error: BaseException) -> BrokersUnreachableError | None:
        """The admin client's failure as `BrokersUnreachableError` when it is about reaching the
        brokers, with the cause its latest error event gave."""
        from confluent_kafka import KafkaException

        if (
            name != "_admin"
            or not isinstance(error, KafkaException)
            or error.args[0].code() not in connectivity_codes()
        ):
            return None
        client.poll(0)  # serves the error events that name the broker and the cause
        cause = self._admin_log.cause if self._admin_log is not None else None
        return BrokersUnreachableError(self._options.bootstrap_servers, _short_cause(cause or error.args[0].str()))

    def _topics(self, metadata, extra_topics) -> list[str]:
        """The source's topics (those of its pattern that exist) and `extra_topics`."""
        source = self.source
        if source.topic_pattern is None:
            topics = list(source.topics or ())
        else:
            pattern = re.compile(source.topic_pattern)
            topics = [t for t in metadata.topics if pattern.fullmatch(t) and not t.startswith("__")]
        return sorted(set(topics) | set(extra_topics))

    def _list_offsets(self, admin, wanted, spec) -> dict:
        """Futures of the offsets `spec` (an OffsetSpec) names, as a consumer with the source's
        isolation level sees them."""
        from confluent_kafka import IsolationLevel

        committed_only = self._options.isolation_level == "read_committed"
        level = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        return admin.list_offsets(dict.fromkeys(wanted, spec), isolation_level=level, request_timeout=self.timeout)

    def _end_offsets(self, admin, extra_topics) -> dict[str, dict[int, int]]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        metadata = admin.list_topics(timeout=self.timeout)
        wanted = [
            TopicPartition(topic, p)
            for topic in self._topics(metadata, extra_topics)
            if (info := metadata.topics.get(topic)) is not None and info.error is None
            for p in sorted(info.partitions)
        ]
        if not wanted:
            return {}
        ends: dict[str, dict[int, int]] = {}
        for tp, future in self._list_offsets(admin, wanted, OffsetSpec.latest()).items():
            ends.setdefault(tp.topic, {})[tp.partition] = future.result().offset
        return {topic: dict(sorted(parts.items())) for topic, parts in sorted(ends.items())}

    def _ranges(self, admin, extra_topics) -> TopicRanges:
        from confluent_kafka import KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        metadata = admin.list_topics(timeout=self.timeout)
        missing, unreadable, wanted = [], {}, []
        for topic in self._topics(metadata, extra_topics):
            info = metadata.topics.get(topic)
            if info is None or (info.error is not None and info.error.code() == _unknown_topic_code()):
                missing.append(topic)
            elif info.error is not None:
                unreadable[topic] = info.error.str()
            else:
                wanted += [TopicPartition(topic, p) for p in sorted(info.partitions)]
        earliest = self._list_offsets(admin, wanted, OffsetSpec.earliest()) if wanted else {}
        end = self._list_offsets(admin, wanted, OffsetSpec.latest()) if wanted else {}
        ranges: dict[str, dict[int, PartitionRange]] = {}
        for tp in wanted:
            try:
                found = PartitionRange(earliest[tp].result().offset, end[tp].result().offset)
            except KafkaException as e:
                unreadable[f"{tp.topic}[{tp.partition}]"] = e.args[0].str()
                continue
            ranges.setdefault(tp.topic, {})[tp.partition] = found
        return TopicRanges(ranges, missing, unreadable)

    def _drop(self, name: str) -> None:
        client = getattr(self, name)
        setattr(self, name, None)
        if client is not None and hasattr(client, "close"):  # an AdminClient has none: dropping it frees it
            try:
                client.close()
            except Exception as e:  # noqa: BLE001 - closing a broken client must not hide why it broke
                log.debug("closing a Kafka client failed: %s", e)


def end_offsets(source: SourceSettings, extra_topics: Collection[str] = ()) -> dict[str, dict[int, int]]:
    """End offsets, asked once (a command, not a running job)."""
    progress = KafkaProgress(source)
    try:
        return progress.end_offsets(extra_topics)
    finally:
        progress.close()


def _short_cause(cause: str) -> str:
    """librdkafka's error event without what the message around it says already: the broker's
    name before it and the connection state after it."""
    cause = re.sub(r"^\S+/(bootstrap|\d+): ", "", cause)
    return re.sub(r" \(after \d+ms in state \w+(, \d+ identical error\(s\) suppressed)?\)$", "", cause)


def _unknown_topic_code() -> int:
    from confluent_kafka import KafkaError

    return KafkaError.UNKNOWN_TOPIC_OR_PART
