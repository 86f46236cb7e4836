"""The config of a database mirror: one YAML file for every table of a Debezium connector.

A mirror file has a `mirror` section and the sections of a table config, which every mirrored
table shares. Its topics are Debezium's `<prefix>.<schema>.<table>` (for MySQL, `<schema>` is the
database); each one matched and included becomes a table whose config is the file's sections
with:

- `{prefix}`, `{schema}`, `{table}` and `{topic}` filled in every string of `table` and `sync`
  (so `table.name`, `table.path`, `sync.database` and `sync.table_name` are templates);
- `table.record_key`: the fields of Debezium's Kafka key (the source table's primary key);
- `table.ordering_field` and `decode.envelope_columns.position`: the change's log position;
- `table.partition_by`: `mirror.partition_by` when the table has all those columns, else none;
- `decode.value.schema`: the row's columns as the change events' Connect schema gives them;
- then the table's entry of `mirror.tables`, merged over all that.

`streamer.config.loading.mirrored_table` validates those sections as any table config, so a
problem names the file, the table and the key.
"""

from __future__ import annotations

import copy
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from streamer.config.model import JobConfig, Names, Text, _raise_problems, _Section
from streamer.errors import ConfigValueError

#: A table's place in a topic name: `{schema}` and `{table}`, with the prefix before them.
TEMPLATE_FIELDS = ("prefix", "schema", "table", "topic")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(TEMPLATE_FIELDS) + r")\}")
DEFAULT_TABLE_NAME = "{schema}_{table}"
DEFAULT_TABLE_PATH = "{schema}/{table}"
#: The section that makes a file a mirror's.
MIRROR = "mirror"
#: The sections a mirror's tables share; `mirror` is the mirror's own.
TABLE_SECTIONS = ("table", "source", "decode", "index", "stream", "services", "metrics", "sync")
#: Where a mirror's change events put the row's log position and operation.
POSITION_COLUMN = "source_position"
OP_COLUMN = "source_op"


class MirrorSettings(_Section):
    """Which topics are mirrored, and what each table's config takes from its topic."""

    topic_prefix: Text | None = Field(
        None,
        description=(
            "Debezium's `topic.prefix`: the mirror reads the topics `<prefix>.<schema>.<table>`. One of "
            "`topic_prefix` and `topic_pattern` is required."
        ),
    )
    topic_pattern: Text | None = Field(
        None,
        description=(
            "Instead of `topic_prefix`: a regular expression matched against whole topic names, with the "
            "named groups `schema` and `table` (and optionally `prefix`)."
        ),
    )
    include: Names = Field(
        ("*",),
        description=(
            "Tables mirrored, as shell patterns over `<schema>.<table>` (`public.*`, `sales.order_*`); "
            "every table by default."
        ),
    )
    exclude: Names = Field(
        (), description="Tables left out, as shell patterns over `<schema>.<table>`; wins over `include`."
    )
    partition_by: Names = Field(
        (),
        description=(
            "The partition columns of every table that has all of them; a table without them is "
            "unpartitioned. Best primary-key columns: a delete then names its partition (see "
            "`REPLICA IDENTITY` in docs/operations.md)."
        ),
    )
    database_url: SecretStr | None = Field(
        None,
        description=(
            "The source database, for `streamer verify`: `postgresql://user:password@host:port/dbname` "
            "(a password is best given as `${ENV}`; it never appears in messages). Not used by `run`."
        ),
    )
    replication_slot: Text | None = Field(
        None,
        description=(
            "The connector's replication slot (PostgreSQL), whose confirmed position tells `verify` when "
            "every change it read is in Kafka; by default the database's one logical slot."
        ),
    )
    tables: dict[str, dict[str, Any]] = Field(
        {},
        description=(
            "Per-table overrides by `<schema>.<table>`: sections of a table config (`table`, `index`, "
            "`services`, ...) merged over what the mirror makes, e.g. "
            "`{public.orders: {table: {partition_by: [region]}}}`."
        ),
    )

    @field_validator("topic_pattern")
    @classmethod
    def _named_groups(cls, pattern: str | None) -> str | None:
        if pattern is None:
            return None
        try:
            groups = re.compile(pattern).groupindex
        except re.error as e:
            raise ConfigValueError(f"should be a valid regular expression ({e})") from None
        if "schema" not in groups or "table" not in groups:
            raise ConfigValueError("should have the named groups (?P<schema>...) and (?P<table>...)")
        return pattern

    @field_validator("tables")
    @classmethod
    def _sections_of_a_table(cls, tables: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        _raise_problems(
            [
                ((name, section), f"unknown section; allowed: {', '.join(TABLE_SECTIONS)}")
                for name, sections in tables.items()
                for section in (sections or {})
                if section not in TABLE_SECTIONS
            ]
        )
        return tables

    @field_validator("database_url")
    @classmethod
    def _postgresql_url(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None and not url.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ConfigValueError("should be a postgresql://user:password@host:port/dbname URL")
        return url

    @model_validator(mode="after")
    def _one_subscription(self) -> MirrorSettings:
        if (self.topic_prefix is None) == (self.topic_pattern is None):
            _raise_problems([(("topic_prefix",), "exactly one of topic_prefix and topic_pattern is required")])
        return self

    @property
    def pattern(self) -> str:
        """The topics of the mirror, with the groups `schema` and `table`."""
        if self.topic_pattern is not None:
            return self.topic_pattern
        assert self.topic_prefix is not None
        return rf"(?P<prefix>{re.escape(self.topic_prefix)})\.(?P<schema>[^.]+)\.(?P<table>[^.]+)"


@dataclass(frozen=True)
class MirroredTopic:
    """A topic of the mirror and its parts."""

    topic: str
    prefix: str
    schema: str
    table: str

    @property
    def name(self) -> str:
        """`<schema>.<table>`, as `include`, `exclude` and `tables` name it."""
        return f"{self.schema}.{self.table}"

    def fill(self, template: str) -> str:
        """`template` with `{prefix}`, `{schema}`, `{table}` and `{topic}` filled in; other braces stay."""
        parts = {"prefix": self.prefix, "schema": self.schema, "table": self.table, "topic": self.topic}
        return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], template)


#: The made-up table that a mirror file's shared sections are checked on.
SAMPLE_TOPIC = MirroredTopic("<topic>", "<prefix>", "<schema>", "<table>")


@dataclass(frozen=True)
class TableShape:
    """What a table's change events say of it: its columns (Spark DDL) and its key's fields."""

    columns_ddl: str
    column_names: tuple[str, ...]
    key_fields: tuple[str, ...]


#: The columns a mirrored table's config is made with when only its name and path matter.
PATH_SHAPE = TableShape("id INT", ("id",), ("id",))


class MirrorConfig:
    """A mirror file: its `mirror` section and the sections its tables share."""

    def __init__(self, settings: MirrorSettings, sections: Mapping[str, Any], config_path: Path):
        self.settings = settings
        self.sections = sections
        self.config_path = config_path
        self._pattern = re.compile(settings.pattern)
        #: A table config of the mirror for a made-up table (`SAMPLE_TOPIC`): the shared sections,
        #: checked as a table's when the file is loaded.
        self.sample: JobConfig | None = None

    @property
    def name(self) -> str:
        """The mirror's name: its file's, without the suffix."""
        return self.config_path.stem

    def topic(self, topic: str) -> MirroredTopic | None:
        """The topic's parts, when it is one of the mirror's."""
        match = self._pattern.fullmatch(topic)
        if match is None:
            return None
        groups = match.groupdict()
        return MirroredTopic(
            topic, groups.get("prefix") or self.settings.topic_prefix or "", groups["schema"], groups["table"]
        )

    def included(self, topic: MirroredTopic) -> bool:
        s = self.settings
        name = topic.name
        return any(fnmatch.fnmatchcase(name, p) for p in s.include) and not any(
            fnmatch.fnmatchcase(name, p) for p in s.exclude
        )

    def table_sections(self, topic: MirroredTopic, shape: TableShape) -> dict[str, Any]:
        """The table's config, as parsed YAML (see the module doc)."""
        data: dict[str, Any] = {k: copy.deepcopy(v) for k, v in self.sections.items() if k in TABLE_SECTIONS}
        table = data.setdefault("table", {})
        table.setdefault("name", DEFAULT_TABLE_NAME)
        table.setdefault("path", DEFAULT_TABLE_PATH)
        decode = data.setdefault("decode", {})
        decode.setdefault("key", {"format": "json"})
        value = decode.setdefault("value", {"format": "json", "envelope": "debezium"})
        columns = decode.setdefault("envelope_columns", {"position": POSITION_COLUMN, "op": OP_COLUMN})
        value["schema"] = shape.columns_ddl
        table["record_key"] = list(shape.key_fields)
        table.setdefault("ordering_field", columns.get("position", POSITION_COLUMN))
        rule = self.settings.partition_by
        table.setdefault("partition_by", list(rule) if rule and set(rule) <= set(shape.column_names) else [])
        source = data.setdefault("source", {})
        source.pop("topic_pattern", None)
        source["topics"] = [topic.topic]
        for section, values in (self.settings.tables.get(topic.name) or {}).items():
            data[section] = _merged(data.get(section), values)
        for section in ("table", "sync"):
            if isinstance(data.get(section), dict):
                data[section] = _filled(data[section], topic)
        return data


def _filled(value: Any, topic: MirroredTopic) -> Any:
    if isinstance(value, str):
        return topic.fill(value)
    if isinstance(value, dict):
        return {k: _filled(v, topic) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, topic) for v in value]
    return value


def _merged(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        return {**base, **{k: _merged(base.get(k), v) for k, v in override.items()}}
    return copy.deepcopy(override)
