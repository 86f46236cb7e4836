"""The YAML config of one table job, as pydantic models: each key's type, bounds, default and
meaning, and the rules between keys.

Choices are StrEnums (`streamer.config.choices`, and `table.config.choices` for the engine's);
a key that sets one of the engine's settings takes the engine's default. Validators report
problems at the key path they concern (`KeyProblemsError`), so that loading can name each one. Secrets
(Kafka options named like passwords or keys, the schema registry credentials) never appear in a
repr. `streamer.config.loading` reads files into these models; `streamer.config.reference`
renders docs/configuration.md from them.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from streamer.config.choices import (
    BadRecordPolicy,
    DecodeFormat,
    Envelope,
    EnvelopeField,
    QueryFailurePolicy,
    RecordFormat,
    ServiceMode,
    SourceFormat,
    StartingOffsets,
    TombstonePolicy,
)
from streamer.config.secrets import redact_options
from streamer.errors import ConfigValueError
from table import (
    AUX_DIR,
    MIB,
    STORAGE_OPTION_NAMES,
    ArchivePolicy,
    CleanPolicy,
    CleanPolicyKind,
    ClusteringPolicy,
    CompactionStrategy,
    CompactionStrategyKind,
    Concurrency,
    LogBlockFormat,
    SplitPoint,
    WriteOptions,
)

__all__ = [
    "ClusteringSettings",
    "DecodeSettings",
    "FormatSettings",
    "IndexSettings",
    "JobConfig",
    "KeyFormatSettings",
    "MetricsSettings",
    "SchemaRegistrySettings",
    "SourceSettings",
    "StreamSettings",
    "TableSettings",
    "ValueFormatSettings",
]

KeyPath = tuple[Any, ...]
Problem = tuple[KeyPath, str]

CONFIG_DIR = "config_dir"  # validation context: the directory relative schema files live in


class KeyProblemsError(ConfigValueError):
    """Raised by validators to report several problems at key paths below the validated value."""

    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(text for _, text in problems))
        self.problems = problems


def _raise_problems(problems: list[Problem]) -> None:
    if problems:
        raise KeyProblemsError(problems)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- Field types ---------------------------------------------------------------------------------

Text = Annotated[str, Field(min_length=1)]


def _one_or_many(value: Any) -> Any:
    return (value,) if isinstance(value, str) else value


# A string or a list of strings, kept as a tuple.
Names = Annotated[tuple[Text, ...], BeforeValidator(_one_or_many)]


def _option_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


# A Spark reader option: YAML booleans and numbers become the strings Spark expects.
OptionValue = Annotated[str, BeforeValidator(_option_text)]

OffsetsByTopic = dict[Text, dict[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=-2)]]]
_OFFSETS_BY_TOPIC = TypeAdapter(OffsetsByTopic)


def _resolve(config_dir: Path, file: Path) -> Path:
    return file if file.is_absolute() else config_dir / file


_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _against_config_dir(location: str | None, info: ValidationInfo) -> str | None:
    """A local path relative to the YAML file's directory made absolute; a URI (`s3://...`,
    `file:///...`) and an absolute path stay as they are."""
    config_dir = (info.context or {}).get(CONFIG_DIR)
    if location is None or config_dir is None or _URI.match(location) or os.path.isabs(location):
        return location
    return os.path.normpath(os.path.abspath(os.path.join(config_dir, location)))


# -- Sections ------------------------------------------------------------------------------------


class TableSettings(_Section):
    """The Hudi table written to."""

    name: Text = Field(
        description=(
            "The table's name in `hoodie.properties`, also the name of its streaming query and the label "
            "of its log lines. Unique among the configs run together; cannot change once the table exists."
        )
    )
    path: Text = Field(
        description=(
            "The table's base path: a local directory, relative to the YAML file's directory unless "
            "absolute, or any URI pyarrow's file systems understand (`s3://...`, `gs://...`, `hdfs://...`). "
            "Unique among the configs run together."
        )
    )
    database: Text = Field(
        "default", description="The database name written to `hoodie.properties` when the table is created."
    )
    record_key: Names = Field(
        min_length=1,
        description=(
            "The column, or list of columns, whose values identify a record. Cannot change once the table exists."
        ),
    )
    partition_by: Names = Field(
        (),
        description=(
            "The column, or list of columns, whose values make a record's partition path; empty for an "
            "unpartitioned table. Cannot change once the table exists."
        ),
    )
    ordering_field: Text = Field(
        description=(
            "The column that orders the versions of a record: the greater value wins, ties go to the later "
            "commit. Cannot change once the table exists."
        )
    )
    delete_field: Text | None = Field(
        None,
        description=(
            "A boolean column: `true` deletes the record's key. The column itself is not stored in the table."
        ),
    )
    hive_style_partitioning: bool = Field(
        True,
        description=(
            "Partition directories named `field=value` instead of `value`. Only read when the table is created."
        ),
    )
    url_encode_partitions: bool = Field(
        False, description=("Escape partition values in paths as Hive does. Only read when the table is created.")
    )
    log_block_format: LogBlockFormat = Field(
        WriteOptions.log_block_format,
        description=(
            "The format of data blocks in log files: `parquet`, `avro` (Hudi's own default), or `auto`: "
            "Parquet for a block of 512 records or more, Avro for a smaller one (a batch spread over many "
            "file groups writes small blocks, whose Parquet files would cost more to make than their "
            "records). Every Hudi reader reads both. The quarantine table uses it too."
        ),
    )
    concurrency: Concurrency = Field(
        WriteOptions.concurrency,
        description=(
            "How the job shares the table with other writers (Hudi's `hoodie.write.concurrency.mode`): "
            "`single_writer`, the job alone under the table's writer lease; or "
            "`optimistic_concurrency_control`, beside other writers (a backfill, a delete, another job, "
            "Apache Hudi's own writers with its file-system lock provider): each commit is checked under "
            "the table's commit lock, `.hoodie/lock`, against what completed since its batch began, and a "
            "batch that wrote file groups another writer wrote meanwhile is written again (up to "
            "`conflict_retries` times). Local file systems only. See 'Writing beside the stream' in "
            "docs/operations.md."
        ),
    )
    conflict_retries: int = Field(
        3,
        ge=0,
        description=(
            "Under `optimistic_concurrency_control`: how often a micro-batch refused for a conflict is "
            "written again before the table stops with the conflict."
        ),
    )
    write_task_memory_mb: float = Field(
        WriteOptions.task_memory_bytes / MIB,
        gt=0,
        description=(
            "The records a Spark write task holds in memory at once. A micro-batch that gives a task more "
            "(a long backlog read at once) keeps them on the task's local disk and writes its file groups "
            "in parts of about this much, a file group larger than that split among parts by record key: "
            "a batch's memory stays bounded whatever the backlog."
        ),
    )
    quarantine_path: Text | None = Field(
        None,
        description=(
            "Where `decode.on_error: quarantine` writes bad records; by default `<table.path>_quarantine`. "
            "A local path is relative to the YAML file's directory, as `path` is."
        ),
    )
    storage_options: dict[str, OptionValue] = Field(
        {},
        description=(
            "How to reach an `s3://` table (and its quarantine table): `aws_access_key_id`, "
            "`aws_secret_access_key`, `aws_session_token`, `aws_region`, `aws_endpoint_url` (an "
            "S3-compatible server) and `aws_allow_http` (`true` for a plain-HTTP endpoint); the names "
            "hudi-rs takes. What is not set here comes from the environment as AWS tools read it "
            "(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, "
            "`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`); use `${ENV}` for secrets. Values of the key and "
            "token options never appear in logs or messages."
        ),
    )

    @field_validator("path", "quarantine_path")
    @classmethod
    def _relative_to_the_config(cls, location: str | None, info: ValidationInfo) -> str | None:
        return _against_config_dir(location, info)

    @field_validator("storage_options")
    @classmethod
    def _known_storage_options(cls, options: dict[str, str]) -> dict[str, str]:
        _raise_problems(
            [
                ((name,), f"unknown storage option; known: {', '.join(STORAGE_OPTION_NAMES)}")
                for name in options
                if name not in STORAGE_OPTION_NAMES
            ]
        )
        return options

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            yield name, redact_options(value) if name == "storage_options" else value

    @property
    def quarantine_location(self) -> str:
        """Where rows that fail to decode go: a sibling table unless ``quarantine_path`` is set."""
        return self.quarantine_path or self.path.rstrip("/") + "_quarantine"


_OPTIONS_OWNED_BY_KEYS = {
    "kafka.bootstrap.servers": "source.bootstrap_servers",
    "subscribe": "source.topics",
    "subscribepattern": "source.topic_pattern",
    "assign": "source.topics or source.topic_pattern",
    "startingoffsets": "source.starting_offsets",
    "endingoffsets": "source.initial_load_max_records (streaming queries have no end)",
    "maxoffsetspertrigger": "source.max_offsets_per_trigger",
    "failondataloss": "source.fail_on_data_loss",
    "maxbrokeroutagems": "source.max_broker_outage_seconds",
}


class SourceSettings(_Section):
    """The Kafka topics read and how."""

    format: SourceFormat = Field(
        SourceFormat.KAFKA_ARROW,
        description=(
            "The Spark stream source: `kafka-arrow`, this project's Kafka source (no jar needed; its "
            "native reader when built, else confluent-kafka: option `reader`), or `kafka`, Spark's own, which needs `spark-sql-kafka-0-10`: `streamer run` has Spark fetch "
            "it (`spark.jars.packages`) unless the Spark settings name it already or spark-submit runs the job."
        ),
    )
    bootstrap_servers: Text = Field(description="The Kafka brokers, `host:port[,host:port...]`.")
    topics: Names | None = Field(
        None,
        min_length=1,
        description=("The topic, or list of topics, to read. Exactly one of `topics` and `topic_pattern` is required."),
    )
    topic_pattern: Text | None = Field(
        None, description=("A regular expression matched against whole topic names, instead of `topics`.")
    )
    starting_offsets: StartingOffsets | OffsetsByTopic = Field(
        StartingOffsets.EARLIEST,
        description=(
            "Where a query without a Spark checkpoint starts: `earliest`, `latest`, or "
            "`{topic: {partition: offset}}` (-2 is earliest, -1 latest; with `topics`, only those topics). "
            "With `resume_from_table`, a table that has commits says where instead."
        ),
    )
    checkpoint_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")] | None = Field(
        None,
        description=(
            "Names this job's checkpoint in the table's commits, for a table fed by more than one "
            "streaming job (`table.concurrency: optimistic_concurrency_control`): each job gives its "
            "own, and resumes from the offsets its own commits record (Hudi's "
            "`hoodie.streamer.multiwriter.source.checkpoint.id`). Letters, digits, `_` and `-`. A "
            "job whose id changed finds no checkpoint of its own in the table: without its Spark "
            "checkpoint it starts from `starting_offsets`."
        ),
    )
    resume_from_table: bool = Field(
        True,
        description=(
            "When the Spark checkpoint is missing, start from the Kafka offsets recorded in the table's "
            "last commit rather than from `starting_offsets`."
        ),
    )
    max_offsets_per_trigger: int | None = Field(
        5_000_000,
        gt=0,
        description=(
            "The most records one micro-batch reads, over all partitions; unbounded when null. The "
            "default, Apache Hudi's streamer's own (`hoodie.streamer.kafka.source.maxEvents`), takes a "
            "long backlog as a commit per 5,000,000 records: a crash costs at most one batch's work, "
            "and a batch's temporary files (Spark's shuffle, the write tasks' spills) are those of one "
            "batch, not of the whole backlog."
        ),
    )
    initial_load_max_records: int = Field(
        1_000_000,
        ge=0,
        description=(
            "When this is more than `max_offsets_per_trigger`, a table without commits, whose query "
            "has no Spark checkpoint yet, takes its backlog (up to this many records) in one commit "
            "written as base files, instead of `max_offsets_per_trigger` at a time: its first "
            "micro-batch with `kafka-arrow`, one batch query before the stream with `kafka`. With "
            "`max_offsets_per_trigger` null the first micro-batch takes the whole backlog anyway; "
            "either way the job's memory does not grow with it (`table.write_task_memory_mb`). 0 "
            "turns this off."
        ),
    )
    fail_on_data_loss: bool = Field(
        True,
        description=(
            "Fail when offsets to read are no longer in Kafka (expired by retention, a topic recreated); "
            "`false` logs a warning, goes on from the earliest offset Kafka holds, and records the jump in "
            "the commit's metadata (`mor.streamer.data_loss`)."
        ),
    )
    max_broker_outage_seconds: int = Field(
        300,
        gt=0,
        description=(
            "How long the job rides out Kafka brokers that do not answer (down, unreachable, hung): it "
            "retries with a growing pause, logging each retry, and carries on when they are back. After "
            "this long the table's query fails, naming the brokers. `kafka-arrow` only; with `kafka`, "
            "Spark's own `kafkaConsumer.pollTimeoutMs` and `fetchOffset.*` options apply."
        ),
    )
    commit_offsets_to_group: Text | None = Field(
        None,
        description=(
            "A consumer group to commit the table's offsets to after each commit, so that standard "
            "Kafka lag monitors see the job. Only a view: the job resumes from the table, never from it."
        ),
    )
    options: dict[str, OptionValue] = Field(
        {},
        description=(
            "More source options, passed through; `kafka.*` go to the Kafka client (e.g. "
            "`kafka.security.protocol`, `kafka.sasl.password`). YAML booleans and numbers become strings. "
            "Options that the keys above set are refused. Values of options whose names contain password, "
            "secret, jaas or key never appear in logs or messages."
        ),
    )

    @field_validator("topic_pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigValueError(f"should be a valid regular expression ({e})") from None
        return pattern

    @field_validator("starting_offsets", mode="plain")
    @classmethod
    def _name_or_offsets(cls, value: Any) -> str | OffsetsByTopic:
        if value in list(StartingOffsets):
            return StartingOffsets(value)
        if isinstance(value, Mapping):
            return _OFFSETS_BY_TOPIC.validate_python(value)
        raise ConfigValueError("should be 'earliest', 'latest' or a mapping {topic: {partition: offset}}")

    @field_validator("options")
    @classmethod
    def _no_option_set_by_a_key(cls, options: dict[str, str]) -> dict[str, str]:
        _raise_problems(
            [
                ((name,), f"not allowed in options; use {_OPTIONS_OWNED_BY_KEYS[name.lower()]} instead")
                for name in options
                if name.lower() in _OPTIONS_OWNED_BY_KEYS
            ]
        )
        return options

    @model_validator(mode="after")
    def _subscription_rules(self) -> SourceSettings:
        problems: list[Problem] = []
        if self.topics is None and self.topic_pattern is None:
            problems.append((("topics",), "one of topics or topic_pattern is required"))
        if self.topics is not None and self.topic_pattern is not None:
            problems.append((("topic_pattern",), "not allowed together with topics; keep one of them"))
        if self.topics is not None and isinstance(self.starting_offsets, dict):
            problems.extend(
                (("starting_offsets", topic), f"topic {topic!r} is not in source.topics")
                for topic in self.starting_offsets
                if topic not in self.topics
            )
        _raise_problems(problems)
        return self

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            yield name, redact_options(value) if name == "options" else value

    def reader_options(self, starting_offsets_json: str | None = None) -> dict[str, str]:
        """Spark reader options for the ``kafka-arrow`` / ``kafka`` formats.

        ``starting_offsets_json`` replaces the configured starting offsets (e.g. the offsets of
        the table's last commit).
        """
        reader = {"kafka.bootstrap.servers": self.bootstrap_servers}
        if self.topics is not None:
            reader["subscribe"] = ",".join(self.topics)
        elif self.topic_pattern is not None:
            reader["subscribePattern"] = self.topic_pattern
        reader["startingOffsets"] = (
            self._starting_offsets_text() if starting_offsets_json is None else starting_offsets_json
        )
        if self.max_offsets_per_trigger is not None:
            reader["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        reader["failOnDataLoss"] = "true" if self.fail_on_data_loss else "false"
        if self.format == SourceFormat.KAFKA_ARROW:
            reader["maxBrokerOutageMs"] = str(self.max_broker_outage_seconds * 1000)
            reader["includeHeaders"] = "false"  # the decoder does not read them
            reader["offsetRanges"] = "true"  # the sink reads, decodes and routes them in one Python pass
        return {**reader, **self.options}

    def _starting_offsets_text(self) -> str:
        if isinstance(self.starting_offsets, str):
            return str(self.starting_offsets)
        return json.dumps(
            {
                topic: {str(partition): offset for partition, offset in offsets.items()}
                for topic, offsets in self.starting_offsets.items()
            }
        )


_KEY_FORMAT_DESCRIPTION = (
    "`none` (no `kafka_key` column), `string`, `binary`, or a structured format (`json`, "
    "`avro`, `confluent-avro`) whose record becomes a struct column `kafka_key`."
)

with warnings.catch_warnings():
    # The YAML key is `schema`; the field hides BaseModel's deprecated schema() classmethod, unused here.
    warnings.filterwarnings("ignore", message='Field name "schema" in "FormatSettings" shadows', category=UserWarning)

    class FormatSettings(_Section):
        """How the Kafka key (or value) bytes are decoded."""

        #: A key takes any format, a value only a record format (`ValueFormatSettings`).
        format: DecodeFormat | RecordFormat = Field(DecodeFormat.STRING, description=_KEY_FORMAT_DESCRIPTION)
        schema: Text | None = Field(  # type: ignore[assignment]  # the YAML key hides pydantic's deprecated schema()
            None,
            description=(
                "The fields of `json` records as Spark DDL, e.g. `id STRING, amount DOUBLE`. Only with "
                "`json`, which needs exactly one of `schema` and `schema_file`."
            ),
        )
        schema_file: Path | None = Field(
            None,
            description=(
                "An Avro schema file (`.avsc`), relative to the YAML file's directory. Required with "
                "`avro` (the writer schema); with `json`, the fields instead of `schema`; with "
                "`confluent-avro`, an optional reader schema (default: the latest schema registered for "
                "the subject `<first topic>-key` or `<first topic>-value`, which needs `source.topics`). "
                "Once a table exists, a value's reader schema is the one its last commit recorded, "
                "evolved by this one or the latest registered one."
            ),
        )

        #: Whether `json` may go without a schema (a key of change events: the record key's fields).
        _json_schema_optional: ClassVar[bool] = False

        @model_validator(mode="after")
        def _schema_fits_format(self, info: ValidationInfo) -> FormatSettings:
            has_ddl, has_file = self.schema is not None, self.schema_file is not None
            problems: list[Problem] = []
            if self.format == DecodeFormat.JSON and has_ddl and has_file:
                problems.append(((), "format json needs exactly one of schema (Spark DDL) or schema_file (.avsc)"))
            if self.format == DecodeFormat.JSON and not has_ddl and not has_file and not self._json_schema_optional:
                problems.append(((), "format json needs exactly one of schema (Spark DDL) or schema_file (.avsc)"))
            if self.format == DecodeFormat.AVRO and has_ddl:
                problems.append((("schema",), "not allowed with format avro; give the Avro schema in schema_file"))
            if self.format == DecodeFormat.AVRO and not has_file:
                problems.append((("schema_file",), "required with format avro"))
            if self.format == DecodeFormat.CONFLUENT_AVRO and has_ddl:
                problems.append(
                    (("schema",), "not allowed with format confluent-avro; schema_file may give a reader schema")
                )
            if self.format in (DecodeFormat.NONE, DecodeFormat.STRING, DecodeFormat.BINARY):
                problems.extend(
                    ((key,), f"not allowed with format {self.format}")
                    for key, present in (("schema", has_ddl), ("schema_file", has_file))
                    if present
                )
            config_dir = (info.context or {}).get(CONFIG_DIR)
            if not problems and self.schema_file is not None and config_dir is not None:
                resolved = _resolve(config_dir, self.schema_file)
                if not resolved.is_file():
                    problems.append((("schema_file",), f"no such file: {resolved} (got {str(self.schema_file)!r})"))
            _raise_problems(problems)
            return self


class KeyFormatSettings(FormatSettings):
    """How the Kafka key bytes are decoded. With Debezium's envelope, `json` may go without a
    schema: the key's fields are then the record key's, typed as in the value."""

    format: DecodeFormat = Field(DecodeFormat.STRING, description=_KEY_FORMAT_DESCRIPTION)
    _json_schema_optional: ClassVar[bool] = True


class ValueFormatSettings(FormatSettings):
    """The value's format: required, and only the structured formats."""

    format: RecordFormat = Field(
        description=("`json`, `avro` or `confluent-avro`; the record's fields become columns.")
    )
    envelope: Envelope = Field(
        Envelope.NONE,
        description=(
            "`none`: the record is the row. `debezium`: the record is a change event of Debezium's (`before`, "
            "`after`, `op`, `source`), in Kafka Connect's JSON with or without its schemas, or Avro through the "
            "registry; `schema`/`schema_file` then give the row's fields (`after`'s). `c`, `r` and `u` upsert "
            "`after`, `d` deletes the key, and truncates, heartbeats and schema-change messages write nothing "
            "(counted by kind). With Connect's JSON schemas or the registry, a nullable column added in the "
            'database becomes a column of the table. See docs/operations.md, "Mirroring a database".'
        ),
    )


class SchemaRegistrySettings(_Section):
    """The Confluent schema registry the ``confluent-avro`` formats fetch writer schemas from."""

    url: Text = Field(description="The registry's base URL, `http://` or `https://`.")
    basic_auth_user_info: SecretStr | None = Field(
        None, description=("`user:password` for HTTP basic authentication; never shown in messages or reprs.")
    )

    @property
    def auth(self) -> str | None:
        """The credentials in clear, for the registry client only."""
        return self.basic_auth_user_info.get_secret_value() if self.basic_auth_user_info else None

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ConfigValueError("should be an http:// or https:// URL")
        return url

    @field_validator("basic_auth_user_info")
    @classmethod
    def _user_and_password(cls, user_info: SecretStr | None) -> SecretStr | None:
        if user_info is not None and ":" not in user_info.get_secret_value():
            raise ConfigValueError("should be 'user:password'")
        return user_info


class DecodeSettings(_Section):
    """Decoding of Kafka keys and values into columns, and what to do with undecodable rows."""

    key: KeyFormatSettings = Field(KeyFormatSettings(), description="How the Kafka key is decoded.")
    value: ValueFormatSettings = Field(
        description=(
            "How the Kafka value is decoded; its fields are the table's columns unless `transform` makes others."
        )
    )
    schema_registry: SchemaRegistrySettings | None = Field(
        None,
        description=(
            "The schema registry: required when the key or the value format is `confluent-avro`, not allowed otherwise."
        ),
    )
    on_error: BadRecordPolicy = Field(
        BadRecordPolicy.FAIL,
        description=(
            "What happens to a record that cannot be decoded (malformed, wrong types, a null or missing "
            "record key or ordering value, an unknown schema id, a writer schema that drops a required "
            "field or changes a field's type other than by widening): `fail` stops the table's query and "
            "writes nothing of the batch; `skip` drops and counts it; `quarantine` writes it, with the "
            "reason, to the quarantine table."
        ),
    )
    tombstones: TombstonePolicy | None = Field(
        None,
        description=(
            "What a record whose value is null (a tombstone) does: `delete` deletes its key (Flink's "
            "upsert-kafka semantics; the key must decode to the record key and partition fields, and a "
            "tombstone, which carries no ordering value, deletes in commit order); `skip` drops and counts it; "
            "`bad` makes it a bad record (`on_error` decides). Default: `delete` with the Debezium envelope "
            "when the key gives the partition fields, else `skip` there (Debezium's delete event before "
            "each tombstone deletes the row); `bad` without an envelope."
        ),
    )
    envelope_columns: dict[EnvelopeField, Text] = Field(
        {},
        description=(
            "With the Debezium envelope, envelope fields kept as table columns, by column name: `position` "
            "(the change's place in the database's log: PostgreSQL's LSN, MySQL's binlog file number times "
            "10^12 plus the position, else the source's `ts_ms`: the column to use as `table.ordering_field`), "
            "`op`, `source_ts_ms` (when the database made the change), `ts_ms` (when Debezium read it). "
            "E.g. `{position: source_position, op: source_op}`."
        ),
    )

    @model_validator(mode="after")
    def _registry_iff_confluent_avro(self) -> DecodeSettings:
        needed = "confluent-avro" in (self.key.format, self.value.format)
        problems: list[Problem] = []
        if needed != (self.schema_registry is not None):
            rule = "required" if needed else "only allowed"
            problems.append((("schema_registry",), f"{rule} when key or value format is confluent-avro"))
        debezium = self.value.envelope == Envelope.DEBEZIUM
        if self.envelope_columns and not debezium:
            problems.append((("envelope_columns",), "only allowed with value.envelope: debezium"))
        names = list(self.envelope_columns.values())
        problems.extend(
            (("envelope_columns", field), f"column {name!r} is named twice")
            for field, name in self.envelope_columns.items()
            if names.count(name) > 1
        )
        if (
            self.key.format == DecodeFormat.JSON
            and self.key.schema is None
            and self.key.schema_file is None
            and not debezium
        ):
            problems.append((("key",), "format json needs exactly one of schema (Spark DDL) or schema_file (.avsc)"))
        if self.tombstones == TombstonePolicy.DELETE and self.key.format == DecodeFormat.NONE:
            problems.append((("tombstones",), "delete needs a key to delete: key.format is none"))
        _raise_problems(problems)
        return self

    def required_registry(self) -> SchemaRegistrySettings:
        """The schema registry, which a confluent-avro key or value has (validated above)."""
        if self.schema_registry is None:
            raise ConfigValueError("decode.schema_registry: required when key or value format is confluent-avro")
        return self.schema_registry


class IndexSettings(_Section):
    """The consistent-hashing bucket index, and how its buckets are resized.

    Every bucket of a partition is one file group. Clustering (`services.clustering`) splits a
    bucket that grew past `split_threshold_mb` into two, and merges adjacent buckets whose
    sizes together stay within `merge_threshold_mb`, keeping each partition between
    `min_buckets` and `max_buckets`. A bucket's size is that of its latest file slice: its base
    file plus the log files written since."""

    initial_buckets: int = Field(
        WriteOptions.initial_buckets,
        ge=1,
        le=65536,
        description=("Buckets (file groups) of a partition when it is first written; existing partitions keep theirs."),
    )
    min_buckets: int | None = Field(
        None,
        ge=1,
        description=(
            "Merges never leave a partition with fewer buckets than this; null means `initial_buckets`. "
            "At most `initial_buckets`."
        ),
    )
    max_buckets: int = Field(
        ClusteringPolicy.max_buckets,
        ge=1,
        le=65536,
        description=("Splits never give a partition more buckets than this. At least `initial_buckets`."),
    )
    split_threshold_mb: float = Field(
        240,
        gt=0,
        description=(
            "A bucket whose latest file slice (base and log files) is larger than this many MiB is split "
            "in two (Hudi's default: twice its 120 MB maximum file size)."
        ),
    )
    merge_threshold_mb: float = Field(
        24,
        ge=0,
        description=(
            "Adjacent buckets whose latest file slices together stay within this many MiB are merged into "
            "one (Hudi's default: 0.2 of its 120 MB maximum file size); 0 never merges. Less than "
            "`split_threshold_mb`, or merges would undo splits."
        ),
    )
    split_point: SplitPoint = Field(
        ClusteringPolicy.split_point,
        description=(
            "Where a split cuts a bucket's hash range: `middle`, at its middle; `distribution`, at the "
            "median hash of the bucket's records, so that each child gets about half of them (this reads "
            "the bucket when planning)."
        ),
    )

    @model_validator(mode="after")
    def _bounds(self) -> IndexSettings:
        problems: list[Problem] = []
        if self.merge_threshold_mb >= self.split_threshold_mb:
            problems.append(
                (
                    ("merge_threshold_mb",),
                    f"should be less than split_threshold_mb "
                    f"({self.split_threshold_mb:g}), or merges would undo splits "
                    f"(got {self.merge_threshold_mb:g})",
                )
            )
        if self.min_buckets is not None and self.min_buckets > self.initial_buckets:
            problems.append(
                (
                    ("min_buckets",),
                    f"should be at most initial_buckets ({self.initial_buckets}) (got {self.min_buckets})",
                )
            )
        if self.max_buckets < self.initial_buckets:
            problems.append(
                (
                    ("max_buckets",),
                    f"should be at least initial_buckets ({self.initial_buckets}) (got {self.max_buckets})",
                )
            )
        _raise_problems(problems)
        return self

    @property
    def bucket_floor(self) -> int:
        """The fewest buckets merges leave a partition with."""
        return self.initial_buckets if self.min_buckets is None else self.min_buckets


_INTERVAL = re.compile(r"\d+ +(millisecond|second|minute|hour)s?", re.IGNORECASE)
_UNIT_SECONDS = {"millisecond": 0.001, "second": 1, "minute": 60, "hour": 3600}


class StreamSettings(_Section):
    """The streaming query: trigger, checkpoint and failure policy."""

    trigger_interval: str = Field(
        "10 seconds",
        description=(
            "How often a micro-batch starts: a whole number and a unit, millisecond(s), second(s), "
            "minute(s) or hour(s). Not used by `streamer run --once`."
        ),
    )
    checkpoint_location: Text | None = Field(
        None,
        description=(
            "The Spark checkpoint of the table's query; by default "
            "`<table.path>/.hoodie/.aux/streaming-checkpoint`. A local path is relative to the YAML file's "
            "directory, as `table.path` is. Unique among the configs run together."
        ),
    )
    driver_write_max_records: int = Field(
        500_000,
        ge=0,
        description=(
            "On a local master (`local[*]`), a micro-batch of at most this many records is read, "
            "decoded and written by the driver itself rather than by Spark's tasks: for a batch this "
            "small, Spark's two stages cost more than the batch's own work. It then holds the batch in "
            "its memory, about twice the records' size. Larger batches, and every batch on a cluster, "
            "are written by Spark's tasks. 0 turns this off. `kafka-arrow` only, without a `transform`."
        ),
    )
    on_failure: QueryFailurePolicy = Field(
        QueryFailurePolicy.CONTINUE,
        description=(
            "When the table's query fails: `continue` lets the other tables run on, `stop_application` "
            "stops them all. The exit status is non-zero either way."
        ),
    )

    @field_validator("checkpoint_location")
    @classmethod
    def _relative_to_the_config(cls, location: str | None, info: ValidationInfo) -> str | None:
        return _against_config_dir(location, info)

    @property
    def trigger_seconds(self) -> float:
        count, unit = self.trigger_interval.split()
        return int(count) * _UNIT_SECONDS[unit.lower().rstrip("s")]

    @field_validator("trigger_interval")
    @classmethod
    def _spark_interval(cls, interval: str) -> str:
        if not _INTERVAL.fullmatch(interval.strip()):
            raise ConfigValueError(
                "should be a whole number and a unit: millisecond(s), second(s), minute(s) or hour(s), "
                "e.g. '10 seconds'"
            )
        return interval.strip()


class _ServiceSettings(_Section):
    """When a service runs: `inline` in the sink after a commit, `async` scheduled there and
    executed by the application's background executor, `off` only by the offline command."""

    mode: ServiceMode = Field(
        ServiceMode.INLINE,
        description=(
            "`inline`: scheduled and executed after a deltacommit, before the next micro-batch; `async`: "
            "scheduled there, executed by the application's background thread; `off`: left to the "
            "offline `streamer` command."
        ),
    )
    every_delta_commits: int | None = Field(
        None,
        ge=1,
        description=(
            "Due after this many deltacommits since the service's last instant (archival counts those on "
            "the active timeline). With neither trigger set, due after every deltacommit."
        ),
    )
    every_seconds: float | None = Field(
        None,
        gt=0,
        description=(
            "Due once this many seconds have passed since the job last scheduled the service (or started). "
            "Either trigger makes it due."
        ),
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, mode: Any) -> Any:
        """YAML 1.1 reads a bare `off` as false; it means the mode `off`."""
        return ServiceMode.OFF if mode is False else mode


class CompactionSettings(_ServiceSettings):
    """Folding log files into base files. Due after `every_delta_commits` deltacommits since
    the last compaction plan, or `every_seconds`, whichever comes first.

    `inline` is the default because it keeps every reader exact: hudi-rs (0.5) does not read
    log files written to a file group while its compaction is pending (`async`) until the
    compaction completes; Hudi's own readers and ours do."""

    mode: ServiceMode = Field(
        ServiceMode.INLINE,
        description=(
            "`inline`, `async` or `off`, as for every service. `inline` keeps every reader exact; with "
            "`async`, hudi-rs 0.5 reads what is written to a file group under a pending compaction only "
            "once the compaction completes."
        ),
    )
    every_delta_commits: int | None = Field(
        5,
        ge=1,
        description=(
            "Due after this many deltacommits since the last compaction instant; null leaves only `every_seconds`."
        ),
    )
    strategy: CompactionStrategyKind = Field(
        CompactionStrategy.kind,
        description=(
            "Which file slices a plan takes: `log_file_count`, those with at least `min_log_files` log "
            "files, most first; `log_file_size`, at least `min_log_bytes` of logs, largest first; "
            "`bounded_io`, largest logs first; `recent_partitions`, every slice of the "
            "`recent_partitions` greatest partition paths."
        ),
    )
    min_log_files: int = Field(
        CompactionStrategy.min_log_files,
        ge=1,
        description=("`log_file_count`: the fewest log files a slice needs to be compacted."),
    )
    min_log_bytes: int = Field(
        CompactionStrategy.min_log_bytes,
        ge=0,
        description=("`log_file_size`: the fewest bytes of log files a slice needs to be compacted."),
    )
    max_io_mb: int = Field(
        CompactionStrategy.max_io_bytes // MIB,
        ge=1,
        description=(
            "All strategies but `recent_partitions` stop adding slices once their base and log files "
            "reach this many MiB."
        ),
    )
    recent_partitions: int | None = Field(
        CompactionStrategy.recent_partitions,
        ge=1,
        description=("`recent_partitions`: how many of the greatest partition paths to compact; 10 when null."),
    )
    max_log_files_per_group: int | None = Field(
        None,
        ge=1,
        description=(
            "The most log files a snapshot read merges in any file group (the bound on read "
            "amplification); unbounded when null. When a file group holds this many after a commit, "
            "the next batch would cross it, so the job first executes the pending plans (waiting for "
            "the background thread's) and compacts the file groups still at the bound, logging why; "
            "the stream waits meanwhile (`mor_streamer_backpressure_seconds_total`). Not with `mode: off`."
        ),
    )

    @model_validator(mode="after")
    def _bound_needs_compaction(self) -> CompactionSettings:
        if self.max_log_files_per_group is not None and self.mode == ServiceMode.OFF:
            _raise_problems(
                [
                    (
                        ("max_log_files_per_group",),
                        "not allowed with mode off: the job would have no compaction to hold the bound with",
                    )
                ]
            )
        return self


class ClusteringSettings(_ServiceSettings):
    """Bucket resizing and sorting (Hudi's clustering of a consistent-hashing table), each plan a
    replacecommit. A plan splits the buckets grown past `index.split_threshold_mb`, merges
    adjacent small ones (`index.merge_threshold_mb`) and, with `sort_columns`, rewrites buckets
    sorted. Due after `every_delta_commits` deltacommits since the last clustering instant, or
    `every_seconds`, whichever comes first.

    While a plan is pending, writes to a planned bucket go to the old file group and to its new
    one (dual writes), and readers see only the old groups until the plan completes; so every
    reader, hudi-rs included, is exact in every state, and `async` is safe."""

    mode: ServiceMode = Field(
        ServiceMode.INLINE,
        description=(
            "`inline`, `async` or `off`, as for every service. With `async`, batches go on while the "
            "background thread rewrites the planned buckets; what they write reaches the new buckets too."
        ),
    )
    every_delta_commits: int | None = Field(
        10,
        ge=1,
        description=(
            "Due after this many deltacommits since the last clustering instant (or since the job last "
            "found nothing to plan); null leaves only `every_seconds`."
        ),
    )
    sort_columns: list[Text] = Field(
        [],
        description=(
            "Table columns each bucket's base file is sorted by (then by record key). A bucket not sorted "
            "by them yet is rewritten sorted; empty: buckets are only split and merged. Checked against "
            "the table's columns when the job starts."
        ),
    )
    max_partitions: int | None = Field(
        ClusteringPolicy.max_partitions,
        ge=1,
        description=("The most partitions one plan takes buckets from; unbounded when null."),
    )
    max_plan_mb: float | None = Field(
        2048,
        gt=0,
        description=(
            "One plan stops taking buckets once their latest file slices reach this many MiB (the first "
            "bucket is always taken, however large); unbounded when null."
        ),
    )

    @field_validator("sort_columns")
    @classmethod
    def _distinct(cls, columns: list[str]) -> list[str]:
        _raise_problems([((i,), f"column {c!r} is named twice") for i, c in enumerate(columns) if c in columns[:i]])
        return columns


class CleanSettings(_ServiceSettings):
    """Removing file slices no reader of the retained commits needs. Due after every commit
    unless a trigger says otherwise."""

    policy: CleanPolicyKind = Field(
        CleanPolicy.kind,
        description=(
            "`keep_latest_commits`: keep the file slices that reads as of the last `retained` commits "
            "need; `keep_latest_file_versions`: keep the newest `retained` slices of each file group."
        ),
    )
    retained: int = Field(
        CleanPolicy.retained, ge=1, description=("Commits, or file slices per file group, that `policy` keeps.")
    )


class ArchiveSettings(_ServiceSettings):
    """Keeping the active timeline between bounds by archiving its oldest instants."""

    min_instants: int = Field(
        ArchivePolicy.min_instants,
        ge=1,
        description=(
            "Completed instants left active after archiving. Greater than `services.clean.retained` "
            "unless cleaning or archival is off."
        ),
    )
    max_instants: int = Field(
        ArchivePolicy.max_instants,
        ge=2,
        description=("Archival starts when more completed instants than this are active; greater than `min_instants`."),
    )

    @model_validator(mode="after")
    def _bounds(self) -> ArchiveSettings:
        if self.max_instants <= self.min_instants:
            _raise_problems([(("max_instants",), f"should be greater than min_instants ({self.min_instants})")])
        return self


class ServicesSettings(_Section):
    """The table services and the mode each runs in."""

    compaction: CompactionSettings = Field(CompactionSettings(), description="Compaction of log files into base files.")
    clustering: ClusteringSettings = Field(
        ClusteringSettings(), description=("Bucket resizing (split, merge) and sorting of buckets, as replacecommits.")
    )
    clean: CleanSettings = Field(CleanSettings(), description="Removal of file slices no retained commit needs.")
    archive: ArchiveSettings = Field(
        ArchiveSettings(), description="Archival of the oldest instants of the active timeline."
    )

    @model_validator(mode="after")
    def _archive_keeps_what_clean_retains(self) -> ServicesSettings:
        both_on = ServiceMode.OFF not in (self.clean.mode, self.archive.mode)
        if both_on and self.archive.min_instants <= self.clean.retained:
            _raise_problems(
                [
                    (
                        ("archive", "min_instants"),
                        f"should be greater than services.clean.retained ({self.clean.retained}), "
                        "so the active timeline holds every commit the cleaner retains",
                    )
                ]
            )
        return self


class SyncSettings(_Section):
    """Registering the table in a Hive Metastore as Hudi's `HiveSyncTool` does: `<table_name>_rt`
    (snapshot) and `<table_name>_ro` (read-optimized), with Hudi's input formats and the properties
    Spark, Hive, Trino and Presto read a Hudi table by. Partitions added or dropped since the
    last sync are read from the timeline; new columns are added; the database is created when
    missing. A sync that fails never fails the commit: it is retried at the next one, and
    `streamer status`, `streamer doctor` and `mor_streamer_catalog_commits_behind` show it.
    The client is Hive's own, in the job's JVM (see docs/operations.md)."""

    mode: ServiceMode = Field(
        ServiceMode.INLINE,
        description=(
            "`inline`: synced after a deltacommit, before the next micro-batch; `async`: by a background "
            "thread of the table's own, the stream going on meanwhile; `off`: only by `streamer sync`."
        ),
    )
    metastore_uris: Text | None = Field(
        None,
        description=(
            "The metastore's Thrift URIs, `thrift://host:9083[,thrift://...]`; null takes "
            "`hive.metastore.uris` from the job's Hadoop configuration (`hive-site.xml`, "
            "`spark.hadoop.hive.metastore.uris`)."
        ),
    )
    database: Text = Field("default", description="The database the tables are registered in.")
    table_name: Text | None = Field(
        None, description=("The name before the `_rt` and `_ro` suffixes; null: `table.name`.")
    )
    create_database: bool = Field(True, description="Create the database when the metastore lacks it.")
    every_delta_commits: int | None = Field(
        None,
        ge=1,
        description=(
            "Sync after this many deltacommits since the last sync. With neither trigger set, after every deltacommit."
        ),
    )
    every_seconds: float | None = Field(
        None,
        gt=0,
        description=("Sync once this many seconds have passed since the last sync. Either trigger makes it due."),
    )
    timeout_seconds: float = Field(
        30, gt=0, description=("How long one call may wait for the metastore before the sync counts as failed.")
    )
    hive_conf: dict[str, OptionValue] = Field(
        {},
        description=(
            "Hive client settings (`hive.metastore.sasl.enabled`, `hive.metastore.kerberos.principal`, ...) "
            "over those of the job's Hadoop configuration."
        ),
    )
    table_properties: dict[str, OptionValue] = Field(
        {}, description=("Table properties set on both tables besides Hudi's.")
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, mode: Any) -> Any:
        return ServiceMode.OFF if mode is False else mode

    @field_validator("metastore_uris")
    @classmethod
    def _thrift_uris(cls, uris: str | None) -> str | None:
        if uris is not None:
            bad = [u for u in uris.split(",") if not re.fullmatch(r"thrift://[^\s/:,]+:\d+", u.strip())]
            if bad:
                raise ConfigValueError(f"should be thrift://host:port[,thrift://host:port...]; not {', '.join(bad)}")
        return uris

    def thrift_endpoints(self) -> list[tuple[str, int]]:
        """(host, port) of each configured URI."""
        found = []
        for uri in (self.metastore_uris or "").split(","):
            if uri.strip():
                host, port = uri.strip()[len("thrift://") :].rsplit(":", 1)
                found.append((host, int(port)))
        return found


def _empty_as_null(value: Any) -> Any:
    """An empty value (say, `${METRICS_PORT:-}` with the variable unset) is no value."""
    return None if value == "" else value


class MetricsSettings(_Section):
    """The application's Prometheus endpoint (`/metrics`) and health endpoint (`/health`), off
    unless a port is given. One endpoint serves every table run together, so the configs that
    set a port must set the same one; each table's metrics carry its name as the `table` label.
    See docs/operations.md for each metric."""

    port: Annotated[int | None, BeforeValidator(_empty_as_null)] = Field(
        None, ge=1, le=65535, description=("The TCP port of the endpoints; null (or empty) turns them off.")
    )
    host: Text = Field("0.0.0.0", description="The address the endpoints listen on.")
    stuck_after_triggers: int = Field(
        10,
        ge=1,
        description=(
            "`/health` calls a table stuck when Kafka holds records it has not committed and no commit "
            "came for this many trigger intervals (`stream.trigger_interval`); with no records waiting "
            "it is idle, which is healthy."
        ),
    )


_QUERY_START = re.compile(r"\s*(select|with)\b", re.IGNORECASE)
_SOURCE_VIEW = re.compile(r"\bsource\b", re.IGNORECASE)


class JobConfig(_Section):
    """One table job: a Kafka source streamed into one Hudi table."""

    table: TableSettings = Field(description="The Hudi table written to.")
    source: SourceSettings = Field(description="The Kafka topics read.")
    decode: DecodeSettings = Field(description="How Kafka keys and values become columns.")
    transform: str | None = Field(
        None,
        description=(
            "A Spark SQL query of the view `source` (`SELECT ... FROM source`) whose result is upserted. "
            "`source` holds the value's fields, `kafka_key` (unless the key format is `none`), "
            "`kafka_topic`, `kafka_partition`, `kafka_offset` and `kafka_timestamp`. Without it, the "
            "value's fields are upserted."
        ),
    )
    index: IndexSettings = Field(IndexSettings(), description="The consistent-hashing bucket index.")
    stream: StreamSettings = Field(StreamSettings(), description="The streaming query.")
    services: ServicesSettings = Field(ServicesSettings(), description="Compaction, clustering, cleaning and archival.")
    metrics: MetricsSettings = Field(MetricsSettings(), description="The Prometheus and health endpoints.")
    sync: SyncSettings | None = Field(
        None, description=("The table's registration in a Hive Metastore; none without this section.")
    )
    _config_path: Path = PrivateAttr(Path("<config>"))

    @model_validator(mode="after")
    def _change_events_say_what_deletes(self) -> JobConfig:
        if self.decode.value.envelope == Envelope.DEBEZIUM and self.table.delete_field is not None:
            _raise_problems(
                [
                    (
                        ("table", "delete_field"),
                        "not allowed with decode.value.envelope: debezium: "
                        "the change events say which records are deletes",
                    )
                ]
            )
        return self

    @field_validator("transform")
    @classmethod
    def _query_of_source(cls, sql: str | None) -> str | None:
        if sql is not None and not (_QUERY_START.match(sql) and _SOURCE_VIEW.search(sql)):
            raise ConfigValueError("should be a SQL query of the view source: SELECT ... FROM source")
        return sql

    @property
    def config_path(self) -> Path:
        """The YAML file this config came from."""
        return self._config_path

    @property
    def checkpoint_location(self) -> str:
        """The streaming query's checkpoint: inside the table's .hoodie unless configured."""
        return self.stream.checkpoint_location or f"{self.table.path.rstrip('/')}/{AUX_DIR}/streaming-checkpoint"

    def schema_file(self, fmt: FormatSettings) -> Path | None:
        """``fmt.schema_file`` resolved against the YAML file's directory."""
        return None if fmt.schema_file is None else _resolve(self.config_path.parent, fmt.schema_file)
