"""The quarantine table: Kafka records that could not be decoded, kept with the reason.

It is a merge-on-read table like any other (readable by every Hudi reader), partitioned by
topic and keyed by partition and offset, so replaying a batch rewrites the same rows instead of
adding copies.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from table.mor_table import MorTable, TableSpec, TableWriter, WriteOptions
from table.spark_write import upsert_dataframe

SCHEMA = pa.schema([
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
])


class QuarantineTable:
    """The target table's sibling that takes its bad records."""

    def __init__(self, path: str, target_name: str, log_block_format: str = "parquet"):
        self.table = MorTable.create_or_load(path, TableSpec(
            name=f"{target_name}_quarantine",
            schema=SCHEMA,
            record_key_fields=("record_id",),
            partition_fields=("topic",),
            ordering_field="batch_id",
        ))
        self._writer: TableWriter = self.table.writer(
            WriteOptions(initial_buckets=1, log_block_format=log_block_format),
            description=f"quarantine of {target_name}")

    def open(self) -> "QuarantineTable":
        self._writer.open()
        return self

    def close(self) -> None:
        self._writer.close()

    def write(self, bad_rows: DataFrame, query_id: str, batch_id: int) -> str | None:
        """Upsert the batch's bad records (columns kafka_*, _error, _raw_key, _raw_value)."""
        rows = bad_rows.select(
            F.concat_ws("-", F.col("kafka_partition").cast("string"), F.col("kafka_offset").cast("string")).alias("record_id"),
            F.col("kafka_topic").alias("topic"),
            F.col("kafka_partition").alias("partition"),
            F.col("kafka_offset").alias("offset"),
            F.col("kafka_timestamp").alias("timestamp"),
            F.col("_raw_key").alias("key"),
            F.col("_raw_value").alias("value"),
            F.col("_error").alias("reason"),
            F.lit(query_id).alias("query_id"),
            F.lit(batch_id).cast("long").alias("batch_id"),
        )
        return upsert_dataframe(self._writer, rows)
