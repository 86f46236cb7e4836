"""How the ``kafka-arrow`` source plans micro-batches: offsets in Spark's JSON shape, the
records a trigger admits, and the Spark tasks that read them. These are Spark's own algorithms
(``KafkaMicroBatchStream.rateLimit``, ``KafkaOffsetRangeCalculator``), so batches are cut as Spark's
Kafka source cuts them. The initial load cuts the backlog it reads with Spark's own ``kafka``
format with them too.

Offsets are JSON objects shaped like Spark's: ``{"topic": {"partition": nextOffsetToRead}}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

from streamer.kafka.options import OffsetMap, TopicPartitionKey

#: Offsets [start, end) of one topic-partition: what one read of a batch covers.
OffsetRange = tuple[TopicPartitionKey, int, int]


def spans_of(ranges: Iterable[OffsetRange]) -> dict[TopicPartitionKey, tuple[int, int]]:
    """Each topic-partition's whole span of `ranges` (a source may split one partition's
    among several tasks)."""
    spans: dict[TopicPartitionKey, tuple[int, int]] = {}
    for tp, start, end in ranges:
        first, last = spans.get(tp, (start, end))
        spans[tp] = (min(first, start), max(last, end))
    return spans


def offsets_to_json(offsets: OffsetMap) -> dict[str, dict[str, int]]:
    """``{(topic, p): off}`` -> Spark-shaped, deterministically ordered dict."""
    out: dict[str, dict[str, int]] = {}
    for topic, p in sorted(offsets):
        out.setdefault(topic, {})[str(p)] = int(offsets[(topic, p)])
    return out


def offsets_from_json(obj: Mapping | None) -> OffsetMap:
    if not obj:
        return {}
    if isinstance(obj, str):
        obj = json.loads(obj)
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def rate_limit(
    limit: int,
    start: OffsetMap,
    until: OffsetMap,
    earliest_of_new: Callable[[list[TopicPartitionKey]], OffsetMap],
) -> OffsetMap:
    """Spark's KafkaMicroBatchStream.rateLimit: share ``limit`` records across partitions in
    proportion to their lag; a partition with lag never gets 0 (prorates below 1 round up)."""
    new = [tp for tp in until if tp not in start]
    from_new = earliest_of_new(new) if new else {}
    sizes: dict[TopicPartitionKey, int] = {}
    begins: dict[TopicPartitionKey, int] = {}
    for tp, end in until.items():
        begin = start.get(tp, from_new.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp], begins[tp] = end - begin, begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out: OffsetMap = {}
    for tp, end in until.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        n = int(-(-prorate // 1)) if prorate < 1 else int(prorate // 1)
        out[tp] = min(end, begins[tp] + n)
    return out


def split_ranges(
    ranges: Sequence[tuple[TopicPartitionKey, int, int]],
    min_partitions: int | None,
    max_records_per_partition: int | None,
) -> list[tuple[TopicPartitionKey, int, int]]:
    """Spark's KafkaOffsetRangeCalculator: split ranges into more tasks when asked."""
    ranges = [r for r in ranges if r[2] > r[1]]

    def divide(r, parts):
        tp, s, e = r
        remaining, out = e - s, []
        for i in range(parts):
            this = remaining // (parts - i)
            remaining -= this
            out.append((tp, s, min(s + this, e)))
            s = min(s + this, e)
        return [x for x in out if x[2] > x[1]]

    if max_records_per_partition:
        ranges = [piece for r in ranges for piece in divide(r, max(1, -(-(r[2] - r[1]) // max_records_per_partition)))]
    if min_partitions and len(ranges) < min_partitions:
        total = sum(e - s for _, s, e in ranges)
        ranges = [
            piece for r in ranges for piece in divide(r, max(int((r[2] - r[1]) / total * min_partitions + 0.5), 1))
        ]
    return ranges
