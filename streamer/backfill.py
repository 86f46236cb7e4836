"""Writes beside the stream: a dataset or a Spark query upserted into a table (`backfill`), and the
keys a predicate matches deleted (`delete`), each one commit of its own, through the same Spark
write as the stream's batches.

With `table.concurrency: optimistic_concurrency_control` they run while the table's job streams
into it: a commit that a commit of the job overtook in the same file groups is rolled back and
written again, up to `table.conflict_retries` times (then `WriteConflictError`). Under
`single_writer` they need the table's writer lease, so they wait for no job: one running refuses
them by name. They record no stream checkpoint, so the job goes on from its own offsets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamer.config.model import JobConfig
from streamer.errors import InvalidArgumentError
from table import MorTable, TableNotFoundError, WriteConflictError, WriteOptions
from table.spark import register, upsert_dataframe

log = logging.getLogger(__name__)

#: The delete marker a delete writes when the table's config names none (Hudi's own).
HUDI_DELETE_FIELD = "_hoodie_is_deleted"
#: The dataset formats `--from PATH` reads.
DATASET_FORMATS = ("parquet", "json")
#: Where `--from` is a query rather than a path.
_QUERY_STARTS = ("select ", "with ", "table ")


@dataclass(frozen=True)
class WriteResult:
    instant: str | None  # None: nothing matched, nothing written
    upserted: int
    deleted: int
    conflicts: int  # commits refused for another writer's and written again

    def line(self, table: str, what: str) -> str:
        if self.instant is None:
            return f"{table}: {what}: nothing to write"
        again = f"; {self.conflicts} conflict(s) with other writers, written again" if self.conflicts else ""
        return (
            f"{table}: {what}: {self.upserted:,} row(s) upserted, {self.deleted:,} deleted "
            f"-> deltacommit {self.instant}{again}"
        )


def backfill(spark: SparkSession, config: JobConfig, source: str, source_format: str | None = None) -> WriteResult:
    """Upsert the rows of `source` (a Parquet or JSON dataset's path, or a Spark SQL query) into
    the table of `config` as one commit."""
    return _write(config, _load(config), _dataset(spark, source, source_format), "backfill", config.table.delete_field)


def delete_where(spark: SparkSession, config: JobConfig, predicate: str) -> WriteResult:
    """Delete the rows of the table of `config` that `predicate` (a Spark SQL condition over its
    columns) matches, as one commit. Each delete carries its row's ordering value, so an update
    the stream writes later, with a greater one, comes back as Hudi's rule says."""
    t = config.table
    table = _load(config)
    register(spark)
    columns = table.schema().names
    matched = spark.read.format("mor").load(t.path).where(predicate).select(*columns)
    marker = t.delete_field or HUDI_DELETE_FIELD
    return _write(config, table, matched.withColumn(marker, F.lit(True)), "delete", marker)


def _dataset(spark: SparkSession, source: str, source_format: str | None) -> DataFrame:
    if source_format is None and source.lstrip().lower().startswith(_QUERY_STARTS):
        return spark.sql(source)
    fmt = source_format or ("json" if source.rstrip("/").endswith((".json", ".jsonl")) else "parquet")
    if fmt not in DATASET_FORMATS:
        raise InvalidArgumentError(f"--format {fmt!r}: expected one of {DATASET_FORMATS}")
    return spark.read.format(fmt).load(source)


def _load(config: JobConfig) -> MorTable:
    t = config.table
    if not MorTable.exists(t.path, t.storage_options):
        raise TableNotFoundError(f"{config.config_path}: no table at {t.path} yet; its job creates it")
    return MorTable.load(t.path, t.storage_options)


def _write(config: JobConfig, table: MorTable, rows: DataFrame, what: str, delete_field: str | None) -> WriteResult:
    t = config.table
    options = WriteOptions(
        initial_buckets=config.index.initial_buckets,
        delete_field=delete_field,
        log_block_format=t.log_block_format,
        concurrency=t.concurrency,
    )
    conflicts = 0
    with table.writer(options, description=f"streamer {what} of '{t.name}' ({config.config_path})") as writer:
        while True:
            try:
                instant = upsert_dataframe(writer, rows)
            except WriteConflictError as conflict:  # rolled back: written again
                if conflicts >= t.conflict_retries:
                    raise
                conflicts += 1
                log.warning(
                    "%s %s: %s; writing it again (%d of %d)", t.name, what, conflict, conflicts, t.conflict_retries
                )
                continue
            stats = writer.last_commit.write_stats() if instant is not None and writer.last_commit else []
            upserted = sum(s.num_writes for s in stats)
            return WriteResult(instant, upserted, sum(s.num_deletes for s in stats), conflicts)
