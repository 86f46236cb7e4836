"""The rows the ``kafka-arrow`` source hands Spark: Spark's schemas and the Arrow schemas of the
record batches that carry them.

Output schema (the same as Spark's Kafka source with ``includeHeaders=true``)::

    key binary, value binary, topic string, partition int, offset bigint,
    timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>

With ``offsetRanges=true`` the source hands Spark the offset ranges it planned instead, one row
per task: ``topic string, partition int, from_offset long, until_offset long``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streamer.kafka.planning import OffsetRange

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
KAFKA_SCHEMA_WITHOUT_HEADERS = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
KAFKA_SCHEMA = StructType([*KAFKA_SCHEMA_WITHOUT_HEADERS.fields, StructField("headers", HEADERS_TYPE)])
OFFSET_RANGES_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("from_offset", LongType()),
        StructField("until_offset", LongType()),
    ]
)

ARROW_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_HEADERS = pa.list_(pa.field("element", ARROW_HEADER))
ARROW_TIMESTAMP = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA_WITHOUT_HEADERS = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", ARROW_TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
)
ARROW_SCHEMA = ARROW_SCHEMA_WITHOUT_HEADERS.append(pa.field("headers", ARROW_HEADERS))
ARROW_OFFSET_RANGES_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("from_offset", pa.int64()), ("until_offset", pa.int64())]
)


def offset_ranges_batch(ranges: Sequence[OffsetRange]) -> pa.RecordBatch:
    """Offset ranges as rows of `ARROW_OFFSET_RANGES_SCHEMA`."""
    return pa.RecordBatch.from_pydict(
        {
            "topic": [tp[0] for tp, _, _ in ranges],
            "partition": [tp[1] for tp, _, _ in ranges],
            "from_offset": [a for _, a, _ in ranges],
            "until_offset": [b for _, _, b in ranges],
        },
        schema=ARROW_OFFSET_RANGES_SCHEMA,
    )
