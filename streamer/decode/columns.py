"""The columns a decoded batch has besides the value's fields: the decoded key, the record's Kafka
coordinates, and what the sink needs of bad records (`_error`, `_raw_key`, `_raw_value`) and of
records whose writer schema evolves the table's (`_evolving_schema`), and of change events (`_delete`
marks a delete of the row's key, `_skipped` names why a record writes nothing: a heartbeat, a
truncate, a skipped tombstone)."""

from __future__ import annotations

import pyarrow as pa

KAFKA_KEY = "kafka_key"
KAFKA_TOPIC = "kafka_topic"
KAFKA_PARTITION = "kafka_partition"
KAFKA_OFFSET = "kafka_offset"
KAFKA_TIMESTAMP = "kafka_timestamp"
ERROR = "_error"
RAW_KEY = "_raw_key"
RAW_VALUE = "_raw_value"
EVOLVING = "_evolving_schema"
DELETE = "_delete"
SKIPPED = "_skipped"

KAFKA_COORDINATES = (  # (input column, output field)
    ("topic", pa.field(KAFKA_TOPIC, pa.string())),
    ("partition", pa.field(KAFKA_PARTITION, pa.int32())),
    ("offset", pa.field(KAFKA_OFFSET, pa.int64())),
    ("timestamp", pa.field(KAFKA_TIMESTAMP, pa.timestamp("us", tz="UTC"))),
)
ERROR_FIELDS = (pa.field(ERROR, pa.string()), pa.field(RAW_KEY, pa.binary()), pa.field(RAW_VALUE, pa.binary()))
EVOLVING_FIELD = pa.field(EVOLVING, pa.int32())
DELETE_FIELD = pa.field(DELETE, pa.bool_())
SKIPPED_FIELD = pa.field(SKIPPED, pa.string())
ADDED_COLUMNS = (
    KAFKA_KEY,
    *(f.name for _, f in KAFKA_COORDINATES),
    *(f.name for f in ERROR_FIELDS),
    EVOLVING,
    DELETE,
    SKIPPED,
)
"""The columns the decoder adds to the value's fields: no value field may take these names."""
