"""What a merge-on-read table looks like in a Hive Metastore, as Hudi's `HiveSyncTool` registers it.

Two external tables over the same base path, both Hudi data source tables to Spark:

- `<name>_rt`, the snapshot: Hudi's realtime input format (base files merged with log files);
- `<name>_ro`, read-optimized: Hudi's input format (base files only).

Each carries the table's columns (meta columns first) less the partition columns, which are its
partition keys; Parquet's serde and output format; the serde properties `path` (the base path,
where Spark's Hudi reads) and `hoodie.query.as.ro.table`; and the table properties Spark needs
(`spark.sql.sources.provider=hudi`, the schema). Partitions are registered one per partition
path, at `<base path>/<partition path>`, with the values the path holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa

from table.config.properties import TableConfig
from table.errors import FormatError
from table.read.reader import table_schema_with_meta
from table.sync.hive_schema import hive_type, spark_table_properties

SNAPSHOT_SUFFIX = "_rt"
READ_OPTIMIZED_SUFFIX = "_ro"
REALTIME_INPUT_FORMAT = "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"
INPUT_FORMAT = "org.apache.hudi.hadoop.HoodieParquetInputFormat"
OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
#: The table property recording the last instant the catalog was synced to (HoodieSyncClient).
LAST_COMMIT_TIME_SYNC = "last_commit_time_sync"
PATH_PROPERTY = "path"
READ_OPTIMIZED_PROPERTY = "hoodie.query.as.ro.table"

# Characters Hive escapes in partition names (FileUtils.escapePathName).
_HIVE_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^") | {chr(c) for c in range(1, 0x20)}


@dataclass(frozen=True)
class HiveTable:
    """One table of the registration, as the metastore's Thrift API takes it."""

    database: str
    name: str
    location: str
    columns: tuple[tuple[str, str], ...]  # (name, Hive type), partition columns left out
    partition_keys: tuple[tuple[str, str], ...]
    input_format: str
    serde_properties: dict[str, str] = field(default_factory=dict)
    table_properties: dict[str, str] = field(default_factory=dict)
    output_format: str = OUTPUT_FORMAT
    serde: str = SERDE

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.name}"


def hive_tables(
    config: TableConfig, schema: pa.Schema, location: str, database: str, name: str
) -> tuple[HiveTable, HiveTable]:
    """The `_rt` and `_ro` tables of a merge-on-read table with these columns (no meta columns)."""
    full = table_schema_with_meta(schema)
    partition_fields = tuple(config.partition_fields)
    columns = tuple((f.name, hive_type(f.type)) for f in full if f.name not in partition_fields)
    keys = tuple((p, hive_type(full.field(p).type) if p in full.names else "string") for p in partition_fields)
    spark = spark_table_properties(full, partition_fields)

    def table(suffix: str, input_format: str, read_optimized: bool) -> HiveTable:
        return HiveTable(
            database,
            f"{name}{suffix}",
            location,
            columns,
            keys,
            input_format,
            serde_properties={
                PATH_PROPERTY: location,
                READ_OPTIMIZED_PROPERTY: str(read_optimized).lower(),
                "serialization.format": "1",
            },
            table_properties={"EXTERNAL": "TRUE", **spark},
        )

    return (table(SNAPSHOT_SUFFIX, REALTIME_INPUT_FORMAT, False), table(READ_OPTIMIZED_SUFFIX, INPUT_FORMAT, True))


def partition_values(config: TableConfig, partition_path: str) -> list[str]:
    """The partition key values a partition path holds: `region=emea/day=1` or `emea/1` (the
    field names dropped, URL-encoded values decoded), as Hudi's partition value extractors."""
    if not config.partition_fields:
        return []
    parts = partition_path.split("/")
    if len(parts) != len(config.partition_fields):
        raise FormatError(
            f"partition path {partition_path!r} does not have one part per partition field "
            f"{list(config.partition_fields)}"
        )
    values = [p.split("=", 1)[1] if config.hive_style_partitioning and "=" in p else p for p in parts]
    return [unquote(v) for v in values] if config.url_encode_partitioning else values


def partition_name(config: TableConfig, values: list[str]) -> str:
    """The metastore's name of a partition: `field=value/...`, values escaped as Hive escapes them."""
    return "/".join(f"{k}={_escape(v)}" for k, v in zip(config.partition_fields, values))


def _escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in value)
