"""Reading a table in Spark: a Python data source whose tasks each read a few file slices.

    register(spark)
    spark.read.format("mor").option("columns", "id,amount").load(path)

Each task reads and merges its slices on an executor (the same code as the pure-Python reader);
the driver only lists the slices and packs them into tasks as Spark packs files: up to
`max_partition_bytes` (128 MiB) per task, each slice counting at least `open_cost_bytes`
(4 MiB), and no fewer tasks than `min_partitions` (the driver's cores) while slices last. Options:
`as_of` (time travel to an instant), `query_type` (`snapshot`, default, or `read_optimized`),
`columns` (a comma list: PySpark does not hand a Python source the columns a query needs, so
pruning is asked for explicitly). With `spark.sql.python.filterPushdown.enabled` set, equality
and IN filters on partition fields skip whole partitions, and comparisons with constants on any
top-level column skip Parquet row groups by their statistics and rows before they reach Spark
(Spark still applies every filter to the rows). Options named `aws_*` are the table's storage
options (`table.storage.file_io.S3Options`): they travel with each task, so executors reach the store as
the driver does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from table.errors import InvalidRequestError
from table.file_group.fs_view import FileSlice
from table.mor_table import MorTable
from table.read.predicate import NOT_NULL, Predicate
from table.read.reader import SliceReadSpec, read_base_file, read_file_slices
from table.storage.file_io import Storage
from table.units import MIB

SOURCE_NAME = "mor"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
MAX_PARTITION_BYTES = 128 * MIB
OPEN_COST_BYTES = 4 * MIB
_COMPARISONS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}


@dataclass
class SlicesPartition(InputPartition):
    value: int
    file_slices: list[FileSlice]
    spec: SliceReadSpec
    storage: Storage
    read_optimized: bool


class MorTableSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _table(self) -> MorTable:
        path = self.options.get("path")
        if not path:
            raise InvalidRequestError("the mor source needs a table path: spark.read.format('mor').load(PATH)")
        return MorTable.load(path, storage_options(self.options))

    def _columns(self) -> list[str] | None:
        raw = self.options.get("columns")
        return [c.strip() for c in raw.split(",") if c.strip()] if raw else None

    def schema(self) -> StructType:
        spec = self._table().read_spec(self.options.get("as_of"), self._columns())
        schema = pa.schema([spec.schema.field(c) for c in spec.columns]) if spec.columns else spec.schema
        return from_arrow_schema(schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return MorTableReader(self._table().base_uri, dict(self.options), self._columns())


class PushdownMorTableSource(MorTableSource):
    def reader(self, schema: StructType) -> DataSourceReader:
        return PushdownMorTableReader(self._table().base_uri, dict(self.options), self._columns())


def storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """The reader options that say how to reach the table's store."""
    return {k: v for k, v in dict(options).items() if k.lower().startswith("aws_")}


class MorTableReader(DataSourceReader):
    def __init__(self, base_uri: str, options: dict[str, str], columns: list[str] | None):
        self.base_uri = base_uri
        self.storage_options = storage_options(options)
        self.options = options
        self.columns = columns
        self.partition_values: dict[str, set[str]] = {}
        self.predicates: list[Predicate] = []

    def partitions(self) -> list[InputPartition]:
        table = MorTable.load(self.base_uri, self.storage_options)
        read_optimized = self.options.get("query_type", "snapshot") == "read_optimized"
        slices, spec = table.read_plan(self.options.get("as_of"), self.columns, self.predicates)
        hive = table.config.hive_style_partitioning
        fields = list(table.config.partition_fields)
        slices = [s for s in slices if self._may_match(s.partition_path, fields, hive)]
        tasks = pack_slices(
            slices,
            max_bytes=int(self.options.get("max_partition_bytes", MAX_PARTITION_BYTES)),
            open_cost=int(self.options.get("open_cost_bytes", OPEN_COST_BYTES)),
            min_tasks=int(self.options.get("min_partitions", os.cpu_count() or 1)),
        )
        return [SlicesPartition(i, task, spec, table.storage, read_optimized) for i, task in enumerate(tasks)]

    def _may_match(self, partition_path: str, fields: list[str], hive: bool) -> bool:
        if not self.partition_values:
            return True
        values = partition_values(partition_path, fields, hive)
        return all(values.get(f) in allowed for f, allowed in self.partition_values.items())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SlicesPartition):
            raise InvalidRequestError(
                f"the mor source reads the partitions it planned, not a {type(partition).__name__}"
            )
        tables: Iterator[pa.Table]
        if partition.read_optimized:
            tables = (read_base_file(partition.storage, s, partition.spec) for s in partition.file_slices)
        else:
            tables = read_file_slices(partition.storage, partition.file_slices, partition.spec)
        for rows in tables:
            yield from rows.to_batches()


class PushdownMorTableReader(MorTableReader):
    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        table = MorTable.load(self.base_uri, self.storage_options)
        fields = set(table.config.partition_fields)
        for f in filters:
            if isinstance(f, EqualTo) and len(f.attribute) == 1 and f.attribute[0] in fields:
                self._narrow(f.attribute[0], {str(f.value)})
            elif isinstance(f, In) and len(f.attribute) == 1 and f.attribute[0] in fields:
                self._narrow(f.attribute[0], {str(v) for v in f.value})
            predicate = predicate_of(f)
            if predicate is not None:
                self.predicates.append(predicate)
            yield f  # Spark still filters rows; pruning only skips what cannot match

    def _narrow(self, field: str, values: set[str]) -> None:
        current = self.partition_values.get(field)
        self.partition_values[field] = values if current is None else current & values


def predicate_of(f: Filter) -> Predicate | None:
    """The predicate a reader can skip by, for a filter on one top-level column and a constant."""
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attribute) != 1:
        return None
    column = attribute[0]
    if isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual) and f.value is not None:
        return Predicate(column, _COMPARISONS[type(f)], f.value)
    if isinstance(f, In) and all(v is not None for v in f.value):
        return Predicate(column, "in", tuple(f.value))
    if isinstance(f, IsNotNull):
        return Predicate(column, NOT_NULL)
    return None


def pack_slices(slices: Sequence[FileSlice], max_bytes: int, open_cost: int, min_tasks: int) -> list[list[FileSlice]]:
    """Slices grouped into tasks as Spark packs file splits: largest first, a new task once the
    current one would pass the limit, `max_bytes` lowered so that about `min_tasks` tasks are made."""
    if not slices:
        return []
    costs = [max(s.total_size, open_cost) for s in slices]
    limit = max(open_cost, min(max_bytes, sum(costs) // max(1, min_tasks)))
    tasks: list[list[FileSlice]] = []
    current: list[FileSlice] = []
    size = 0
    for cost, file_slice in sorted(zip(costs, slices), key=lambda c: -c[0]):
        if current and size + cost > limit:
            tasks.append(current)
            current, size = [], 0
        current.append(file_slice)
        size += cost
    tasks.append(current)
    return tasks


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
