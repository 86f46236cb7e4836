"""Reading a table in Spark: a Python data source with one input partition per file slice.

    register(spark)
    spark.read.format("mor").option("columns", "id,amount").load(path)

Each task reads and merges its slice on an executor (the same code as the pure-Python reader);
the driver only lists the slices. Options: `as_of` (time travel to an instant),
`query_type` (`snapshot`, default, or `read_optimized`), `columns` (a comma list: PySpark does not
hand a Python source the columns a query needs, so pruning is asked for explicitly). With
`spark.sql.python.filterPushdown.enabled` set, equality and IN filters on partition fields skip
whole partitions (Spark still applies every filter to the rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator
from urllib.parse import unquote

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, In, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from table.fsview import FileSlice
from table.mor_table import MorTable
from table.read import SliceReadSpec, read_base_file, read_file_slice
from table.storage import Storage

SOURCE_NAME = "mor"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


@dataclass
class SlicePartition(InputPartition):
    value: int
    file_slice: FileSlice
    spec: SliceReadSpec
    base_uri: str
    read_optimized: bool


class MorTableSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _table(self) -> MorTable:
        path = self.options.get("path")
        if not path:
            raise ValueError("the mor source needs a table path: spark.read.format('mor').load(PATH)")
        return MorTable.load(path)

    def _columns(self) -> list[str] | None:
        raw = self.options.get("columns")
        return [c.strip() for c in raw.split(",") if c.strip()] if raw else None

    def schema(self):
        table = self._table()
        _, spec = table.read_plan(self.options.get("as_of"), self._columns())
        schema = pa.schema([spec.schema.field(c) for c in spec.columns]) if spec.columns else spec.schema
        return from_arrow_schema(schema)

    def reader(self, schema) -> DataSourceReader:
        return MorTableReader(self._table().base_uri, dict(self.options), self._columns())


class PushdownMorTableSource(MorTableSource):
    def reader(self, schema) -> DataSourceReader:
        return PushdownMorTableReader(self._table().base_uri, dict(self.options), self._columns())


class MorTableReader(DataSourceReader):
    def __init__(self, base_uri: str, options: dict, columns: list[str] | None):
        self.base_uri = base_uri
        self.options = options
        self.columns = columns
        self.partition_values: dict[str, set[str]] = {}

    def partitions(self) -> list[InputPartition]:
        table = MorTable.load(self.base_uri)
        read_optimized = self.options.get("query_type", "snapshot") == "read_optimized"
        slices, spec = table.read_plan(self.options.get("as_of"), self.columns)
        hive = table.config.hive_style_partitioning
        fields = list(table.config.partition_fields)
        slices = [s for s in slices if self._may_match(s.partition_path, fields, hive)]
        return [SlicePartition(i, s, spec, self.base_uri, read_optimized) for i, s in enumerate(slices)]

    def _may_match(self, partition_path: str, fields: list[str], hive: bool) -> bool:
        if not self.partition_values:
            return True
        values = partition_values(partition_path, fields, hive)
        return all(values.get(f) in allowed for f, allowed in self.partition_values.items())

    def read(self, partition: SlicePartition) -> Iterator[pa.RecordBatch]:
        storage = Storage(partition.base_uri)
        read = read_base_file if partition.read_optimized else read_file_slice
        yield from read(storage, partition.file_slice, partition.spec).to_batches()


class PushdownMorTableReader(MorTableReader):
    def pushFilters(self, filters):
        table = MorTable.load(self.base_uri)
        fields = set(table.config.partition_fields)
        for f in filters:
            if isinstance(f, EqualTo) and len(f.attribute) == 1 and f.attribute[0] in fields:
                self._narrow(f.attribute[0], {str(f.value)})
            elif isinstance(f, In) and len(f.attribute) == 1 and f.attribute[0] in fields:
                self._narrow(f.attribute[0], {str(v) for v in f.value})
            yield f  # Spark still filters rows; pruning only skips partitions that cannot match

    def _narrow(self, field: str, values: set[str]) -> None:
        current = self.partition_values.get(field)
        self.partition_values[field] = values if current is None else current & values


def partition_values(partition_path: str, fields: list[str], hive_style: bool) -> dict[str, str]:
    """Field values encoded in a partition path (`f=v/g=w` or `v/w`)."""
    parts = partition_path.split("/") if partition_path else []
    if hive_style:
        return {k: unquote(v) for k, _, v in (p.partition("=") for p in parts)}
    return {f: unquote(v) for f, v in zip(fields, parts)}


def register(spark: SparkSession) -> None:
    """Register the `mor` format; with filter pushdown enabled, the variant that prunes partitions."""
    pushdown = (spark.conf.get(PUSHDOWN_CONF, "false") or "false").lower() == "true"
    spark.dataSource.register(PushdownMorTableSource if pushdown else MorTableSource)
