"""Reading one offset range of a topic-partition into Arrow record batches: the part of the
``kafka-arrow`` source that runs in Spark's tasks, and in the sink's own pass over the offset
ranges Spark planned (``offsetRanges=true``). Consumers are kept between tasks by the executor's
Python worker."""

from __future__ import annotations

import bisect
import contextlib
import itertools
import time
from collections.abc import Iterator
from typing import cast

import numpy as np
import pyarrow as pa

from streamer.errors import KafkaSourceError, KafkaSourceTimeoutError
from streamer.kafka.data_loss import data_loss
from streamer.kafka.options import PREFETCH_KBYTES, SourceOptions, describe_partition, new_client
from streamer.kafka.schema import (
    ARROW_HEADER,
    ARROW_HEADERS,
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITHOUT_HEADERS,
    ARROW_TIMESTAMP,
    OFFSET_RANGES_SCHEMA,
)


class _BatchBuilder:
    """Accumulates confluent-kafka messages and emits Arrow record batches. A chunk's keys and
    values are taken through the messages' C accessors (no Python frame per message) and become
    Arrow arrays once per batch, so their bytes are copied once, from Python's to Arrow's: a
    record costs about a microsecond here."""

    def __init__(self, topic: str, partition: int, include_headers: bool):
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = ARROW_SCHEMA if include_headers else ARROW_SCHEMA_WITHOUT_HEADERS
        self._seen_rows = 0
        self._seen_bytes = 0
        self.avg_bytes = 0.0
        self._reset()

    def _reset(self):
        self.chunks: list = []  # (keys, values, offsets, timestamp pairs) per chunk of messages, as lists
        self.headers: list = []
        self.rows = 0
        self.bytes = 0

    def add(self, msgs: list, offsets: list) -> None:
        from confluent_kafka import Message

        n = len(msgs)
        values = list(map(Message.value, msgs))
        stamps = np.fromiter(itertools.chain.from_iterable(map(Message.timestamp, msgs)), np.int64, 2 * n)
        self.chunks.append((list(map(Message.key, msgs)), values, offsets, stamps.reshape(n, 2)))
        if self.include_headers:
            self.headers += map(Message.headers, msgs)
        added = sum(map(len, filter(None, values)))  # tombstones' values are None
        self.rows += n
        self.bytes += added
        self._seen_rows += n
        self._seen_bytes += added
        self.avg_bytes = self._seen_bytes / self._seen_rows

    def flush(self) -> pa.RecordBatch:
        n = self.rows
        keys, values, offsets, stamp_chunks = zip(*self.chunks)
        stamps = np.concatenate(stamp_chunks)
        # confluent-kafka: 0 not available, 1 create time, 2 log-append time;
        # Spark / Java client: -1, 0, 1.
        cols = [
            pa.array(list(itertools.chain.from_iterable(keys)), pa.binary()),
            pa.array(list(itertools.chain.from_iterable(values)), pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(list(itertools.chain.from_iterable(offsets)), pa.int64()),
            pa.array(stamps[:, 1] * 1000).cast(ARROW_TIMESTAMP),
            pa.array((stamps[:, 0] - 1).astype(np.int32)),
        ]
        if self.include_headers:
            cols.append(_headers_array(self.headers))
        batch = pa.RecordBatch.from_arrays(cols, schema=self.schema)
        self._reset()
        return batch


def _headers_array(headers: list) -> pa.Array:
    """Spark semantics: null when a record has no headers, else a list of (key, value)."""
    if not any(headers):
        return pa.nulls(len(headers), ARROW_HEADERS)
    offsets = [0]
    hkeys: list = []
    hvals: list = []
    mask = []
    pos = 0
    for h in headers:
        if h:
            for k, v in h:
                hkeys.append(k)
                hvals.append(v)
            pos += len(h)
            mask.append(False)
        else:
            mask.append(True)
        offsets.append(pos)
    values = pa.StructArray.from_arrays(
        [pa.array(hkeys, pa.string()), pa.array(hvals, pa.binary())],
        fields=list(ARROW_HEADER),
    )
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), values, type=ARROW_HEADERS, mask=pa.array(mask, pa.bool_())
    )


def _start_after_retention(opts: SourceOptions, topic: str, partition: int, start: int, end: int, low: int) -> int:
    """The offset to start reading [start, end) at when the partition now begins at ``low``."""
    if start >= low:
        return start
    data_loss(
        opts.fail_on_data_loss,
        f"Cannot read offsets [{start}, {min(low, end)}) of {describe_partition((topic, partition))}: "
        f"the earliest available offset is {low}.",
    )
    return low


def read_partition(opts: SourceOptions, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """Read offsets [start, end) of one topic-partition as Arrow record batches.

    Stops when the record at ``end - 1`` (or any later one) was seen, when the consumer reports
    end-of-partition at or after ``end`` or when its position reaches ``end``: offset gaps
    (compaction, transaction markers, aborted records) never make it wait. Fails with
    :class:`KafkaSourceTimeoutError` after ``maxBrokerOutageMs`` (else ``kafkaConsumer.pollTimeoutMs``)
    without progress.

    The partition's earliest offset is asked for only when the read does not begin where it
    was asked to (the consumer reports the offset out of range, or its first record or its end
    lies beyond it), as Spark's Kafka consumer does: a range costs no round trip of its own
    before its first fetch, and data loss is told apart from a gap when there is one.
    """
    if end <= start:
        return
    import confluent_kafka as ck
    from confluent_kafka import KafkaError, TopicPartition

    timeout_s = opts.task_timeout_ms / 1000.0
    where = f"{describe_partition((topic, partition))} (offsets [{start}, {end}))"
    builder = _BatchBuilder(topic, partition, opts.include_headers)
    prefetch = _CONSUMERS.prefetch_kbytes(topic, end - start)
    consumer = _CONSUMERS.acquire(opts, prefetch)
    reusable = False
    try:
        _CONSUMERS.know_topic(consumer, topic, timeout_s)
        consumer.assign([TopicPartition(topic, partition, start)])
        batch_size = opts.arrow_batch_size
        max_bytes = opts.arrow_max_batch_bytes
        next_offset = start
        begun = False  # whether the read is known to begin at `next_offset` (or after data loss)
        eof_at = -1
        deadline = time.monotonic() + timeout_s
        last_problem = ""
        done = False

        def resume_after_retention() -> int | None:
            """Where to go on when the read did not begin at `next_offset`: the partition's
            earliest offset when the records before it are gone (data loss), else `next_offset`;
            None when the partition is gone."""
            low = _earliest_offset(consumer, opts, topic, partition, where)
            if low is None:
                return None
            return _start_after_retention(opts, topic, partition, next_offset, end, low)

        while not done:
            want = min(batch_size - builder.rows, end - next_offset, 100_000)
            if builder.avg_bytes:  # large records: keep the batch near arrowMaxBatchBytes
                want = min(want, int((max_bytes - builder.bytes) / builder.avg_bytes))
            else:  # record size not known yet: a small first chunk
                want = min(want, 100)
            want = max(1, want)
            msgs = consumer.consume(num_messages=want, timeout=0.1)
            now = time.monotonic()
            if msgs:
                errs = [m for m in msgs if m.error() is not None]
                if errs:
                    msgs = [m for m in msgs if m.error() is None]
                    for m in errs:
                        err = m.error()
                        code = err.code()
                        if code == KafkaError._PARTITION_EOF:
                            eof_at = m.offset()
                            if not begun and eof_at > next_offset and not msgs:
                                begun = True
                                if resume_after_retention() is None:
                                    done = True  # the partition is gone
                            if eof_at >= end:
                                done = True
                            deadline = now + timeout_s
                        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                            begun = True
                            resumed = resume_after_retention()  # failOnDataLoss=true: raises here
                            if resumed is None or resumed >= end:
                                msgs, done = [], True
                            else:
                                msgs, next_offset = [], resumed
                                consumer.assign([TopicPartition(topic, partition, resumed)])
                            deadline = now + timeout_s
                        elif code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC) or (
                            code == KafkaError._UNKNOWN_PARTITION and _partition_is_gone(consumer, topic, partition)
                        ):
                            data_loss(
                                opts.fail_on_data_loss, f"Cannot read {where}: the partition does not exist any more."
                            )
                            msgs, done = [], True
                        elif err.fatal():
                            raise KafkaSourceError(f"fatal Kafka error reading {where}: {opts.redact(err.str())}")
                        else:
                            last_problem = opts.redact(err.str())
                if msgs:
                    # a record's offset is set; confluent-kafka types Message.offset() for any message
                    offsets = cast(list[int], list(map(ck.Message.offset, msgs)))
                    if offsets[0] < next_offset:  # never hand out a record twice / from before start
                        k = bisect.bisect_left(offsets, next_offset)
                        msgs, offsets = msgs[k:], offsets[k:]
                    if msgs and not begun:
                        begun = True
                        if offsets[0] > next_offset and resume_after_retention() is None:
                            msgs, done = [], True
                if msgs:
                    if offsets[-1] >= end:
                        k = bisect.bisect_left(offsets, end)
                        msgs, offsets = msgs[:k], offsets[:k]
                        done = True
                    if msgs:
                        builder.add(msgs, offsets)
                        next_offset = offsets[-1] + 1
                        if next_offset >= end:
                            done = True
                    deadline = now + timeout_s
            if not done and not msgs:
                # Gaps: the position may have passed `end` without a record at end - 1.
                try:
                    pos = consumer.position([TopicPartition(topic, partition)])[0].offset
                    if not begun and pos > next_offset:
                        begun = True
                        if resume_after_retention() is None:
                            pos = end  # the partition is gone
                    if pos >= end:
                        done = True
                except ck.KafkaException:
                    pass
                if not done and now >= deadline:
                    detail = f"; last error: {last_problem}" if last_problem else ""
                    eof = f"; broker reports the partition ends at {eof_at}" if eof_at >= 0 else ""
                    raise KafkaSourceTimeoutError(
                        f"Timed out after {opts.task_timeout_ms} ms without progress reading {where} "
                        f"from {opts.bootstrap_servers}: next offset {next_offset}{eof}{detail}. "
                        f"Is the broker reachable? (option {opts.task_timeout_option})"
                    )
            if builder.rows and (builder.rows >= batch_size or builder.bytes >= max_bytes or done):
                yield builder.flush()
        reusable = True
    finally:
        _CONSUMERS.release(opts, consumer, reusable, prefetch)
        _CONSUMERS.saw_records(topic, builder.avg_bytes)


def _earliest_offset(consumer, opts: SourceOptions, topic: str, partition: int, where: str) -> int | None:
    """The partition's earliest offset now, asked of the broker; None (after reporting the data
    loss) when the partition does not exist any more."""
    import confluent_kafka as ck
    from confluent_kafka import KafkaError, TopicPartition

    deadline = time.monotonic() + opts.task_timeout_ms / 1000.0
    while True:
        try:
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition),
                timeout=max(0.1, min(10.0, deadline - time.monotonic())),
                cached=False,
            )
            return low
        except ck.KafkaException as e:
            err = e.args[0] if e.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code == KafkaError.UNKNOWN_TOPIC_OR_PART or (
                code == KafkaError._UNKNOWN_PARTITION and _partition_is_gone(consumer, topic, partition)
            ):
                data_loss(opts.fail_on_data_loss, f"Cannot read {where}: the partition does not exist any more.")
                return None
            if time.monotonic() >= deadline:
                raise KafkaSourceTimeoutError(
                    f"Timed out after {opts.task_timeout_ms} ms querying the offsets of {where} "
                    f"from {opts.bootstrap_servers}: {opts.redact(str(e))} "
                    f"(option {opts.task_timeout_option})"
                ) from None
            time.sleep(0.2)


def _partition_is_gone(consumer, topic: str, partition: int) -> bool:
    """Whether the topic no longer has the partition, by a metadata request: a pooled consumer's
    metadata may predate partitions added to the topic since, which the request teaches it."""
    import confluent_kafka as ck

    try:
        known = consumer.list_topics(topic, timeout=10.0).topics.get(topic)
    except ck.KafkaException:
        return False
    return known is not None and known.error is None and partition not in known.partitions


def read_ranges(opts: SourceOptions, ranges: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """The records of rows of ``OFFSET_RANGES_SCHEMA``, as Arrow record batches."""
    for topic, partition, start, end in zip(*(ranges.column(name).to_pylist() for name in OFFSET_RANGES_SCHEMA.names)):
        yield from read_partition(opts, topic, partition, start, end)


class _ConsumerPool:
    """Consumers kept by an executor's Python worker between tasks, per client configuration.

    A task reads one offset range and hands its consumer back; the next task with the same
    options takes it and assigns its own range. Connecting, authenticating and fetching
    metadata again for every micro-batch would cost more than reading a small batch. A
    consumer that saw an error is closed instead; idle ones are closed after `IDLE_SECONDS`.

    A range expected to be smaller than the default prefetch (by the mean size of the topic's
    records this worker has read) gets a consumer that prefetches `SHORT_RANGE_PREFETCH_KBYTES`:
    librdkafka fetches ahead of the reader until its queue holds the prefetch, so with the
    default most of what a short range's consumer fetched lay past the range's end, and was
    sent by the broker, parsed and thrown away. Longer ranges keep the deeper queue, which
    keeps a reader of large records from waiting on the broker.
    """

    IDLE_SECONDS = 120.0
    MAX_IDLE = 4
    SHORT_RANGE_PREFETCH_KBYTES = 2 * 1024

    def __init__(self):
        self._idle: dict[tuple, list[tuple[float, object]]] = {}
        self._record_bytes: dict[str, float] = {}  # topic -> mean bytes of a record last read
        self._topics: dict[int, set[str]] = {}  # id of a live consumer -> topics it has metadata of

    @staticmethod
    def _key(opts: SourceOptions, prefetch_kbytes: int) -> tuple:
        config = opts.consumer_config(prefetch_kbytes)
        return tuple(sorted((k, str(v)) for k, v in config.items() if k != "group.id"))

    def prefetch_kbytes(self, topic: str, records: int) -> int:
        """What a consumer reading `records` of `topic` should fetch ahead of the reader."""
        record_bytes = self._record_bytes.get(topic)
        if record_bytes is None or records * record_bytes > PREFETCH_KBYTES * 1024:
            return PREFETCH_KBYTES
        return self.SHORT_RANGE_PREFETCH_KBYTES

    def saw_records(self, topic: str, mean_bytes: float) -> None:
        """Records of `topic` were read, of `mean_bytes` each (0: none were)."""
        if mean_bytes:
            self._record_bytes[topic] = mean_bytes

    def know_topic(self, consumer, topic: str, timeout: float) -> None:
        """Have the consumer fetch the topic's metadata before it is assigned one of its
        partitions: assigned a topic it does not know, librdkafka waits for its next metadata
        refresh, about a second, before the first fetch, which a short range (a table of a
        mirror, a quiet topic) would spend mostly waiting."""
        known = self._topics.setdefault(id(consumer), set())
        if topic in known:
            return
        with contextlib.suppress(Exception):  # the read's own errors say what is wrong with the topic
            consumer.list_topics(topic, timeout=min(timeout, 5.0))
            known.add(topic)

    def acquire(self, opts: SourceOptions, prefetch_kbytes: int):
        self._close_stale()
        idle = self._idle.get(self._key(opts, prefetch_kbytes))
        if idle:
            return idle.pop()[1]
        return new_client("consumer", opts, prefetch_kbytes)[0]

    def release(self, opts: SourceOptions, consumer, reusable: bool, prefetch_kbytes: int) -> None:
        idle = self._idle.setdefault(self._key(opts, prefetch_kbytes), [])
        if reusable and len(idle) < self.MAX_IDLE:
            with contextlib.suppress(Exception):  # a consumer that cannot unassign is closed instead
                consumer.unassign()  # stop prefetching what nobody will read
                idle.append((time.monotonic(), consumer))
                return
        self._topics.pop(id(consumer), None)
        _close_quietly(consumer)

    def _close_stale(self) -> None:
        cutoff = time.monotonic() - self.IDLE_SECONDS
        for idle in self._idle.values():
            for entry in [e for e in idle if e[0] < cutoff]:
                idle.remove(entry)
                self._topics.pop(id(entry[1]), None)
                _close_quietly(entry[1])


def _close_quietly(consumer) -> None:
    with contextlib.suppress(Exception):  # a consumer that fails to close has nothing left to give back
        consumer.close()


_CONSUMERS = _ConsumerPool()
