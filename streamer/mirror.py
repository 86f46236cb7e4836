"""A database mirror at run time: every table of a Debezium connector, in one streaming query.

At the start the mirror lists the topics its pattern matches (`streamer.config.mirror`); while it
runs, its query (`streamer.shared_query`) subscribes to the pattern, so a topic created since (a
`CREATE TABLE` in the source database) turns up in the next trigger's plan and is offered here.
Each included topic becomes a table: its columns and key fields read off its first change event,
its config made from the mirror file's, the table created, registered in the catalog when the
file says so, and filled from the topic's first event on.

A topic that cannot become a table is refused by name and left in Kafka, never skipped
silently: a table without a primary key (Debezium's key is null), columns of a type a table
cannot take, change events without Connect's schemas. The run's summary lists them.
"""

from __future__ import annotations

import json
import logging

from pyspark.sql import SparkSession

from streamer.config.loading import mirrored_table
from streamer.config.mirror import PATH_SHAPE, MirrorConfig, MirroredTopic, TableShape
from streamer.config.model import JobConfig, SourceSettings
from streamer.errors import ConfigError, StartupError
from streamer.job import TableJob
from streamer.kafka.admin import KafkaMetadata
from streamer.kafka.options import SourceOptions
from streamer.kafka.reader import read_partition
from streamer.metrics import Metrics
from streamer.router import NotRouted
from streamer.scheduler import BackgroundExecutor
from streamer.shared_query import SharedQuery

log = logging.getLogger(__name__)

#: Records of a partition looked at for the first change event (tombstones and heartbeats aside).
FIRST_EVENT_SCAN = 100
#: Connect's types as Spark SQL's, the way the decoder reads Connect's JSON.
CONNECT_DDL_TYPES = {
    "int8": "INT",
    "int16": "INT",
    "int32": "INT",
    "int64": "BIGINT",
    "float": "FLOAT",
    "float32": "FLOAT",
    "double": "DOUBLE",
    "float64": "DOUBLE",
    "boolean": "BOOLEAN",
    "string": "STRING",
}
#: What to set in the connector for a Connect type no column takes as it comes.
CONNECTOR_REMEDIES = {
    "org.apache.kafka.connect.data.Decimal": "set the connector's decimal.handling.mode to string or double",
    "io.debezium.data.VariableScaleDecimal": "set the connector's decimal.handling.mode to string or double",
    "bytes": "set the connector's binary.handling.mode to base64 or hex",
}


class RefusedTableError(StartupError):
    """A topic of the mirror that cannot become a table; the message says why and what to change."""


class Mirror:
    """A mirror file's tables, prepared as they are found."""

    def __init__(self, config: MirrorConfig, spark: SparkSession, executor: BackgroundExecutor, metrics: Metrics):
        assert config.sample is not None, "a mirror loaded by streamer.config.loading"
        self.config = config
        self.spark = spark
        self.executor = executor
        self.metrics = metrics
        self.source = mirror_source(config)
        self._options = mirror_source_options(config)
        self._refused: dict[str, NotRouted] = {}  # asked again only if it had no change event yet
        self._metadata: KafkaMetadata | None = None  # one client for the topics found at the start

    def prepare(self) -> list[TableJob]:
        """The tables of the topics there now; those refused are logged, not fatal."""
        jobs = []
        self._metadata = KafkaMetadata(self._options)
        try:
            for topic in mirrored_topics(self.config, self._options):
                found = self.table_job(topic.topic)
                if isinstance(found, TableJob):
                    jobs.append(found)
        finally:
            self._metadata.close()
            self._metadata = None
        return jobs

    def query(self, jobs: list[TableJob]) -> SharedQuery:
        """The mirror's streaming query over `jobs`, taking new tables as their topics appear."""
        assert self.config.sample is not None
        return SharedQuery(
            f"mirror {self.config.name}",
            jobs,
            self.source,
            discover=self.table_job,
            trigger_interval=self.config.sample.stream.trigger_interval,
        )

    def table_job(self, topic: str) -> TableJob | NotRouted:
        """The prepared table of `topic`, or why it has none (logged when it is a refusal)."""
        if topic in self._refused:
            return self._refused[topic]
        parts = self.config.topic(topic)
        if parts is None:
            return NotRouted(f"{topic}: not a topic of the mirror's pattern", reported=False)
        if not self.config.included(parts):
            log.debug("%s: %s is excluded", self.config.name, parts.name)
            self._refused[topic] = NotRouted(f"{parts.name}: excluded by mirror.include / exclude", reported=False)
            return self._refused[topic]
        try:
            config = table_config(self.config, parts, self._options, self._metadata)
            if config is None:
                log.info("%s: %s holds no change event yet; its table is made when one comes", self.config.name, topic)
                return NotRouted(f"{parts.name}: no change event yet", reported=False)
            job = TableJob.prepare(config, self.spark, self.executor, self.metrics)
        except (StartupError, ConfigError) as e:
            self._refused[topic] = NotRouted(f"{parts.name}: not mirrored: {e}")
            log.error("%s: %s", self.config.name, self._refused[topic].reason)
            return self._refused[topic]
        log.info(
            "%s: table %s mirrors %s (key %s)", self.config.name, job.name, topic, ", ".join(config.table.record_key)
        )
        return job


def table_config(
    mirror: MirrorConfig, topic: MirroredTopic, options: SourceOptions, metadata: KafkaMetadata | None = None
) -> JobConfig | None:
    """The config of the topic's table, its columns and key read off its first change event;
    None when it holds none yet. Raises `RefusedTableError` or `ConfigError` naming the table."""
    event = first_change_event(options, topic.topic, metadata)
    return None if event is None else mirrored_table(mirror, topic, table_shape(event))


def mirror_source(mirror: MirrorConfig) -> SourceSettings:
    """The mirror's source: its tables' brokers and client settings, subscribed to its pattern."""
    assert mirror.sample is not None, "a mirror loaded by streamer.config.loading"
    return mirror.sample.source.model_copy(update={"topics": None, "topic_pattern": mirror.settings.pattern})


def mirror_source_options(mirror: MirrorConfig, timeout: float | None = None) -> SourceOptions:
    """The Kafka client settings of the mirror's topics (waiting `timeout` for brokers that do not answer)."""
    options = mirror_source(mirror).reader_options()
    if timeout is not None:
        options["maxBrokerOutageMs"] = str(int(timeout * 1000))
    return SourceOptions.parse(options)


def mirrored_topics(mirror: MirrorConfig, options: SourceOptions) -> list[MirroredTopic]:
    """The topics of the mirror that Kafka holds now and the mirror includes."""
    metadata = KafkaMetadata(options)
    try:
        partitions, _ = metadata.discover()
    finally:
        metadata.close()
    found = [mirror.topic(t) for t in sorted({t for t, _ in partitions})]
    return [t for t in found if t is not None and mirror.included(t)]


def mirrored_configs(mirror: MirrorConfig, timeout: float) -> list[JobConfig]:
    """The configs of the mirror's tables whose topics Kafka holds now, made for their names and
    paths (`streamer status`: columns and keys are the tables' own to say)."""
    options = mirror_source_options(mirror, timeout)
    return [mirrored_table(mirror, topic, PATH_SHAPE) for topic in mirrored_topics(mirror, options)]


def first_change_event(
    options: SourceOptions, topic: str, metadata: KafkaMetadata | None = None
) -> tuple[bytes | None, bytes] | None:
    """The key and value of the topic's first record that has a value; None when it has none
    yet. `metadata`: a client to ask for the topic's offsets (one for many topics saves
    connecting to the brokers for each)."""
    asked = metadata or KafkaMetadata(options)
    try:
        described = asked.admin.list_topics(topic, timeout=options.task_timeout_ms / 1000).topics.get(topic)
        partitions = [(topic, p) for p in described.partitions] if described is not None else []
        earliest, latest = asked.earliest(partitions), asked.latest(partitions)
    finally:
        if metadata is None:
            asked.close()
    for tp in sorted(partitions):
        start, end = earliest[tp], latest[tp]
        for batch in read_partition(options, topic, tp[1], start, min(end, start + FIRST_EVENT_SCAN)):
            for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()):
                if value is not None:
                    return key, value
    return None


def table_shape(event: tuple[bytes | None, bytes]) -> TableShape:
    """The table's columns and key fields, as the change event's Connect schemas give them."""
    key, value = event
    if key is None:
        raise RefusedTableError(
            "the source table has no primary key (Debezium's Kafka key is null), so its rows cannot be "
            "upserted; give it a primary key, or name its key columns in the connector's message.key.columns"
        )
    schema = _json(value).get("schema")
    row = next((f for f in (schema or {}).get("fields", ()) if f.get("field") == "after"), None)
    if row is None:
        raise RefusedTableError(
            "its change events carry no Connect schema of the row: the mirror reads Kafka Connect's JSON "
            "with schemas (value.converter.schemas.enable=true)"
        )
    columns, problems = [], []
    for field in row.get("fields", ()):
        name, kind = field["field"], field.get("type", "")
        logical = field.get("name", "")
        remedy = CONNECTOR_REMEDIES.get(logical) or CONNECTOR_REMEDIES.get(kind)
        ddl = CONNECT_DDL_TYPES.get(kind)
        if ddl is None or (remedy is not None and logical in CONNECTOR_REMEDIES):
            problems.append(
                f"column {name!r} is Connect's {logical or kind}"
                + (f": {remedy}" if remedy else "; a table column takes numbers, strings and booleans")
            )
            continue
        columns.append((name, ddl))
    if problems:
        raise RefusedTableError("; ".join(problems))
    key_fields = _key_fields(_json(key))
    missing = [k for k in key_fields if k not in {name for name, _ in columns}]
    if not key_fields or missing:
        raise RefusedTableError(f"the Kafka key's fields {key_fields} are not all columns of the row")
    ddl = ", ".join(f"`{name}` {kind}" for name, kind in columns)
    return TableShape(ddl, tuple(name for name, _ in columns), tuple(key_fields))


def _json(raw: bytes) -> dict:
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise RefusedTableError(
            f"its change events are not JSON ({e}): the mirror reads Kafka Connect's JSON"
        ) from None
    if not isinstance(parsed, dict):
        raise RefusedTableError("its change events are not JSON objects")
    return parsed


def _key_fields(key: dict) -> list[str]:
    """The key's fields in order: its Connect schema's, or the members of a key without one."""
    schema = key.get("schema")
    if isinstance(schema, dict) and "payload" in key:
        return [f["field"] for f in schema.get("fields", ())]
    return list(key)
