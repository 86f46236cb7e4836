"""The consumers a range reader reads through, behind one interface (`RangeConsumer`):

- ``native``: the extension built from ``native/`` (``mor_streamer_native``), a librdkafka
  consumer that writes each message straight into Arrow buffers: no Python object and no call
  into Python per record.
- ``python``: confluent-kafka's consumer, whose messages become Arrow arrays a chunk at a time.
  It is what runs where the extension is not installed (a plain ``pip install`` on a machine
  without Rust).

Both are librdkafka underneath, configured by the same settings (`SourceOptions.consumer_config`),
so they read the same records and report the same error codes; `streamer.kafka.reader` keeps the
range logic (gaps, data loss, timeouts) for both.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from streamer.errors import KafkaSourceError
from streamer.kafka.options import SourceOptions
from streamer.logs.clients import ClientLog

NATIVE_MODULE = "mor_streamer_native"
#: What a user without the extension is told to do.
NATIVE_REMEDY = "`make native` builds it (it needs Rust's cargo), or `pip install ./native`"


class ConsumerError(Exception):
    """A librdkafka error from a consumer's request: its code (`confluent_kafka.KafkaError`'s numbers) and text."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code
        self.text = text


@dataclass
class Fetched:
    """What one `RangeConsumer.fetch` found among the messages it consumed."""

    added: int = 0  # records added to the batch: those at lo <= offset < hi
    value_bytes: int = 0  # their values' bytes
    first_seen: int = -1  # the first offset at or after lo, added or not; -1 when none
    last_added: int = -1
    past_end: bool = False  # a record at or after hi was seen
    events: list[tuple[int, int, str]] = field(default_factory=list)  # error messages: code, offset, text


class RangeConsumer(Protocol):
    """A consumer that reads one assigned partition at a time into the rows of a record batch."""

    client_log: ClientLog  # its error events, served by its calls

    @property
    def rows(self) -> int:
        """Records in the batch so far."""
        ...

    @property
    def bytes(self) -> int:
        """Their value bytes."""
        ...

    def assign(self, topic: str, partition: int, offset: int) -> None: ...

    def unassign(self) -> None: ...

    def fetch(self, max_messages: int, timeout_s: float, lo: int, hi: int) -> Fetched: ...

    def flush(self) -> pa.RecordBatch:
        """The batch's records, and a new empty batch."""
        ...

    def position(self, topic: str, partition: int) -> int | None:
        """The offset of the next message the consumer hands out; None when it cannot tell."""
        ...

    def watermarks(self, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
        """The partition's earliest and next offsets; raises `ConsumerError`."""
        ...

    def partitions(self, topic: str, timeout_s: float) -> list[int] | None:
        """The topic's partitions by a metadata request; None when the request or the topic failed."""
        ...

    def close(self) -> None: ...


def native_available() -> bool:
    try:
        importlib.import_module(NATIVE_MODULE)
    except ImportError:
        return False
    return True


def reader_kind(opts: SourceOptions) -> str:
    """``native`` or ``python``: what the option ``reader`` takes on this machine."""
    if opts.reader == "python" or (opts.reader == "auto" and not native_available()):
        return "python"
    if not native_available():
        raise KafkaSourceError(
            f"option 'reader' is 'native' but the native Kafka reader is not installed: {NATIVE_REMEDY}"
        )
    return "native"


def describe_reader(choice: str = "auto") -> str:
    """Which reader the option value `choice` runs here, for the job's first log line and `doctor`."""
    if choice != "python" and native_available():
        from mor_streamer_native import librdkafka_version

        return f"native reader (librdkafka {librdkafka_version()}, records straight into Arrow buffers)"
    from importlib.metadata import version

    reason = "as configured" if choice == "python" else f"the native reader is not installed: {NATIVE_REMEDY}"
    return f"python reader (confluent-kafka {version('confluent-kafka')}; {reason})"


def open_consumer(kind: str, opts: SourceOptions, prefetch_kbytes: int) -> RangeConsumer:
    """A new consumer of `kind` (`reader_kind`) for `opts`."""
    if kind == "native":
        from streamer.kafka.consumer.native import NativeConsumer

        return NativeConsumer(opts, prefetch_kbytes)
    from streamer.kafka.consumer.python import PythonConsumer

    return PythonConsumer(opts, prefetch_kbytes)
