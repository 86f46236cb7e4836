"""Reading one offset range of a topic-partition into Arrow record batches: the part of the
``kafka-arrow`` source that runs in Spark's tasks, and in the sink's own pass over the offset
ranges Spark planned (``offsetRanges=true``). Consumers are kept between tasks by the executor's
Python worker."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pyarrow as pa

from streamer.errors import KafkaSourceError, KafkaSourceTimeoutError
from streamer.kafka.consumer import ConsumerError, RangeConsumer, open_consumer, reader_kind
from streamer.kafka.data_loss import data_loss
from streamer.kafka.options import PREFETCH_KBYTES, SourceOptions, describe_partition
from streamer.kafka.refusals import refusal_error
from streamer.kafka.schema import OFFSET_RANGES_SCHEMA


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
    """Read offsets [start, end) of one topic-partition as Arrow record batches, through the
    reader the option ``reader`` chooses (`streamer.kafka.consumer`).

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
    from confluent_kafka import KafkaError

    timeout_s = opts.task_timeout_ms / 1000.0
    where = f"{describe_partition((topic, partition))} (offsets [{start}, {end}))"
    prefetch = _CONSUMERS.prefetch_kbytes(topic, end - start)
    consumer = _CONSUMERS.acquire(opts, prefetch)
    reusable = False
    read_rows = read_bytes = 0  # of this range, whose mean record size sizes the next fetch
    try:
        knows_topic = _CONSUMERS.know_topic(consumer, topic, timeout_s)
        consumer.assign(topic, partition, start)
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
            want = min(batch_size - consumer.rows, end - next_offset, 100_000)
            if read_bytes:  # large records: keep the batch near arrowMaxBatchBytes
                want = min(want, int((max_bytes - consumer.bytes) * read_rows / read_bytes))
            else:  # record size not known yet: a small first chunk
                want = min(want, 100)
            got = consumer.fetch(max(1, want), 0.1, next_offset, end)
            read_rows += got.added
            read_bytes += got.value_bytes
            now = time.monotonic()
            if got.first_seen >= 0:
                if not begun:
                    begun = True
                    if got.first_seen > next_offset and resume_after_retention() is None:
                        done = True  # the partition is gone
                if got.added:
                    next_offset = got.last_added + 1
                done = done or got.past_end or next_offset >= end
                deadline = now + timeout_s
            for code, offset, text in got.events:
                if code == KafkaError._PARTITION_EOF:
                    eof_at = offset
                    if not begun and eof_at > next_offset and got.first_seen < 0:
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
                        done = True
                    else:
                        next_offset = resumed
                        consumer.assign(topic, partition, resumed)
                    deadline = now + timeout_s
                elif code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC) or (
                    code == KafkaError._UNKNOWN_PARTITION and _partition_is_gone(consumer, topic, partition)
                ):
                    data_loss(opts.fail_on_data_loss, f"Cannot read {where}: the partition does not exist any more.")
                    done = True
                elif code == KafkaError._FATAL:
                    raise KafkaSourceError(f"fatal Kafka error reading {where}: {opts.redact(text)}")
                else:
                    last_problem = opts.redact(text)
            if not done and not got.added and consumer.client_log.refusal is not None:
                raise refusal_error(opts, *consumer.client_log.refusal)  # waiting cannot mend it
            if not done and not got.added and not knows_topic:
                knows_topic = _CONSUMERS.know_topic(consumer, topic, 1.0)
            if not done and not got.added:
                # Gaps: the position may have passed `end` without a record at end - 1.
                pos = consumer.position(topic, partition)
                if pos is not None:
                    if not begun and pos > next_offset:
                        begun = True
                        if resume_after_retention() is None:
                            pos = end  # the partition is gone
                    if pos >= end:
                        done = True
                if not done and now >= deadline:
                    detail = f"; last error: {last_problem}" if last_problem else ""
                    eof = f"; broker reports the partition ends at {eof_at}" if eof_at >= 0 else ""
                    raise KafkaSourceTimeoutError(
                        f"Timed out after {opts.task_timeout_ms} ms without progress reading {where} "
                        f"from {opts.bootstrap_servers}: next offset {next_offset}{eof}{detail}. "
                        f"Is the broker reachable? (option {opts.task_timeout_option})"
                    )
            if consumer.rows and (consumer.rows >= batch_size or consumer.bytes >= max_bytes or done):
                yield consumer.flush()
        reusable = True
    finally:
        _CONSUMERS.release(opts, consumer, reusable, prefetch)
        _CONSUMERS.saw_records(topic, read_bytes / read_rows if read_rows else 0.0)


def _earliest_offset(
    consumer: RangeConsumer, opts: SourceOptions, topic: str, partition: int, where: str
) -> int | None:
    """The partition's earliest offset now, asked of the broker; None (after reporting the data
    loss) when the partition does not exist any more."""
    from confluent_kafka import KafkaError

    deadline = time.monotonic() + opts.task_timeout_ms / 1000.0
    while True:
        try:
            low, _high = consumer.watermarks(topic, partition, max(0.1, min(10.0, deadline - time.monotonic())))
            return low
        except ConsumerError as e:
            if e.code == KafkaError.UNKNOWN_TOPIC_OR_PART or (
                e.code == KafkaError._UNKNOWN_PARTITION and _partition_is_gone(consumer, topic, partition)
            ):
                data_loss(opts.fail_on_data_loss, f"Cannot read {where}: the partition does not exist any more.")
                return None
            if time.monotonic() >= deadline:
                raise KafkaSourceTimeoutError(
                    f"Timed out after {opts.task_timeout_ms} ms querying the offsets of {where} "
                    f"from {opts.bootstrap_servers}: {opts.redact(e.text)} "
                    f"(option {opts.task_timeout_option})"
                ) from None
            time.sleep(0.2)


def _partition_is_gone(consumer: RangeConsumer, topic: str, partition: int) -> bool:
    """Whether the topic no longer has the partition, by a metadata request: a pooled consumer's
    metadata may predate partitions added to the topic since, which the request teaches it."""
    known = consumer.partitions(topic, 10.0)
    return known is not None and partition not in known


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
        self._lock = threading.Lock()  # the driver reads a batch's ranges on several threads
        self._idle: dict[tuple, list[tuple[float, RangeConsumer]]] = {}
        self._record_bytes: dict[str, float] = {}  # topic -> mean bytes of a record last read
        self._topics: dict[int, set[str]] = {}  # id of a live consumer -> topics it has metadata of

    @staticmethod
    def _key(opts: SourceOptions, prefetch_kbytes: int) -> tuple:
        config = opts.consumer_config(prefetch_kbytes)
        settings = tuple(sorted((k, str(v)) for k, v in config.items() if k != "group.id"))
        return (reader_kind(opts), opts.include_headers, settings)

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

    def know_topic(self, consumer: RangeConsumer, topic: str, timeout: float) -> bool:
        """Have the consumer fetch the topic's metadata before it is assigned one of its
        partitions: assigned a topic it does not know, librdkafka waits for its next metadata
        refresh, about a second, before the first fetch, which a short range (a table of a
        mirror, a quiet topic) would spend mostly waiting. False when the brokers did not
        answer: after a failed request librdkafka waits minutes to ask again, so the reader asks
        again itself while it makes no progress. One request waits at most a second: a broker that
        refuses this client answers none, and the read's first fetch tells the refusal."""
        known = self._topics.setdefault(id(consumer), set())
        if topic in known:
            return True
        if consumer.partitions(topic, min(timeout, 1.0)) is None:  # the read's own errors say what is wrong
            return False
        known.add(topic)
        return True

    def acquire(self, opts: SourceOptions, prefetch_kbytes: int) -> RangeConsumer:
        key = self._key(opts, prefetch_kbytes)
        with self._lock:
            stale = self._take_stale()
            idle = self._idle.get(key)
            kept = idle.pop()[1] if idle else None
        for consumer in stale:
            self._close(consumer)
        return kept if kept is not None else open_consumer(reader_kind(opts), opts, prefetch_kbytes)

    def release(self, opts: SourceOptions, consumer: RangeConsumer, reusable: bool, prefetch_kbytes: int) -> None:
        key = self._key(opts, prefetch_kbytes)
        if reusable and len(self._idle.get(key, ())) < self.MAX_IDLE:
            try:
                consumer.unassign()  # stop prefetching what nobody will read
            except Exception:  # noqa: BLE001 - a consumer that cannot unassign is closed instead
                pass
            else:
                with self._lock:
                    idle = self._idle.setdefault(key, [])
                    if len(idle) < self.MAX_IDLE:
                        idle.append((time.monotonic(), consumer))
                        return
        self._close(consumer)

    def _take_stale(self) -> list[RangeConsumer]:
        """The consumers idle for longer than `IDLE_SECONDS`, taken out of the pool."""
        cutoff = time.monotonic() - self.IDLE_SECONDS
        stale = []
        for idle in self._idle.values():
            stale += [consumer for since, consumer in idle if since < cutoff]
            idle[:] = [entry for entry in idle if entry[0] >= cutoff]
        return stale

    def _close(self, consumer: RangeConsumer) -> None:
        self._topics.pop(id(consumer), None)
        _close_quietly(consumer)


def _close_quietly(consumer: RangeConsumer) -> None:
    with contextlib.suppress(Exception):  # a consumer that fails to close has nothing left to give back
        consumer.close()


_CONSUMERS = _ConsumerPool()
