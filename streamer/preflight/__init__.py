"""Every problem of a config that can be found before Spark starts, for `streamer run` and
`streamer doctor` alike: a start that fails takes a Spark session's start first (about 10 s), so
every problem of every file is found at once, without one.

On top of the YAML checks of `streamer.config.loading` (keys, types, values), for each config:

- the declared schemas: the json format's DDL (its types), Avro schema files; with
  `confluent-avro` and no schema file, the latest registered schema when the registry answers;
- value fields that take the names of the columns the decoder adds (`kafka_key`, `kafka_topic`, ...),
  and envelope columns that take a value field's or one of those;
- what deletes needs (`streamer.preflight.deletes`): tombstones that delete need a key that gives
  the record key and partition fields, and an integer ordering field;
- the table's columns: the value's fields (with Debezium's envelope, the row's fields and the
  envelope fields kept as columns), or the columns of a transform as far as they can be known
  without Spark (`streamer.preflight.select_list`: `*`, column references and aliases;
  references to columns source does not have are problems; a transform over deletes keeps
  their marker);
- `table.record_key` and `table.partition_by` (columns there, of types a key can take),
  `table.ordering_field` (there, and of a type that orders), `table.delete_field`,
  `services.clustering.sort_columns` (there, and not nested);
- an existing table (its `.hoodie/hoodie.properties`): its name, record key, partition and
  ordering fields as configured, and, without a transform, its columns able to take the
  value's (Hudi's schema evolution on write).

What only Spark can say is checked when the job starts, each in one line: a transform's
expressions (functions, casts, WHERE, and the columns it names inside them), the types of its
computed columns, and the key checks against the columns of a transform that could not be read.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from streamer.config.loading import read_all, read_configs
from streamer.config.mirror import MirrorConfig
from streamer.config.model import JobConfig
from streamer.decode.columns import ADDED_COLUMNS, DELETE, ERROR, EVOLVING, RAW_KEY, RAW_VALUE, SKIPPED
from streamer.decode.formats import FormatSpec
from streamer.decode.record_decoder import Deletes, RecordDecoder
from streamer.errors import ConfigError
from streamer.preflight.decoding import follows_writer_schemas, format_spec, key_spec, registry_subject
from streamer.preflight.deletes import deletes, row_columns
from streamer.preflight.problem import ConfigProblem, ConfigProblemsError
from streamer.preflight.rules import TableColumns, column_problems, evolution_problems, identity_problems
from streamer.preflight.select_list import transform_columns
from table import (
    Concurrency,
    InvalidRequestError,
    MorTable,
    Storage,
    UnsupportedTableVersionError,
    require_atomic_storage,
)

__all__ = [
    "REGISTRY_TIMEOUT_SECONDS",
    "ConfigProblem",
    "ConfigProblemsError",
    "TableColumns",
    "check",
    "column_problems",
    "deletes",
    "evolution_problems",
    "follows_writer_schemas",
    "format_spec",
    "identity_problems",
    "key_spec",
    "load_checked",
    "load_checked_all",
    "registry_subject",
    "row_columns",
]

#: How long the schema registry has to give a value schema to the checks.
REGISTRY_TIMEOUT_SECONDS = 5.0


def load_checked(path: str | Path, registry_timeout: float = REGISTRY_TIMEOUT_SECONDS) -> list[JobConfig]:
    """The configs of a file or directory, once every one of them passed every check; else
    `ConfigError` with every problem of every file, one line each."""
    configs, problems = read_configs(path)
    for config in configs:
        problems += [str(p) for p in check(config, registry_timeout)]
    if problems:
        raise ConfigError(problems)
    return configs


def load_checked_all(
    path: str | Path, registry_timeout: float = REGISTRY_TIMEOUT_SECONDS
) -> tuple[list[JobConfig], list[MirrorConfig]]:
    """`load_checked`, and the mirror files among them (checked as they load: each mirrored
    table's own config is made and checked when its topic is found)."""
    configs, mirrors, problems = read_all(path)
    for config in configs:
        problems += [str(p) for p in check(config, registry_timeout)]
    if problems:
        raise ConfigError(problems)
    return configs, mirrors


def check(config: JobConfig, registry_timeout: float = REGISTRY_TIMEOUT_SECONDS) -> list[ConfigProblem]:
    """Every problem of one loaded config that can be found without Spark (see the module doc)."""
    problems: list[ConfigProblem] = []
    specs: dict[str, FormatSpec | None] = {}
    for role in ("value", "key"):
        try:
            specs[role] = (
                format_spec(config, config.decode.value, role, registry_timeout)
                if role == "value"
                else key_spec(config, specs["value"], registry_timeout)
            )
        except ConfigProblemsError as e:
            problems += e.problems
            specs[role] = None
            if role == "value" and e.known is not None and not config.transform:  # what could be read
                problems += column_problems(config, TableColumns.of(e.known, config))
    value, key = specs["value"], specs["key"]
    if value is not None:
        clashes = _clashes(config, value)
        problems += clashes
        if not clashes and key is not None:
            problems += _table_problems(config, value, key)
    problems += _table_on_disk_problems(config, value)
    problems += _concurrency_problems(config)
    return problems


def _clashes(config: JobConfig, value: FormatSpec) -> list[ConfigProblem]:
    """Value fields and envelope columns that take the names of the decoder's columns or each other's."""
    added = ", ".join(name for name in ADDED_COLUMNS if not name.startswith("_"))
    clash = [name for name in value.fields().names if name in ADDED_COLUMNS]
    if clash:
        return [
            ConfigProblem(
                config.config_path,
                "decode.value",
                f"field(s) {clash} take the names of columns the decoder adds ({added})",
                "rename them in the value's schema, or read them in a transform",
            )
        ]
    return [
        ConfigProblem(
            config.config_path,
            f"decode.envelope_columns.{field}",
            f"column {name!r} is "
            + ("a field of the value's row" if name in value.fields().names else f"one the decoder adds ({added})"),
            "give the envelope field another name",
        )
        for field, name in config.decode.envelope_columns.items()
        if name in value.fields().names or name in ADDED_COLUMNS
    ]


def _table_problems(config: JobConfig, value: FormatSpec, key: FormatSpec) -> list[ConfigProblem]:
    found = deletes(config, value, key)
    problems = list(found.problems)
    if not config.transform:
        return problems + column_problems(config, TableColumns.of_schema(row_columns(config, value), config))
    source = _source_schema(config, value, key, found.deletes, problems)
    known = transform_columns(config.transform, source)
    problems += [
        ConfigProblem(config.config_path, "transform", text, f"name a column of source: {', '.join(source.names)}")
        for text in known.problems
    ]
    problems += column_problems(config, TableColumns.of(known.fields, config, known.complete))
    if DELETE in source.names and known.complete and DELETE not in known.fields:
        problems.append(
            ConfigProblem(
                config.config_path,
                "transform",
                f"deletes (tombstones, change events) are "
                f"marked in the column '{DELETE}' of source, which the query leaves out",
                f"keep it: SELECT *, or name {DELETE}",
            )
        )
    return problems


def _source_schema(
    config: JobConfig, value: FormatSpec, key: FormatSpec, deletes: Deletes, problems: list[ConfigProblem]
) -> pa.Schema:
    """The columns of the view `source` a transform reads: the decoder's, less its bookkeeping.
    A decoder the settings of deletes cannot make is a problem; the one without them goes on."""
    registry = config.decode.schema_registry
    url, auth = (registry.url, registry.auth) if registry else (None, None)
    try:
        decoder = RecordDecoder(value, key, url, auth, deletes=deletes)
    except ValueError as e:
        problems.append(
            ConfigProblem(
                config.config_path,
                "decode",
                str(e),
                "name fields of the value in table.record_key, table.partition_by and table.ordering_field",
            )
        )
        decoder = RecordDecoder(value, key, url, auth)
    bookkeeping = (ERROR, RAW_KEY, RAW_VALUE, EVOLVING, SKIPPED)
    return pa.schema([f for f in decoder.output_schema if f.name not in bookkeeping])


def _concurrency_problems(config: JobConfig) -> list[ConfigProblem]:
    """Several writers need a commit lock the storage guarantees (`table.storage.commit_lock`)."""
    t = config.table
    if t.concurrency != Concurrency.OPTIMISTIC:
        return []
    try:
        require_atomic_storage(Storage(t.path, t.storage_options))
    except InvalidRequestError as e:
        return [ConfigProblem(config.config_path, "table.concurrency", str(e), "set table.concurrency: single_writer")]
    return []


def _table_on_disk_problems(config: JobConfig, value: FormatSpec | None) -> list[ConfigProblem]:
    """The table's identity, and its columns, against the config; nothing when there is no table
    yet or it cannot be read (the job's start and `doctor`'s storage check say why)."""
    t = config.table
    try:
        if not MorTable.exists(t.path, t.storage_options):
            return []
        table = MorTable.load(t.path, t.storage_options)
        problems = identity_problems(config, table.config)
        if problems or config.transform or value is None or follows_writer_schemas(config):
            return problems  # such a table's columns follow its recorded reader schema
        # as the decoder hands them to the table: every value field nullable (bad rows have none)
        columns = pa.schema([f.with_nullable(True) for f in row_columns(config, value) if f.name != t.delete_field])
        return evolution_problems(config, table.schema(), columns)
    except UnsupportedTableVersionError as e:
        return [ConfigProblem(config.config_path, "table.path", e.reason, e.remedy)]
    except (OSError, ValueError):
        return []
