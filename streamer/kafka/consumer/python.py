"""The ``python`` reader: confluent-kafka's consumer, its messages turned into Arrow arrays a
chunk at a time."""

from __future__ import annotations

import bisect
import itertools

import numpy as np
import pyarrow as pa

from streamer.kafka.consumer import ConsumerError, Fetched
from streamer.kafka.options import SourceOptions, new_client
from streamer.kafka.schema import (
    ARROW_HEADER,
    ARROW_HEADERS,
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITHOUT_HEADERS,
    ARROW_TIMESTAMP,
)


class _BatchBuilder:
    """Accumulates confluent-kafka messages and emits Arrow record batches. A chunk's keys and
    values are taken through the messages' C accessors (no Python frame per message) and become
    Arrow arrays once per batch, so their bytes are copied once, from Python's to Arrow's: a
    record costs about a microsecond here."""

    def __init__(self, include_headers: bool):
        self.include_headers = include_headers
        self.schema = ARROW_SCHEMA if include_headers else ARROW_SCHEMA_WITHOUT_HEADERS
        self._reset()

    def _reset(self):
        self.chunks: list = []  # (keys, values, offsets, timestamp pairs) per chunk of messages, as lists
        self.headers: list = []
        self.rows = 0
        self.bytes = 0

    def add(self, msgs: list, offsets: list) -> int:
        """Add the messages; returns their value bytes."""
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
        return added

    def flush(self, topic: str, partition: int) -> pa.RecordBatch:
        n = self.rows
        keys, values, offsets, stamp_chunks = zip(*self.chunks)
        stamps = np.concatenate(stamp_chunks)
        # confluent-kafka: 0 not available, 1 create time, 2 log-append time;
        # Spark / Java client: -1, 0, 1.
        cols = [
            pa.array(list(itertools.chain.from_iterable(keys)), pa.binary()),
            pa.array(list(itertools.chain.from_iterable(values)), pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
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


class PythonConsumer:
    """A `RangeConsumer` over confluent-kafka's `Consumer`."""

    def __init__(self, opts: SourceOptions, prefetch_kbytes: int):
        self._consumer, self.client_log = new_client("consumer", opts, prefetch_kbytes)
        self._builder = _BatchBuilder(opts.include_headers)
        self._assigned: tuple[str, int] = ("", -1)

    @property
    def rows(self) -> int:
        return self._builder.rows

    @property
    def bytes(self) -> int:
        return self._builder.bytes

    def assign(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(topic, partition, offset)])
        self._assigned = (topic, partition)

    def unassign(self) -> None:
        self._consumer.unassign()

    def fetch(self, max_messages: int, timeout_s: float, lo: int, hi: int) -> Fetched:
        from confluent_kafka import Message

        fetched = Fetched()
        msgs = self._consumer.consume(num_messages=max_messages, timeout=timeout_s)
        if any(m.error() is not None for m in msgs):
            for m in msgs:
                err = m.error()
                if err is not None:
                    offset = m.offset()
                    fetched.events.append((err.code(), -1 if offset is None else offset, err.str()))
            msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            return fetched
        offsets: list[int] = list(map(Message.offset, msgs))  # type: ignore[arg-type]  # a record's offset is set
        if offsets[0] < lo:  # never hand out a record twice / from before the range
            k = bisect.bisect_left(offsets, lo)
            msgs, offsets = msgs[k:], offsets[k:]
        if not msgs:
            return fetched
        fetched.first_seen = offsets[0]
        if offsets[-1] >= hi:
            k = bisect.bisect_left(offsets, hi)
            msgs, offsets = msgs[:k], offsets[:k]
            fetched.past_end = True
        if msgs:
            fetched.value_bytes = self._builder.add(msgs, offsets)
            fetched.added = len(msgs)
            fetched.last_added = offsets[-1]
        return fetched

    def flush(self) -> pa.RecordBatch:
        return self._builder.flush(*self._assigned)

    def position(self, topic: str, partition: int) -> int | None:
        import confluent_kafka as ck

        try:
            return self._consumer.position([ck.TopicPartition(topic, partition)])[0].offset
        except ck.KafkaException:
            return None

    def watermarks(self, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
        import confluent_kafka as ck

        try:
            return self._consumer.get_watermark_offsets(
                ck.TopicPartition(topic, partition), timeout=timeout_s, cached=False
            )
        except ck.KafkaException as e:
            err = e.args[0] if e.args else None
            if isinstance(err, ck.KafkaError):
                raise ConsumerError(err.code(), err.str()) from None
            raise ConsumerError(ck.KafkaError._FAIL, str(e)) from None

    def partitions(self, topic: str, timeout_s: float) -> list[int] | None:
        import confluent_kafka as ck

        try:
            known = self._consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except ck.KafkaException:
            return None
        if known is None or known.error is not None:
            return None
        return list(known.partitions)

    def close(self) -> None:
        self._consumer.close()
