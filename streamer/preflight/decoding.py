"""What a config's key and value decode to, found without Spark: the json format's DDL read by
`streamer.decode.ddl`, Avro schema files read and converted, and, for `confluent-avro` without a
schema file, the latest schema registered for the topic (when the registry answers)."""

from __future__ import annotations

import json

import pyarrow as pa

from streamer.config.choices import DecodeFormat
from streamer.config.model import FormatSettings, JobConfig
from streamer.decode.ddl import parse_ddl
from streamer.decode.formats import FormatSpec, spark_normalized
from streamer.decode.registry import SchemaRegistryClient
from streamer.errors import SchemaRegistryError
from streamer.preflight.problem import ConfigProblem, ProblemsFound
from table.schema import arrow_schema_from_avro

SPARK_TYPES = "a Spark SQL type (BOOLEAN, INT, BIGINT, DOUBLE, DECIMAL(p, s), STRING, DATE, TIMESTAMP, ...)"


def format_spec(config: JobConfig, fmt: FormatSettings, role: str,
                registry_timeout: float | None = None) -> FormatSpec | None:
    """The key's or value's (`role`) format with the fields it decodes to; None when they are the
    registry's to say and it did not answer (`registry_timeout` set) or has no such subject.
    Raises `ProblemsFound` naming each problem. Without `registry_timeout` the registry is asked
    as the job asks it, and its errors raise."""
    if fmt.format in (DecodeFormat.NONE, DecodeFormat.STRING, DecodeFormat.BINARY):
        return FormatSpec(fmt.format, None)
    key = f"decode.{role}"
    if fmt.format == DecodeFormat.JSON and fmt.schema:
        arrow, problems = parse_ddl(fmt.schema)
        if problems:
            known = _in_ddl_order(spark_normalized(arrow), problems)
            raise ProblemsFound([ConfigProblem(config.config_path, f"{key}.schema", str(p), f"give {SPARK_TYPES}")
                                 for p in problems], known)
        return FormatSpec(fmt.format, spark_normalized(arrow))
    schema_file = config.schema_file(fmt)
    if schema_file is not None:
        avro = _read_avro_file(config, key, schema_file)
    else:  # confluent-avro: the registry's latest
        avro = _latest_registered(config, role, registry_timeout)
        if avro is None:
            return None
    try:
        arrow = arrow_schema_from_avro(avro)
    except Exception as e:  # the converter says what it cannot take
        where = f"{key}.schema_file" if schema_file is not None else key
        raise ProblemsFound([ConfigProblem(config.config_path, where, f"unsupported Avro schema: {e}",
                                           "use records of primitive, logical, array, map, enum and record types")])
    return FormatSpec(fmt.format, spark_normalized(arrow), avro)


def _in_ddl_order(good: pa.Schema, problems: list) -> dict[str, pa.DataType | None]:
    """Every column of a DDL by name, in its order: the types of those that were read, None for
    those that have a problem."""
    bad = {p.position: p.name for p in problems}
    fields = iter(good)
    known = {}
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
        raise ProblemsFound([ConfigProblem(config.config_path, f"{key}.schema_file",
                                           f"cannot read an Avro schema from {schema_file}: {e}",
                                           "give the path of an Avro schema (.avsc, JSON) relative to this file")])
    return avro


def _latest_registered(config: JobConfig, role: str, timeout: float | None) -> str | None:
    topics = config.source.topics
    if not topics:
        raise ProblemsFound([ConfigProblem(config.config_path, f"decode.{role}.schema_file",
                                           "required with source.topic_pattern: the registry subject cannot be "
                                           "derived from a pattern", "give the reader schema's .avsc file")])
    registry = config.decode.schema_registry
    subject = f"{topics[0]}-{role}"
    if timeout is None:
        return SchemaRegistryClient(registry.url, registry.auth).latest_schema(subject)[1]
    try:
        return SchemaRegistryClient(registry.url, registry.auth, timeout=timeout).latest_schema(subject)[1]
    except SchemaRegistryError:  # not a config problem; `doctor` checks the registry, the job waits for it
        return None
