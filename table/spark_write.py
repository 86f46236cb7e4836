"""Distributed upsert of a Spark DataFrame: one deltacommit, data written on executors.

Executors key, validate and route the rows (the rings of the batch's partitions are broadcast),
the rows are shuffled by file group, and each group writes its base or log file where it lands.
Only the write stats come back to the driver, which completes the commit.
"""

from __future__ import annotations

import json
from typing import Iterator

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from table.commit_metadata import WriteStat
from table.keys import KeyGenerator
from table.mor_table import TableWriter
from table.schema import PARTITION_PATH, RECORD_KEY
from table.write import FILE_ID, IS_DELETE, POSITION, dedupe_latest, prepare_batch, route_rows, write_file_group

STAT_SCHEMA = "stat string"


def upsert_dataframe(writer: TableWriter, df: DataFrame, extra_metadata: dict[str, str] | None = None) -> str | None:
    """Upsert a DataFrame as one deltacommit; returns the instant, or None for an empty batch."""
    incoming = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
    data_schema = writer.check_schema(incoming)
    spec = writer.batch_spec
    key_generator = writer.key_generator
    # Keyed rows carry their partition and record key; dedup happens per file group below.
    df = df.withColumn(POSITION, F.monotonically_increasing_id())
    keyed_schema = _keyed_schema(incoming.append(pa.field(POSITION, pa.int64())), spec.delete_field)
    keyed = df.mapInArrow(lambda batches: _key_batches(batches, spec, key_generator), from_arrow_schema(keyed_schema))
    keyed = keyed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        partitions = sorted(r[0] for r in keyed.select(PARTITION_PATH).distinct().collect())
        if not partitions:
            return None
        instant, timeline = writer.begin()
        routers, targets = writer.targets(instant, timeline, partitions)
        spark = df.sparkSession
        routers_bc = spark.sparkContext.broadcast(routers)
        ctx = writer.commit_context(instant, data_schema)
        targets_bc = spark.sparkContext.broadcast(targets)
        routed_schema = pa.schema(list(keyed_schema) + [pa.field(FILE_ID, pa.string())])
        routed = keyed.mapInArrow(lambda batches: _route_batches(batches, routers_bc), from_arrow_schema(routed_schema))
        ordering_field = spec.ordering_field

        def write_group(group: pa.Table) -> pa.Table:
            from pyspark import TaskContext

            task = TaskContext.get()
            rows = dedupe_latest(group, ordering_field)
            file_id = rows[FILE_ID][0].as_py()
            stat = write_file_group(ctx, targets_bc.value[file_id], rows, task.partitionId(), task.attemptNumber())
            return pa.table({"stat": pa.array([json.dumps(stat.to_dict())] if stat else [], pa.string())})

        stat_rows = routed.groupBy(FILE_ID).applyInArrow(write_group, STAT_SCHEMA).collect()
        stats = [WriteStat.from_dict(json.loads(r.stat)) for r in stat_rows]
        writer.complete(instant, timeline, stats, data_schema, extra_metadata)
        return instant
    finally:
        keyed.unpersist()


def _keyed_schema(incoming: pa.Schema, delete_field: str | None) -> pa.Schema:
    fields = [f for f in incoming if f.name != delete_field]
    return pa.schema(fields + [pa.field(RECORD_KEY, pa.string()), pa.field(PARTITION_PATH, pa.string()),
                               pa.field(IS_DELETE, pa.bool_())])


def _key_batches(batches: Iterator[pa.RecordBatch], spec, key_generator: KeyGenerator) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        table = pa.Table.from_batches([batch])
        # No cross-batch dedup here: the same key may come back in another batch; the
        # per-file-group dedup after the shuffle settles it.
        prepared = prepare_batch(table, spec, key_generator, dedupe=False)
        yield from prepared.to_batches()


def _route_batches(batches: Iterator[pa.RecordBatch], routers_bc) -> Iterator[pa.RecordBatch]:
    routers = routers_bc.value
    for batch in batches:
        yield from route_rows(batch, routers).to_batches()
