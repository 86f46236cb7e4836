"""One table's ingestion: its config turned into a decoder, a table, a writer and a streaming query.

What can be wrong with a config is found before Spark starts (`streamer.preflight`); the rest
(what Spark's analyser says of a transform, the source format) in `TableJob.prepare`, which
applies the same rules again to the columns Spark gives, before any query starts.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import pyarrow as pa
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming import StreamingQuery

from streamer import initial_load
from streamer.catalog import CatalogSync, metastore_connector, sync_target
from streamer.checkpoint import StreamCheckpoint, table_checkpoint
from streamer.config.choices import BadRecordPolicy, DecodeFormat, Envelope, ServiceMode, SourceFormat
from streamer.config.model import FormatSettings, JobConfig
from streamer.decode.columns import (
    ADDED_COLUMNS,
    DELETE,
    ERROR,
    EVOLVING,
    KAFKA_KEY,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_KEY,
    RAW_VALUE,
    SKIPPED,
)
from streamer.decode.evolution import SchemaEvolution, stored_value_schema
from streamer.decode.formats import FormatSpec, spark_normalized
from streamer.decode.record_decoder import Deletes, RecordDecoder
from streamer.decode.registry import SchemaRegistryClient
from streamer.decode.value_schema import compare, evolve_json
from streamer.driver_write import DriverWrites
from streamer.errors import StartupError
from streamer.kafka.offsets import KafkaProgress, end_offsets
from streamer.kafka.options import SourceOptions
from streamer.logs.failures import spark_error_line
from streamer.metrics import Metrics, TableMetrics
from streamer.preflight import (
    ConfigProblemsError,
    TableColumns,
    column_problems,
    deletes,
    evolution_problems,
    follows_writer_schemas,
    format_spec,
    identity_problems,
    key_spec,
    registry_subject,
)
from streamer.quarantine import QuarantineTable
from streamer.scheduler import BackgroundExecutor, TableServices
from streamer.sink import OffsetJumpCheck, SinkSettings, UpsertSink
from streamer.verify.verdict import read_verdict
from table import (
    MIB,
    Concurrency,
    HiveSync,
    MorTable,
    Storage,
    TableSpec,
    TableWriter,
    WriteOptions,
    arrow_schema_from_avro,
    parse_instant_time,
)

log = logging.getLogger(__name__)

KAFKA_COLUMNS = (KAFKA_KEY, KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET, KAFKA_TIMESTAMP)
#: The columns of Spark's Kafka records the decoder reads.
RECORD_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
#: Seconds the brokers have to tell the endpoints the lag; a scrape must not wait longer.
LAG_TIMEOUT_SECONDS = 5.0


class TableJob:
    """A prepared table job: `start` launches its streaming query."""

    def __init__(
        self,
        config: JobConfig,
        table: MorTable,
        writer: TableWriter,
        decoder: RecordDecoder,
        sink: UpsertSink,
        quarantine: QuarantineTable | None,
        services: TableServices,
        starting_offsets: str | None,
        kafka: KafkaProgress,
        metrics: TableMetrics,
        lag_kafka: KafkaProgress,
        catalog: CatalogSync | None = None,
    ):
        self.config = config
        self.catalog = catalog
        self.metrics = metrics
        self.lag_kafka = lag_kafka  # the endpoints' own client: a slow answer never holds up a batch
        self.decoder = decoder
        self.services = services
        self.table = table
        self.writer = writer
        self.sink = sink
        self.quarantine = quarantine
        self.starting_offsets = starting_offsets
        self.kafka = kafka
        self.query: StreamingQuery | None = None

    @property
    def name(self) -> str:
        return self.config.table.name

    @classmethod
    def prepare(
        cls, config: JobConfig, spark: SparkSession, executor: BackgroundExecutor, metrics: Metrics
    ) -> TableJob:
        """Check the config against schemas and the table on disk, then open the table's writer
        (which rolls back what a crashed run left inflight) and resume pending service plans."""
        value = _format_spec(config, config.decode.value, "value")
        if follows_writer_schemas(config):
            value = _value_reader_schema(config, value)
        decoder = build_decoder(config, value)
        value_columns = decoder.value_columns
        table_schema = _table_schema(config, spark, decoder, value_columns)
        t = config.table
        table = _open_table(config, table_schema)
        evolution = None
        if follows_writer_schemas(config):
            registry = config.decode.schema_registry
            evolution = SchemaEvolution(
                t.name,
                value.avro_text(),
                decoder,
                lambda reader: decoder.with_value(_reader_spec(value.format, reader)),
                SchemaRegistryClient(registry.url, registry.auth) if registry else None,
                strict=config.decode.value.envelope == Envelope.DEBEZIUM,
            )
        deletes = decoder.deletes
        writer = table.writer(
            WriteOptions(
                initial_buckets=config.index.initial_buckets,
                delete_field=deletes.column if deletes.made else t.delete_field,
                log_block_format=t.log_block_format,
                task_memory_bytes=int(t.write_task_memory_mb * MIB),
                concurrency=t.concurrency,
            ),
            description=f"mor-streamer job '{t.name}' ({config.config_path})",
        )
        try:
            writer.open()
        except OSError as e:  # full, read-only, no permission
            raise StartupError(f"{config.config_path}: cannot write to the table at {t.path}: {e}") from e
        quarantine = None
        kafka = KafkaProgress(config.source)
        lag_kafka = KafkaProgress(config.source, timeout=LAG_TIMEOUT_SECONDS)
        try:
            if config.decode.on_error == BadRecordPolicy.QUARANTINE:
                quarantine = QuarantineTable(
                    t.quarantine_location, t.name, t.log_block_format, t.storage_options
                ).open()
            table_metrics = metrics.table(
                t.name,
                config.stream.trigger_seconds,
                config.metrics.stuck_after_triggers,
                config.services.compaction.max_log_files_per_group,
            )
            table_metrics.last_commit_before(_last_commit_time(table))
            services = TableServices(
                config.services, table, writer, executor, index=config.index, metrics=table_metrics
            )
            catalog = _catalog_sync(config, table, spark, table_metrics)
            after_commit = (
                services.after_commit
                if catalog is None
                else _one_then_other(services.after_commit, catalog.after_commit)
            )
            starting = _resume_offsets(config, table, spark)
            offset_jumps = OffsetJumpCheck(kafka.earliest_offsets, started_from_table=starting is not None)
            kafka_arrow = config.source.format == SourceFormat.KAFKA_ARROW
            source = SourceOptions.parse(config.source.reader_options()) if kafka_arrow else None
            sink = UpsertSink(
                SinkSettings(
                    t.name,
                    value_columns,
                    config.decode.on_error,
                    config.transform,
                    config.checkpoint_location,
                    source,
                    t.conflict_retries if t.concurrency == Concurrency.OPTIMISTIC else 0,
                    config.source.checkpoint_id,
                    DriverWrites.of(
                        spark.sparkContext.master,
                        config.stream.driver_write_max_records,
                        spark.sparkContext.defaultParallelism,
                    ),
                ),
                table,
                writer,
                decoder,
                quarantine,
                after_commit=after_commit,
                progress=lambda checkpoint: _kafka_progress(config, kafka, checkpoint),
                evolution=evolution,
                offset_jumps=offset_jumps,
                observe=table_metrics.batch_committed,
            )
            table_metrics.lag_source = lambda: lag_kafka.partition_lag(sink.checkpoint.offsets)
            table_metrics.verdict_source = lambda: read_verdict(table.storage)
            services.resume()
            if catalog is not None:
                catalog.catch_up()
        except BaseException:
            writer.close()
            kafka.close()
            lag_kafka.close()
            if quarantine is not None:
                quarantine.close()
            raise
        return cls(
            config,
            table,
            writer,
            decoder,
            sink,
            quarantine,
            services,
            starting,
            kafka,
            table_metrics,
            lag_kafka,
            catalog,
        )

    def start(self, spark: SparkSession, once: bool) -> StreamingQuery:
        source = self.config.source
        options = source.reader_options(self.starting_offsets)
        if initial_load.wanted(self.config, self.table, _has_spark_offsets(self.config.checkpoint_location)):
            if source.format == SourceFormat.KAFKA_ARROW:
                options["initialBatchMaxOffsets"] = str(source.initial_load_max_records)
            else:
                self._load_backlog(spark)
                options = source.reader_options(self.starting_offsets)
        reader = spark.readStream.format(source.format).options(**options)
        try:
            stream = reader.load()
        except AnalysisException as e:
            if source.format == SourceFormat.KAFKA:
                raise StartupError(
                    f"{self.config.config_path}: source.format: 'kafka' needs Spark's Kafka connector "
                    "(spark-sql-kafka-0-10) on the classpath, e.g. spark-submit --packages "
                    "org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>; or use 'kafka-arrow'"
                ) from e
            raise
        writer = (
            self._records(stream)
            .writeStream.foreachBatch(self.sink)
            .queryName(self.name)
            .option("checkpointLocation", self.config.checkpoint_location)
        )
        writer = (
            writer.trigger(availableNow=True)
            if once
            else writer.trigger(processingTime=self.config.stream.trigger_interval)
        )
        self.query = writer.start()
        self.sink.bind(str(self.query.id))
        return self.query

    def _load_backlog(self, spark: SparkSession) -> None:
        """An empty table takes its topics' backlog in one batch query first (`streamer.initial_load`)."""
        work = initial_load.backlog(self.config, self.kafka)
        if work is None:
            return
        initial_load.run(self.config, spark, self.sink, work)
        checkpoint = table_checkpoint(self.table, checkpoint_id=self.config.source.checkpoint_id)
        if checkpoint is None:
            raise StartupError(f"{self.config.table.name}: the initial load committed no Kafka offsets")
        self.starting_offsets = _starting_offsets_of(self.config, checkpoint)
        if self.sink.offset_jumps is not None:
            self.sink.offset_jumps = dataclasses.replace(self.sink.offset_jumps, started_from_table=True)

    def _records(self, stream: DataFrame) -> DataFrame:
        """The Kafka records the sink decodes (`kafka-arrow`'s offset ranges, which the sink
        reads: see `OFFSET_RANGES_SCHEMA`), with per-batch counts a StreamingQueryListener finds
        in `progress.observedMetrics[<table name>]`."""
        if "until_offset" in stream.columns:  # the newest timestamp is known after the read only
            return stream.observe(self.name, F.sum(F.col("until_offset") - F.col("from_offset")).alias("records"))
        return stream.select(*RECORD_COLUMNS).observe(
            self.name, F.count(F.lit(1)).alias("records"), F.max("timestamp").alias("latest_kafka_timestamp")
        )

    def finish(self) -> None:
        """For `--once`: background services done and pending plans executed, then the catalog
        synced to what they left."""
        self.services.finish()
        if self.catalog is not None:
            self.catalog.finish()

    def close(self) -> None:
        if self.catalog is not None:
            self.catalog.close()
        self.kafka.close()
        self.lag_kafka.close()
        self.writer.close()
        if self.quarantine is not None:
            self.quarantine.close()


def _catalog_sync(config: JobConfig, table: MorTable, spark: SparkSession, metrics: TableMetrics) -> CatalogSync | None:
    """The table's catalog sync, through Hive's client in the driver's JVM; None without `sync:`
    (or with `mode: off`, which leaves it to `streamer sync`)."""
    if config.sync is None or config.sync.mode == ServiceMode.OFF:
        return None
    connect = metastore_connector(config.sync, spark._jvm, spark._jsc.hadoopConfiguration())
    return CatalogSync(config.sync, table, HiveSync(table, sync_target(config), connect), metrics)


def _one_then_other(first, then):
    def both() -> None:
        first()
        then()

    return both


def _last_commit_time(table: MorTable) -> float | None:
    """When the table's last deltacommit began (its instant time), seconds since the epoch."""
    done = table.timeline().completed("deltacommit")
    return parse_instant_time(done[-1].timestamp).timestamp() if done else None


def _kafka_progress(config: JobConfig, kafka: KafkaProgress, checkpoint: StreamCheckpoint) -> dict[str, int]:
    """After a commit: its offsets to the consumer group if configured, and the lag left."""
    source = config.source
    try:
        if source.commit_offsets_to_group:
            kafka.commit_to_group(source.commit_offsets_to_group, checkpoint.offsets)
        return kafka.lag(checkpoint.offsets)
    except Exception as e:  # noqa: BLE001 - a view for people and monitors: never fails a committed batch
        log.warning("%s: could not read the Kafka lag: %s", config.table.name, e)
        return {}


# ---- decoding ----------------------------------------------------------------------------------


def build_decoder(config: JobConfig, value: FormatSpec) -> RecordDecoder:
    """The decoder of the config's key and value formats. Without a transform, the value's record
    key and ordering fields are required: a record lacking them is a bad record, not a failed batch."""
    d = config.decode
    registry = d.schema_registry
    columns = [*value.fields().names, *d.envelope_columns.values()]
    required = () if config.transform else (*config.table.record_key, config.table.ordering_field)
    missing = [f for f in required if f not in columns]
    if missing:
        raise StartupError(
            f"{config.config_path}: decode.value: the value schema has no field(s) {missing} "
            f"named in table.record_key / table.ordering_field"
            + (" (nor does decode.envelope_columns)" if d.value.envelope == Envelope.DEBEZIUM else "")
        )
    key = _key_spec(config, value)
    try:
        return RecordDecoder(
            value=value,
            key=key,
            registry_url=registry.url if registry else None,
            registry_auth=registry.auth if registry else None,
            required_fields=required,
            deletes=_deletes(config, value, key),
        )
    except ValueError as e:
        raise StartupError(f"{config.config_path}: decode: {e}") from e


def _deletes(config: JobConfig, value: FormatSpec, key: FormatSpec) -> Deletes:
    """Which records delete keys (`streamer.preflight.deletes`)."""
    found = deletes(config, value, key)
    if found.problems:
        raise StartupError("\n".join(map(str, found.problems)))
    if config.decode.tombstones is None and found.deletes.envelope is not None and found.key_lacks:
        log.info(
            "%s: tombstones are skipped: the Kafka key lacks %s, so a tombstone cannot say which row to "
            "delete; the delete event before each tombstone deletes the row",
            config.table.name,
            found.key_lacks,
        )
    return found.deletes


def _key_spec(config: JobConfig, value: FormatSpec) -> FormatSpec:
    """The key's format and fields (`streamer.preflight.decoding`)."""
    try:
        return key_spec(config, value)
    except ConfigProblemsError as e:
        raise StartupError("\n".join(map(str, e.problems))) from None


def _format_spec(config: JobConfig, fmt: FormatSettings, role: str) -> FormatSpec:
    """The key's or value's format and fields (`streamer.preflight.decoding`); the registry is
    asked for the latest schema as the job asks it, its errors raising."""
    try:
        return format_spec(config, fmt, role)
    except ConfigProblemsError as e:
        raise StartupError("\n".join(map(str, e.problems))) from None


def _value_reader_schema(config: JobConfig, configured: FormatSpec) -> FormatSpec:
    """The value's reader schema: the one the table's last streamed commit recorded, evolved by
    the configured one (the schema file, else the latest registered); the configured one alone
    for a new table. A schema file that does not fit the recorded one stops the start; a latest
    registered schema that does not fit is the producers' change, whose records the policy of
    `decode.on_error` refuses when they come."""
    t = config.table
    exists = MorTable.exists(t.path, t.storage_options)
    recorded = stored_value_schema(MorTable.load(t.path, t.storage_options)) if exists else None
    if recorded is None:
        return configured
    change = compare(json.loads(recorded), json.loads(configured.avro_text()), ADDED_COLUMNS)
    if change.problem is not None:
        if config.decode.value.schema_file is not None or config.decode.value.schema is not None:
            which = "schema_file" if config.decode.value.schema_file is not None else "schema"
            raise StartupError(
                f"{config.config_path}: decode.value.{which}: the configured schema {change.problem} "
                f"(the reader schema recorded by the table at {config.table.path})"
            )
        log.warning(
            "%s: the latest schema registered for '%s' %s; its records will be refused",
            config.table.name,
            registry_subject(config, "value"),
            change.problem,
        )
    return _reader_spec(configured.format, evolve_json(recorded, change) if change.evolves else recorded)


def _reader_spec(fmt: DecodeFormat, reader_schema: str) -> FormatSpec:
    """The value's format with this Avro reader schema and its fields."""
    arrow = spark_normalized(arrow_schema_from_avro(reader_schema))
    return FormatSpec(fmt, arrow, reader_schema)


# ---- the table ---------------------------------------------------------------------------------


def _table_schema(
    config: JobConfig, spark: SparkSession, decoder: RecordDecoder, value_columns: tuple[str, ...]
) -> pa.Schema:
    """The table's columns: the value's fields, or what the transform makes of the decoded rows
    (Spark analyses it: the checks before the start could only read its SELECT list)."""
    clash = [c for c in value_columns if c in KAFKA_COLUMNS]
    if clash:
        raise StartupError(
            f"{config.config_path}: decode.value: field(s) {clash} clash with the Kafka "
            f"columns the decoder adds ({', '.join(KAFKA_COLUMNS)})"
        )
    source_schema = pa.schema(
        [f for f in decoder.output_schema if f.name not in (ERROR, RAW_KEY, RAW_VALUE, EVOLVING, SKIPPED)]
    )
    if config.transform:
        empty = spark.createDataFrame([], from_arrow_schema(source_schema))
        empty.createOrReplaceTempView("source")
        try:
            columns = spark.sql(config.transform).schema
        except (AnalysisException, ParseException) as e:
            raise StartupError(f"{config.config_path}: transform: {spark_error_line(e)}") from None
        finally:
            spark.catalog.dropTempView("source")
        arrow = to_arrow_schema(columns, timezone="UTC", prefers_large_types=False)
    else:
        arrow = pa.schema([source_schema.field(c) for c in value_columns])
    problems = column_problems(config, TableColumns.of_schema(arrow, config))
    if problems:
        raise StartupError("\n".join(map(str, problems)))
    t = config.table
    if t.delete_field:
        arrow = arrow.remove(arrow.get_field_index(t.delete_field))
    elif DELETE in arrow.names:  # the decoder's marker of deletes (tombstones, change events)
        arrow = arrow.remove(arrow.get_field_index(DELETE))
    elif decoder.deletes.made:
        raise StartupError(
            f"{config.config_path}: transform: deletes (tombstones, change events) are marked in "
            f"the column '{DELETE}' of source; the query must keep it (SELECT *, or name it)"
        )
    return arrow


def _open_table(config: JobConfig, schema: pa.Schema) -> MorTable:
    t = config.table
    if not MorTable.exists(t.path, t.storage_options):
        try:
            return MorTable.create(
                t.path,
                TableSpec(
                    name=t.name,
                    schema=schema,
                    record_key_fields=t.record_key,
                    ordering_field=t.ordering_field,
                    partition_fields=t.partition_by,
                    hive_style_partitioning=t.hive_style_partitioning,
                    url_encode_partitions=t.url_encode_partitions,
                    database=t.database,
                ),
                t.storage_options,
            )
        except OSError as e:  # full, read-only, no permission
            raise StartupError(f"{config.config_path}: cannot create the table at {t.path}: {e}") from e
    table = MorTable.load(t.path, t.storage_options)
    problems = identity_problems(config, table.config) or evolution_problems(config, table.schema(), schema)
    if problems:
        raise StartupError("\n".join(map(str, problems)))
    return table


def _resume_offsets(config: JobConfig, table: MorTable, spark: SparkSession) -> str | None:
    """`startingOffsets` from the table's last commit when the Spark checkpoint is gone."""
    if not config.source.resume_from_table or _has_spark_offsets(config.checkpoint_location):
        return None
    checkpoint = table_checkpoint(table, checkpoint_id=config.source.checkpoint_id)
    if checkpoint is None or not checkpoint.offsets:
        return None
    log.info(
        "%s: no Spark checkpoint at %s; resuming from the table's last commit: %s",
        config.table.name,
        config.checkpoint_location,
        checkpoint.starting_offsets_json(),
    )
    return _starting_offsets_of(config, checkpoint)


def _starting_offsets_of(config: JobConfig, checkpoint: StreamCheckpoint) -> str:
    """The query's `startingOffsets` that go on from a commit's checkpoint."""
    if config.source.format == SourceFormat.KAFKA:
        return _with_every_partition(config, checkpoint.offsets_json_object())
    return checkpoint.starting_offsets_json()


def _has_spark_offsets(location: str) -> bool:
    storage = Storage(location)
    return storage.is_dir("offsets") and any(not s.is_dir for s in storage.list_dir("offsets"))


def _with_every_partition(config: JobConfig, offsets: dict[str, dict[str, int]]) -> str:
    """Spark's own Kafka source wants every partition of every topic named: new ones from earliest."""
    ends = end_offsets(config.source, list(offsets))
    full = {topic: {str(p): -2 for p in ends.get(topic, {})} | parts for topic, parts in offsets.items()}
    return json.dumps(full, sort_keys=True)
