"""The streamer's named choices, each a `StrEnum` defined once; the engine's are in
`table.config.choices`.

The config model takes them as key types (the YAML holds their values), the decoder, the sink
and the jobs compare with their members, and the command line offers their values.
"""

from __future__ import annotations

from table import Choice


class SourceFormat(Choice):
    """The Spark stream source a table's query reads Kafka with."""

    KAFKA_ARROW = "kafka-arrow"
    KAFKA = "kafka"


class StartingOffsets(Choice):
    """Where a query without a Spark checkpoint starts, when not at offsets given by topic."""

    EARLIEST = "earliest"
    LATEST = "latest"


class DecodeFormat(Choice):
    """How Kafka key or value bytes are decoded."""

    NONE = "none"
    STRING = "string"
    BINARY = "binary"
    JSON = "json"
    AVRO = "avro"
    CONFLUENT_AVRO = "confluent-avro"


class RecordFormat(Choice):
    """The decode formats whose record becomes fields (a struct): the only ones a value can have.
    Each is a `DecodeFormat` of the same value."""

    JSON = DecodeFormat.JSON.value
    AVRO = DecodeFormat.AVRO.value
    CONFLUENT_AVRO = DecodeFormat.CONFLUENT_AVRO.value


class BadRecordPolicy(Choice):
    """What happens to a record that cannot be decoded."""

    FAIL = "fail"
    SKIP = "skip"
    QUARANTINE = "quarantine"


class QueryFailurePolicy(Choice):
    """What the other tables' queries do when one table's query fails."""

    CONTINUE = "continue"
    STOP_APPLICATION = "stop_application"


class ServiceMode(Choice):
    """Where a table service runs: in the sink after a commit, on the application's background
    thread, or only by the offline command."""

    OFF = "off"
    INLINE = "inline"
    ASYNC = "async"


class Envelope(Choice):
    """What wraps the row in a value: nothing, or a change event of Debezium's."""

    NONE = "none"
    DEBEZIUM = "debezium"


class TombstonePolicy(Choice):
    """What a record whose value is null (a tombstone) does."""

    DELETE = "delete"
    SKIP = "skip"
    BAD = "bad"


class EnvelopeField(Choice):
    """The fields of a change event that can be kept as table columns."""

    POSITION = "position"
    OP = "op"
    SOURCE_TS_MS = "source_ts_ms"
    TS_MS = "ts_ms"
