"""The ``native`` reader: `mor_streamer_native.RangeConsumer` (built from ``native/``) fills
Arrow's buffers in Rust as it consumes; a batch becomes arrays by wrapping them, without a
look at a record."""

from __future__ import annotations

import logging

import pyarrow as pa

from streamer.config.secrets import redact_options
from streamer.errors import KafkaSourceError
from streamer.kafka.consumer import ConsumerError, Fetched
from streamer.kafka.options import SourceOptions
from streamer.kafka.schema import (
    ARROW_HEADER,
    ARROW_HEADERS,
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITHOUT_HEADERS,
    ARROW_TIMESTAMP,
)
from streamer.logs.clients import LIBRDKAFKA, ClientLog


def _setting(value: object) -> str:
    """A setting as librdkafka's configuration takes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _binary(kind: pa.DataType, rows: int, buffers: tuple) -> pa.Array:
    validity, offsets, data, nulls = buffers
    return pa.Array.from_buffers(
        kind,
        rows,
        [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


class NativeConsumer:
    """A `RangeConsumer` over the extension's consumer."""

    def __init__(self, opts: SourceOptions, prefetch_kbytes: int):
        from mor_streamer_native import NativeKafkaError, RangeConsumer

        self._error_type = NativeKafkaError
        self.client_log = ClientLog(f"consumer of {opts.bootstrap_servers}")
        settings = [(k, _setting(v)) for k, v in opts.consumer_config(prefetch_kbytes).items()]
        try:
            self._consumer = RangeConsumer(settings)
        except NativeKafkaError as e:
            raise KafkaSourceError(
                f"cannot create the Kafka consumer: {opts.redact(str(e.args[1]))} "
                f"(options: {redact_options(opts.raw_options)})"
            ) from None
        self._headers = opts.include_headers
        self._schema = ARROW_SCHEMA if opts.include_headers else ARROW_SCHEMA_WITHOUT_HEADERS
        self._assigned: tuple[str, int] = ("", -1)
        self.rows = 0
        self.bytes = 0

    def _error(self, e: Exception) -> ConsumerError:
        code, text = e.args
        return ConsumerError(code, text)

    def _serve_client_events(self) -> None:
        """librdkafka's error events and log lines since the last call, to the client's log."""
        for code, fatal, text in self._consumer.drain_errors():
            self.client_log.on_error_event(code, fatal, text)
        lines = self._consumer.drain_logs()
        if lines and LIBRDKAFKA.isEnabledFor(logging.DEBUG):
            for line in lines:
                LIBRDKAFKA.debug("%s: %s", self.client_log.client, line)

    def assign(self, topic: str, partition: int, offset: int) -> None:
        self._consumer.assign(topic, partition, offset)
        self._assigned = (topic, partition)

    def unassign(self) -> None:
        self._consumer.unassign()

    def fetch(self, max_messages: int, timeout_s: float, lo: int, hi: int) -> Fetched:
        added, value_bytes, first_seen, last_added, past_end, events = self._consumer.fetch(
            max_messages, int(timeout_s * 1000), lo, hi, self._headers
        )
        self._serve_client_events()
        self.rows += added
        self.bytes += value_bytes
        return Fetched(added, value_bytes, first_seen, last_added, past_end, events)

    def flush(self) -> pa.RecordBatch:
        rows, keys, values, offsets, stamps, stamp_types, headers = self._consumer.flush(self._headers)
        topic, partition = self._assigned
        cols = [
            _binary(pa.binary(), rows, keys),
            _binary(pa.binary(), rows, values),
            pa.repeat(pa.scalar(topic, pa.string()), rows),
            pa.repeat(pa.scalar(partition, pa.int32()), rows),
            pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(ARROW_TIMESTAMP, rows, [None, pa.py_buffer(stamps)]),
            pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(stamp_types)]),
        ]
        if self._headers:
            cols.append(_headers(rows, headers))
        self.rows = 0
        self.bytes = 0
        return pa.RecordBatch.from_arrays(cols, schema=self._schema)

    def position(self, topic: str, partition: int) -> int | None:
        try:
            return self._consumer.position(topic, partition)
        except self._error_type:
            return None

    def watermarks(self, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
        try:
            return self._consumer.watermarks(topic, partition, int(timeout_s * 1000))
        except self._error_type as e:
            raise self._error(e) from None
        finally:
            self._serve_client_events()

    def partitions(self, topic: str, timeout_s: float) -> list[int] | None:
        try:
            error, partitions = self._consumer.topic_partitions(topic, int(timeout_s * 1000))
        except self._error_type:
            return None
        finally:
            self._serve_client_events()
        return None if error else partitions

    def close(self) -> None:
        self._consumer.close()


def _headers(rows: int, buffers: tuple) -> pa.Array:
    """Each record's headers; null where a record has none, as Spark's Kafka source gives them."""
    validity, list_offsets, nulls, names, values = buffers
    if nulls == rows:
        return pa.nulls(rows, ARROW_HEADERS)
    count = (len(names[1]) // 4) - 1
    entries = pa.StructArray.from_arrays(
        [_binary(pa.string(), count, names), _binary(pa.binary(), count, values)], fields=list(ARROW_HEADER)
    )
    return pa.Array.from_buffers(
        ARROW_HEADERS,
        rows,
        [None if validity is None else pa.py_buffer(validity), pa.py_buffer(list_offsets)],
        null_count=nulls,
        children=[entries],
    )
