"""One table's ingestion: its config turned into a decoder, a table, a writer and a streaming query.

Everything that can be wrong with a config (schemas, the transform, the table's keys, the source
format) is found in `TableJob.prepare`, before any query starts.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming import StreamingQuery

from streamer import initial_load
from streamer.catalog import CatalogSync, metastore_connector, sync_target
from streamer.checkpoint import StreamCheckpoint, table_checkpoint
from streamer.config.choices import BadRecordPolicy, DecodeFormat, ServiceMode, SourceFormat
from streamer.config.model import FormatSettings, JobConfig
from streamer.decode.columns import (
    ADDED_COLUMNS,
    ERROR,
    EVOLVING,
    KAFKA_KEY,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_KEY,
    RAW_VALUE,
)
from streamer.decode.evolution import SchemaEvolution, stored_value_schema
from streamer.decode.formats import FormatSpec
from streamer.decode.record_decoder import RecordDecoder
from streamer.decode.registry import SchemaRegistryClient
from streamer.decode.value_schema import compare, evolve_json
from streamer.errors import StartupError
from streamer.kafka.offsets import KafkaProgress, end_offsets
from streamer.kafka.options import SourceOptions
from streamer.metrics import Metrics, TableMetrics
from streamer.quarantine import QuarantineTable
from streamer.scheduler import BackgroundExecutor, TableServices
from streamer.sink import OffsetJumpCheck, SinkSettings, UpsertSink
from table.errors import SchemaEvolutionError
from table.mor_table import MorTable, TableSpec
from table.schema import arrow_schema_from_avro, evolve
from table.storage.file_io import Storage
from table.sync import HiveSync
from table.timeline.timeline import parse_instant_time
from table.write.writer import TableWriter, WriteOptions

log = logging.getLogger(__name__)

KAFKA_COLUMNS = (KAFKA_KEY, KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET, KAFKA_TIMESTAMP)
#: The columns of Spark's Kafka records the decoder reads.
RECORD_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
#: Seconds the brokers have to tell the endpoints the lag; a scrape must not wait longer.
LAG_TIMEOUT_SECONDS = 5.0


class TableJob:
    """A prepared table job: `start` launches its streaming query."""

    def __init__(self, config: JobConfig, table: MorTable, writer: TableWriter, decoder: RecordDecoder,
                 sink: UpsertSink, quarantine: QuarantineTable | None, services: TableServices,
                 starting_offsets: str | None, kafka: KafkaProgress, metrics: TableMetrics, lag_kafka: KafkaProgress,
                 catalog: CatalogSync | None = None):
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
    def prepare(cls, config: JobConfig, spark: SparkSession, executor: BackgroundExecutor,
                metrics: Metrics) -> "TableJob":
        """Check the config against schemas and the table on disk, then open the table's writer
        (which rolls back what a crashed run left inflight) and resume pending service plans."""
        value = _format_spec(config, config.decode.value, "value", spark)
        if value.format == DecodeFormat.CONFLUENT_AVRO:
            value = _value_reader_schema(config, value)
        decoder = build_decoder(config, value, spark)
        value_columns = tuple(value.arrow_schema.names)
        table_schema = _table_schema(config, spark, decoder, value_columns)
        t = config.table
        table = _open_table(config, table_schema)
        evolution = None
        if value.format == DecodeFormat.CONFLUENT_AVRO:
            registry = config.decode.schema_registry
            evolution = SchemaEvolution(
                t.name, value.avro_schema, decoder,
                lambda reader: decoder.with_value(_confluent_avro_spec(reader)),
                SchemaRegistryClient(registry.url, registry.auth))
        writer = table.writer(
            WriteOptions(initial_buckets=config.index.initial_buckets, delete_field=t.delete_field,
                         log_block_format=t.log_block_format),
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
                quarantine = QuarantineTable(t.quarantine_location, t.name, t.log_block_format, t.storage_options).open()
            table_metrics = metrics.table(t.name, config.stream.trigger_seconds, config.metrics.stuck_after_triggers,
                                          config.services.compaction.max_log_files_per_group)
            table_metrics.last_commit_before(_last_commit_time(table))
            services = TableServices(config.services, table, writer, executor, index=config.index,
                                     metrics=table_metrics)
            catalog = _catalog_sync(config, table, spark, table_metrics)
            after_commit = services.after_commit if catalog is None else _one_then_other(services.after_commit,
                                                                                         catalog.after_commit)
            starting = _resume_offsets(config, table, spark)
            offset_jumps = OffsetJumpCheck(kafka.earliest_offsets, started_from_table=starting is not None)
            kafka_arrow = config.source.format == SourceFormat.KAFKA_ARROW
            source = SourceOptions.parse(config.source.reader_options()) if kafka_arrow else None
            sink = UpsertSink(SinkSettings(t.name, value_columns, config.decode.on_error, config.transform,
                                           config.checkpoint_location, source),
                              table, writer, decoder, quarantine, after_commit=after_commit,
                              progress=lambda checkpoint: _kafka_progress(config, kafka, checkpoint),
                              evolution=evolution, offset_jumps=offset_jumps, observe=table_metrics.batch_committed)
            table_metrics.lag_source = lambda: lag_kafka.partition_lag(sink.checkpoint.offsets)
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
        return cls(config, table, writer, decoder, sink, quarantine, services, starting, kafka, table_metrics, lag_kafka,
                   catalog)

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
                    "org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>; or use 'kafka-arrow'") from e
            raise
        writer = (self._records(stream).writeStream.foreachBatch(self.sink).queryName(self.name)
                  .option("checkpointLocation", self.config.checkpoint_location))
        writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=self.config.stream.trigger_interval)
        self.query = writer.start()
        self.sink.bind(str(self.query.id))
        return self.query

    def _load_backlog(self, spark: SparkSession) -> None:
        """An empty table takes its topics' backlog in one batch query first (`streamer.initial_load`)."""
        work = initial_load.backlog(self.config, self.kafka)
        if work is None:
            return
        initial_load.run(self.config, spark, self.sink, work)
        self.starting_offsets = _starting_offsets_of(self.config, table_checkpoint(self.table))
        self.sink.offset_jumps = dataclasses.replace(self.sink.offset_jumps, started_from_table=True)

    def _records(self, stream: DataFrame) -> DataFrame:
        """The Kafka records the sink decodes (`kafka-arrow`'s offset ranges, which the sink
        reads: see `OFFSET_RANGES_SCHEMA`), with per-batch counts a StreamingQueryListener finds
        in `progress.observedMetrics[<table name>]`."""
        if "until_offset" in stream.columns:  # the newest timestamp is known after the read only
            return stream.observe(self.name, F.sum(F.col("until_offset") - F.col("from_offset")).alias("records"))
        return stream.select(*RECORD_COLUMNS).observe(
            self.name, F.count(F.lit(1)).alias("records"), F.max("timestamp").alias("latest_kafka_timestamp"))

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
    except Exception as e:  # a view for people and monitors: never fails a committed batch
        log.warning("%s: could not read the Kafka lag: %s", config.table.name, e)
        return {}


# ---- decoding ----------------------------------------------------------------------------------

def build_decoder(config: JobConfig, value: FormatSpec, spark: SparkSession) -> RecordDecoder:
    """The decoder of the config's key and value formats. Without a transform, the value's record
    key and ordering fields are required: a record lacking them is a bad record, not a failed batch."""
    d = config.decode
    registry = d.schema_registry
    required = () if config.transform else (*config.table.record_key, config.table.ordering_field)
    missing = [f for f in required if f not in value.arrow_schema.names]
    if missing:
        raise StartupError(f"{config.config_path}: decode.value: the value schema has no field(s) {missing} "
                           f"named in table.record_key / table.ordering_field")
    return RecordDecoder(
        value=value,
        key=_format_spec(config, d.key, "key", spark),
        registry_url=registry.url if registry else None,
        registry_auth=registry.auth if registry else None,
        required_fields=required,
    )


def _format_spec(config: JobConfig, fmt: FormatSettings, role: str, spark: SparkSession) -> FormatSpec:
    if fmt.format in (DecodeFormat.NONE, DecodeFormat.STRING, DecodeFormat.BINARY):
        return FormatSpec(fmt.format, None)
    where = f"{config.config_path}: decode.{role}"
    schema_file = config.schema_file(fmt)
    avro = None
    if schema_file is not None:
        try:
            avro = schema_file.read_text()
            json.loads(avro)
        except (OSError, ValueError) as e:
            raise StartupError(f"{where}.schema_file: cannot read an Avro schema from {schema_file}: {e}") from e
    elif fmt.format == DecodeFormat.CONFLUENT_AVRO:
        avro = _latest_registered_schema(config, role)
    if fmt.format == DecodeFormat.JSON and fmt.schema:
        try:
            arrow = to_arrow_schema(spark.createDataFrame([], fmt.schema).schema, timezone="UTC",
                                    prefers_large_types=False)
        except Exception as e:  # Spark's parser says what is wrong with the DDL
            raise StartupError(f"{where}.schema: not a valid Spark DDL schema: {e}") from e
    else:
        try:
            arrow = arrow_schema_from_avro(avro)
        except Exception as e:
            raise StartupError(f"{where}: unsupported Avro schema: {e}") from e
    return FormatSpec(fmt.format, spark_normalized(arrow), avro)


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
    change = compare(json.loads(recorded), json.loads(configured.avro_schema), ADDED_COLUMNS)
    if change.problem is not None:
        if config.decode.value.schema_file is not None:
            raise StartupError(f"{config.config_path}: decode.value.schema_file: {config.schema_file(config.decode.value)} "
                               f"{change.problem} (the reader schema recorded by the table at {config.table.path})")
        log.warning("%s: the latest schema registered for '%s-value' %s; its records will be refused",
                    config.table.name, config.source.topics[0], change.problem)
    return _confluent_avro_spec(evolve_json(recorded, change) if change.evolves else recorded)


def _confluent_avro_spec(reader_schema: str) -> FormatSpec:
    arrow = spark_normalized(arrow_schema_from_avro(reader_schema))
    return FormatSpec(DecodeFormat.CONFLUENT_AVRO, arrow, reader_schema)


def _latest_registered_schema(config: JobConfig, role: str) -> str:
    topics = config.source.topics
    if not topics:
        raise StartupError(f"{config.config_path}: decode.{role}.schema_file: required with "
                           "source.topic_pattern (the registry subject cannot be derived from a pattern)")
    registry = config.decode.schema_registry
    subject = f"{topics[0]}-{role}"
    _, schema = SchemaRegistryClient(registry.url, registry.auth).latest_schema(subject)
    return schema


def spark_normalized(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema as Spark hands it back: what mapInArrow output and upserts must match."""
    return to_arrow_schema(from_arrow_schema(schema), timezone="UTC", prefers_large_types=False)


# ---- the table ---------------------------------------------------------------------------------

def _table_schema(config: JobConfig, spark: SparkSession, decoder: RecordDecoder,
                  value_columns: tuple[str, ...]) -> pa.Schema:
    """The table's columns: the value's fields, or what the transform makes of the decoded rows."""
    clash = [c for c in value_columns if c in KAFKA_COLUMNS]
    if clash:
        raise StartupError(f"{config.config_path}: decode.value: field(s) {clash} clash with the Kafka "
                           f"columns the decoder adds ({', '.join(KAFKA_COLUMNS)})")
    source_schema = pa.schema([f for f in decoder.output_schema if f.name not in (ERROR, RAW_KEY, RAW_VALUE, EVOLVING)])
    if config.transform:
        empty = spark.createDataFrame([], from_arrow_schema(source_schema))
        empty.createOrReplaceTempView("source")
        try:
            columns = spark.sql(config.transform).schema
        except AnalysisException as e:
            raise StartupError(f"{config.config_path}: transform: {e}") from e
        finally:
            spark.catalog.dropTempView("source")
        arrow = to_arrow_schema(columns, timezone="UTC", prefers_large_types=False)
    else:
        arrow = pa.schema([source_schema.field(c) for c in value_columns])
    t = config.table
    if t.delete_field:
        if t.delete_field not in arrow.names:
            raise StartupError(f"{config.config_path}: table.delete_field: no column '{t.delete_field}' in {arrow.names}")
        arrow = arrow.remove(arrow.get_field_index(t.delete_field))
    for key, names in (("record_key", t.record_key), ("partition_by", t.partition_by),
                       ("ordering_field", (t.ordering_field,))):
        missing = [n for n in names if n not in arrow.names]
        if missing:
            raise StartupError(f"{config.config_path}: table.{key}: no column(s) {missing} in the table's columns {arrow.names}")
    check_sort_columns(config, arrow)
    return arrow


def check_sort_columns(config: JobConfig, schema: pa.Schema) -> None:
    """`services.clustering.sort_columns` must be columns of the table, of types that sort."""
    for i, name in enumerate(config.services.clustering.sort_columns):
        where = f"{config.config_path}: services.clustering.sort_columns.{i}"
        if name not in schema.names:
            raise StartupError(f"{where}: no column {name!r} in the table's columns {schema.names}")
        kind = schema.field(name).type
        if pa.types.is_nested(kind):
            raise StartupError(f"{where}: column {name!r} is of type {kind}, which cannot be sorted by")


def _open_table(config: JobConfig, schema: pa.Schema) -> MorTable:
    t = config.table
    if not MorTable.exists(t.path, t.storage_options):
        try:
            return MorTable.create(t.path, TableSpec(
                name=t.name, schema=schema, record_key_fields=t.record_key, ordering_field=t.ordering_field,
                partition_fields=t.partition_by, hive_style_partitioning=t.hive_style_partitioning,
                url_encode_partitions=t.url_encode_partitions, database=t.database), t.storage_options)
        except OSError as e:  # full, read-only, no permission
            raise StartupError(f"{config.config_path}: cannot create the table at {t.path}: {e}") from e
    table = MorTable.load(t.path, t.storage_options)
    c = table.config
    for key, configured, stored in (
        ("name", t.name, c.name),
        ("record_key", list(t.record_key), list(c.record_key_fields)),
        ("partition_by", list(t.partition_by), list(c.partition_fields)),
        ("ordering_field", t.ordering_field, c.precombine_field),
    ):
        if configured != stored:
            raise StartupError(f"{config.config_path}: table.{key}: the table at {t.path} has {stored!r}, "
                               f"the config says {configured!r}; these cannot change once a table exists")
    try:
        evolve(table.schema(), schema)
    except SchemaEvolutionError as e:
        where = "transform" if config.transform else "decode.value"
        raise StartupError(f"{config.config_path}: {where}: the table at {t.path} cannot take these columns: {e}") from None
    return table


def _resume_offsets(config: JobConfig, table: MorTable, spark: SparkSession) -> str | None:
    """`startingOffsets` from the table's last commit when the Spark checkpoint is gone."""
    if not config.source.resume_from_table or _has_spark_offsets(config.checkpoint_location):
        return None
    checkpoint = table_checkpoint(table)
    if checkpoint is None or not checkpoint.offsets:
        return None
    log.info("%s: no Spark checkpoint at %s; resuming from the table's last commit: %s",
             config.table.name, config.checkpoint_location, checkpoint.starting_offsets_json())
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
