"""The Kafka side of progress: end offsets, lag, and offsets committed to a consumer group.

The job's own record of progress is the table's commit metadata; these are views of it from
Kafka's side, for people and monitors.
"""

from __future__ import annotations

import logging
import re

from streamer.config import SourceSettings

log = logging.getLogger(__name__)


def _client_config(source: SourceSettings, group_id: str) -> dict[str, str]:
    return {"bootstrap.servers": source.bootstrap_servers, "group.id": group_id, "enable.auto.commit": "false",
            **{k[len("kafka."):]: v for k, v in source.options.items() if k.startswith("kafka.")}}


def end_offsets(source: SourceSettings, extra_topics: list[str] = ()) -> dict[str, dict[int, int]]:
    """The end offset of every partition of the source's topics (those of its pattern that exist)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(_client_config(source, "mor-streamer-offsets"))
    try:
        metadata = consumer.list_topics(timeout=30)
        if source.topics:
            topics = list(source.topics)
        else:
            pattern = re.compile(source.topic_pattern)
            topics = sorted(t for t in metadata.topics if pattern.fullmatch(t) and not t.startswith("__"))
        ends = {}
        for topic in sorted(set(topics) | set(extra_topics)):
            partitions = metadata.topics.get(topic)
            if partitions is None or partitions.error is not None:
                continue
            ends[topic] = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                           for p in sorted(partitions.partitions)}
        return ends
    finally:
        consumer.close()


def lag(source: SourceSettings, committed: dict[str, dict[int, int]]) -> dict[str, int]:
    """Records per topic between the committed offsets and the end of the topic."""
    ends = end_offsets(source, list(committed))
    return {topic: sum(max(0, end - committed.get(topic, {}).get(p, 0)) for p, end in parts.items())
            for topic, parts in ends.items()}


def commit_to_group(source: SourceSettings, group_id: str, offsets: dict[str, dict[int, int]]) -> None:
    """Commit the table's offsets to a consumer group, so that standard lag monitors see the job.
    Only a view: a failure is logged, never fatal, and the group is never read back."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(_client_config(source, group_id))
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for t, parts in offsets.items() for p, o in parts.items()],
                        asynchronous=False)
    except KafkaException as e:
        log.warning("could not commit offsets to consumer group %s: %s", group_id, e)
    finally:
        consumer.close()
