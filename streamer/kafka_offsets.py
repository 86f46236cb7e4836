"""The Kafka side of progress: end offsets, lag, and offsets committed to a consumer group.

The job's own record of progress is the table's commit metadata; these are views of it from
Kafka's side, for people and monitors. A running job asks after every batch, so `KafkaProgress`
keeps its clients for the life of the job and builds them again only after a failure.
"""

from __future__ import annotations

import logging
import re
import threading

from streamer.client_logs import client_config
from streamer.config import SourceSettings
from streamer.source import SourceOptions

log = logging.getLogger(__name__)

#: Seconds a metadata or offsets request may take before the answer is given up on.
REQUEST_TIMEOUT_SECONDS = 30.0


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

    def end_offsets(self, extra_topics: list[str] = ()) -> dict[str, dict[int, int]]:
        """The end offset of every partition of the source's topics (those of its pattern that
        exist), as a consumer with the source's isolation level sees it."""
        with self._lock:
            return self._using("_admin", lambda a: self._end_offsets(a, extra_topics))

    def lag(self, committed: dict[str, dict[int, int]]) -> dict[str, int]:
        """Records per topic between the committed offsets and the end of the topic."""
        ends = self.end_offsets(list(committed))
        return {topic: sum(max(0, end - committed.get(topic, {}).get(p, 0)) for p, end in parts.items())
                for topic, parts in ends.items()}

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
            return AdminClient(client_config(self._options.admin_config(), f"admin client of {servers}")[0])
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
        except BaseException:
            self._drop(name)  # the next call starts from a new connection
            raise

    def _end_offsets(self, admin, extra_topics) -> dict[str, dict[int, int]]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        source = self.source
        metadata = admin.list_topics(timeout=self.timeout)
        if source.topics:
            topics = list(source.topics)
        else:
            pattern = re.compile(source.topic_pattern)
            topics = sorted(t for t in metadata.topics if pattern.fullmatch(t) and not t.startswith("__"))
        wanted = [TopicPartition(topic, p) for topic in sorted(set(topics) | set(extra_topics))
                  if (info := metadata.topics.get(topic)) is not None and info.error is None
                  for p in sorted(info.partitions)]
        if not wanted:
            return {}
        committed_only = self._options.isolation_level == "read_committed"
        level = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in wanted}, isolation_level=level,
                                     request_timeout=self.timeout)
        ends: dict[str, dict[int, int]] = {}
        for tp, future in futures.items():
            ends.setdefault(tp.topic, {})[tp.partition] = future.result().offset
        return {topic: dict(sorted(parts.items())) for topic, parts in sorted(ends.items())}

    def _drop(self, name: str) -> None:
        client = getattr(self, name)
        setattr(self, name, None)
        if client is not None:
            try:
                client.close()
            except Exception as e:  # closing a broken client must not hide why it broke
                log.debug("closing a Kafka client failed: %s", e)


def end_offsets(source: SourceSettings, extra_topics: list[str] = ()) -> dict[str, dict[int, int]]:
    """End offsets, asked once (a command, not a running job)."""
    progress = KafkaProgress(source)
    try:
        return progress.end_offsets(extra_topics)
    finally:
        progress.close()


def lag(source: SourceSettings, committed: dict[str, dict[int, int]]) -> dict[str, int]:
    """Lag, asked once (a command, not a running job)."""
    progress = KafkaProgress(source)
    try:
        return progress.lag(committed)
    finally:
        progress.close()
