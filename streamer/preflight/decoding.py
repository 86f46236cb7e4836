"""What a config's key and value decode to, found without Spark: the json format's DDL read by
`streamer.decode.ddl`, Avro schema files read and converted, and, for `confluent-avro` without a
schema file, the latest schema registered for the topic (when the registry answers).

With Debezium's envelope the value's fields are the row's (`after`'s): the `avro` format's schema
file, and the latest registered schema, are the change event's, whose `after` record is taken
(a `confluent-avro` schema file is the row's reader schema); with `json`, the row's declared
fields get an Avro reader schema, which Connect's schemas in the stream evolve."""

from __future__ import annotations

import json
from typing import overload

import pyarrow as pa

from streamer.config.choices import DecodeFormat, Envelope, RecordFormat
from streamer.config.model import FormatSettings, JobConfig
from streamer.decode.ddl import parse_ddl
from streamer.decode.debezium import envelope_row
from streamer.decode.formats import FormatSpec, spark_normalized
from streamer.decode.registry import SchemaRegistryClient
from streamer.errors import SchemaRegistryError
from streamer.preflight.problem import ConfigProblem, ConfigProblemsError
from table import arrow_schema_from_avro, to_avro_schema

SPARK_TYPES = "a Spark SQL type (BOOLEAN, INT, BIGINT, DOUBLE, DECIMAL(p, s), STRING, DATE, TIMESTAMP, ...)"


@overload
def format_spec(config: JobConfig, fmt: FormatSettings, role: str, registry_timeout: None = None) -> FormatSpec: ...
@overload
def format_spec(config: JobConfig, fmt: FormatSettings, role: str, registry_timeout: float) -> FormatSpec | None: ...
def format_spec(
    config: JobConfig, fmt: FormatSettings, role: str, registry_timeout: float | None = None
) -> FormatSpec | None:
    """The key's or value's (`role`) format with the fields it decodes to; None when they are the
    registry's to say and it did not answer (`registry_timeout` set) or has no such subject.
    Raises `ConfigProblemsError` naming each problem. Without `registry_timeout` the registry is asked
    as the job asks it, and its errors raise."""
    kind = DecodeFormat(fmt.format)  # a value's RecordFormat, as the decoder names it
    if kind in (DecodeFormat.NONE, DecodeFormat.STRING, DecodeFormat.BINARY):
        return FormatSpec(kind, None)
    key = f"decode.{role}"
    envelope = role == "value" and config.decode.value.envelope == Envelope.DEBEZIUM
    if kind == DecodeFormat.JSON and fmt.schema:
        arrow, problems = parse_ddl(fmt.schema)
        if problems:
            known = _in_ddl_order(spark_normalized(arrow), problems)
            raise ConfigProblemsError(
                [ConfigProblem(config.config_path, f"{key}.schema", str(p), f"give {SPARK_TYPES}") for p in problems],
                known,
            )
        return _spec(config, kind, spark_normalized(arrow), None, envelope)
    schema_file = config.schema_file(fmt)
    if schema_file is not None:
        avro = _read_avro_file(config, key, schema_file)
    else:  # confluent-avro: the registry's latest
        latest = _latest_registered(config, role, registry_timeout)
        if latest is None:
            return None
        avro = latest
    row = avro
    if envelope and kind == DecodeFormat.AVRO:  # the records' own schema: the change event's
        row = _envelope_row(config, key, schema_file, avro)
    elif envelope and kind == DecodeFormat.CONFLUENT_AVRO and schema_file is None:
        avro = row = _envelope_row(config, key, schema_file, avro)  # the latest event's row: the reader schema
    try:
        arrow = arrow_schema_from_avro(row)
    except Exception as e:  # the converter says what it cannot take
        where = f"{key}.schema_file" if schema_file is not None else key
        raise ConfigProblemsError(
            [
                ConfigProblem(
                    config.config_path,
                    where,
                    f"unsupported Avro schema: {e}",
                    "use records of primitive, logical, array, map, enum and record types",
                )
            ]
        ) from e
    return _spec(config, kind, spark_normalized(arrow), avro, envelope)


def follows_writer_schemas(config: JobConfig) -> bool:
    """Whether the value's reader schema evolves with the stream: `confluent-avro`, and Debezium's
    envelope in JSON (with Connect's schemas in the records)."""
    value = config.decode.value
    return value.format == RecordFormat.CONFLUENT_AVRO or (
        value.format == RecordFormat.JSON and value.envelope == Envelope.DEBEZIUM
    )


@overload
def key_spec(config: JobConfig, value: FormatSpec, registry_timeout: None = None) -> FormatSpec: ...
@overload
def key_spec(
    config: JobConfig, value: FormatSpec | None, registry_timeout: float | None = None
) -> FormatSpec | None: ...
def key_spec(config: JobConfig, value: FormatSpec | None, registry_timeout: float | None = None) -> FormatSpec | None:
    """The key's format with the fields it decodes to, as `format_spec`; `json` without a schema
    (Debezium's keys) has the record key's fields, typed as in the value (None without it)."""
    key = config.decode.key
    if key.format == DecodeFormat.JSON and key.schema is None and key.schema_file is None:
        if value is None:
            return None
        fields = [value.fields().field(name) for name in config.table.record_key if name in value.fields().names]
        return FormatSpec(DecodeFormat.JSON, pa.schema(fields))
    return format_spec(config, key, "key", registry_timeout)


def _spec(config: JobConfig, fmt: DecodeFormat, arrow: pa.Schema, avro: str | None, envelope: bool) -> FormatSpec:
    if envelope and fmt == DecodeFormat.JSON:  # the row's reader schema, which the stream evolves
        avro = json.dumps(to_avro_schema(arrow, config.table.name))
    return FormatSpec(fmt, arrow, avro)


def _envelope_row(config: JobConfig, key: str, schema_file, avro: str) -> str:
    """The row's Avro schema in a change event's: its `after` record."""
    row = envelope_row(json.loads(avro))
    if row is None:
        where, which = (
            (f"{key}.schema_file", f"{schema_file}")
            if schema_file is not None
            else (key, f"the latest schema registered for '{registry_subject(config, 'value')}'")
        )
        raise ConfigProblemsError(
            [
                ConfigProblem(
                    config.config_path,
                    where,
                    f"{which} is not a Debezium change event's (no `after` record)",
                    "give the change event's schema, or turn decode.value.envelope off",
                )
            ]
        )
    return json.dumps(row)


def _in_ddl_order(good: pa.Schema, problems: list) -> dict[str, pa.DataType | None]:
    """Every column of a DDL by name, in its order: the types of those that were read, None for
    those that have a problem."""
    bad = {p.position: p.name for p in problems}
    fields = iter(good)
    known: dict[str, pa.DataType | None] = {}
    for position in range(1, len(good) + len(bad) + 1):
        if position in bad:
            if bad[position]:
                known[bad[position]] = None
        else:
            field = next(fields)
            known[field.name] = field.type
    return known


def _read_avro_file(config: JobConfig, key: str, schema_file) -> str:
    try:
        avro = schema_file.read_text()
        json.loads(avro)
    except (OSError, ValueError) as e:
        raise ConfigProblemsError(
            [
                ConfigProblem(
                    config.config_path,
                    f"{key}.schema_file",
                    f"cannot read an Avro schema from {schema_file}: {e}",
                    "give the path of an Avro schema (.avsc, JSON) relative to this file",
                )
            ]
        ) from e
    return avro


def registry_subject(config: JobConfig, role: str) -> str:
    """The registry subject of the key's or value's (`role`) schemas: `<first topic>-<role>`."""
    topics = config.source.topics
    if not topics:
        raise ConfigProblemsError(
            [
                ConfigProblem(
                    config.config_path,
                    f"decode.{role}.schema_file",
                    "required with source.topic_pattern: the registry subject cannot be derived from a pattern",
                    "give the reader schema's .avsc file",
                )
            ]
        )
    return f"{topics[0]}-{role}"


def _latest_registered(config: JobConfig, role: str, timeout: float | None) -> str | None:
    registry = config.decode.required_registry()
    subject = registry_subject(config, role)
    if timeout is None:
        return SchemaRegistryClient(registry.url, registry.auth).latest_schema(subject)[1]
    try:
        return SchemaRegistryClient(registry.url, registry.auth, timeout=timeout).latest_schema(subject)[1]
    except SchemaRegistryError:  # not a config problem; `doctor` checks the registry, the job waits for it
        return None
