"""The quarantine table: Kafka records that could not be decoded, kept with the reason.

It is a merge-on-read table like any other (readable by every Hudi reader), partitioned by
topic and keyed by partition and offset, so replaying a batch rewrites the same rows instead of
adding copies.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from streamer.decode.columns import (
    ERROR,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_KEY,
    RAW_VALUE,
)
from table import LogBlockFormat, MorTable, TableSpec, TableWriter, WriteOptions

SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("reason", pa.string()),
        pa.field("query_id", pa.string()),
        pa.field("batch_id", pa.int64()),
    ]
)


class QuarantineTable:
    """The target table's sibling that takes its bad records."""

    def __init__(
        self,
        path: str,
        target_name: str,
        log_block_format: LogBlockFormat = WriteOptions.log_block_format,
        storage_options: Mapping[str, str] | None = None,
    ):
        self.table = MorTable.create_or_load(
            path,
            TableSpec(
                name=f"{target_name}_quarantine",
                schema=SCHEMA,
                record_key_fields=("record_id",),
                partition_fields=("topic",),
                ordering_field="batch_id",
            ),
            storage_options,
        )
        self._writer: TableWriter = self.table.writer(
            WriteOptions(initial_buckets=1, log_block_format=log_block_format),
            description=f"quarantine of {target_name}",
        )

    def open(self) -> QuarantineTable:
        self._writer.open()
        return self

    def close(self) -> None:
        self._writer.close()

    def write(self, bad: pa.Table, query_id: str, batch_id: int) -> str:
        """Upsert a batch's bad records (columns `streamer.batch_tally.BAD_COLUMNS`) in this process:
        they are few, and already on the driver."""
        n = bad.num_rows
        partition, offset = bad[KAFKA_PARTITION], bad[KAFKA_OFFSET]
        rows = pa.table(
            {
                "record_id": pc.binary_join_element_wise(partition.cast(pa.string()), offset.cast(pa.string()), "-"),
                "topic": bad[KAFKA_TOPIC],
                "partition": partition,
                "offset": offset,
                "timestamp": bad[KAFKA_TIMESTAMP],
                "key": bad[RAW_KEY],
                "value": bad[RAW_VALUE],
                "reason": bad[ERROR],
                "query_id": pa.repeat(pa.scalar(query_id, pa.string()), n),
                "batch_id": pa.repeat(pa.scalar(batch_id, pa.int64()), n),
            },
            schema=SCHEMA,
        )
        return self._writer.upsert(rows)
