"""The rules between a table's settings and its columns, and between its settings and the table
on disk: each broken rule a `ConfigProblem` naming the key and the fix.

`streamer.preflight` applies them to the columns known from the config alone, before Spark
starts; the job applies them again to the columns Spark gives (`streamer.job`), for what could
not be known before.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass

import pyarrow as pa

from streamer.config.model import JobConfig
from streamer.preflight.problem import ConfigProblem
from table import SchemaEvolutionError, TableConfig, evolve, is_key_type, is_orderable_type

NAMES_SHOWN = 12


@dataclass(frozen=True)
class TableColumns:
    """The columns a table job upserts, as far as they are known: `fields` by name, each with its
    type or None (Spark's to say), and whether they are all of them (`complete`)."""

    fields: dict[str, pa.DataType | None]
    complete: bool
    what: str  # "the value's fields" or "the transform's columns"
    fix: str  # how to add a column there

    @classmethod
    def of(cls, fields: dict[str, pa.DataType | None], config: JobConfig, complete: bool = True) -> TableColumns:
        """The transform's columns when the config has one, else the value's fields."""
        if config.transform:
            return cls(fields, complete, "the transform's columns", TRANSFORM_FIX)
        return cls(fields, complete, "the value's fields", value_fix(config))

    @classmethod
    def of_schema(cls, schema: pa.Schema, config: JobConfig) -> TableColumns:
        return cls.of({f.name: f.type for f in schema}, config)

    def names(self) -> str:
        names = list(self.fields)
        shown = ", ".join(names[:NAMES_SHOWN]) + (f", ... ({len(names)} in all)" if len(names) > NAMES_SHOWN else "")
        return f"{self.what} ({shown})" if names else self.what

    def lookup(self, name: str) -> tuple[bool, pa.DataType | None]:
        """Whether `name` (a column, or `column.field` of a struct) is there, and its type if known."""
        if name in self.fields:
            return True, self.fields[name]
        head, *rest = name.split(".")
        if not rest or head not in self.fields:
            return False, None
        kind = self.fields[head]
        for part in rest:
            if kind is None:
                return True, None
            if not pa.types.is_struct(kind) or kind.get_field_index(part) < 0:
                return False, None
            kind = kind.field(part).type
        return True, kind


TRANSFORM_FIX = "name one of them, or select the column in the transform"
KEY_TYPES = "a string, number, boolean, date or timestamp column"
ORDER_TYPES = "a number, string, date or timestamp column"


def value_fix(config: JobConfig) -> str:
    where = "decode.value.schema" if config.decode.value.schema else "the value's schema"
    return f"name one of them, or add the field to {where}"


def column_problems(config: JobConfig, columns: TableColumns) -> list[ConfigProblem]:
    """The table's key, partition, ordering, delete and sort columns against `columns`."""
    t = config.table
    problems: list[ConfigProblem] = []
    stored = columns  # the delete marker is a column of the batch, not of the table

    def problem(key: str, text: str, fix: str) -> None:
        problems.append(ConfigProblem(config.config_path, key, text, fix))

    def present(key: str, name: str) -> tuple[bool, pa.DataType | None]:
        found, kind = stored.lookup(name)
        if not found and columns.complete:
            close = difflib.get_close_matches(name, list(stored.fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problem(key, f"no column {name!r} in {stored.names()}{hint}", stored.fix)
        return found, kind

    if t.delete_field:
        present("table.delete_field", t.delete_field)
        stored = dataclasses.replace(columns, fields={n: k for n, k in columns.fields.items() if n != t.delete_field})

    for key, names, role in (
        ("table.record_key", t.record_key, "a record key"),
        ("table.partition_by", t.partition_by, "a partition value"),
    ):
        for name in names:
            found, kind = present(key, name)
            if found and kind is not None and not is_key_type(kind):
                problem(key, f"column {name!r} is of type {kind}, which cannot be {role}", f"name {KEY_TYPES}")
    found, kind = present("table.ordering_field", t.ordering_field)
    if found and kind is not None and not is_orderable_type(kind):
        problem(
            "table.ordering_field",
            f"column {t.ordering_field!r} is of type {kind}, which cannot order the versions of a record",
            f"name {ORDER_TYPES}",
        )
    for i, name in enumerate(config.services.clustering.sort_columns):
        key = f"services.clustering.sort_columns.{i}"
        found, kind = present(key, name)
        if found and kind is not None and pa.types.is_nested(kind):
            problem(
                key, f"column {name!r} is of type {kind}, which cannot be sorted by", "name columns of simple types"
            )
    return problems


def identity_problems(config: JobConfig, stored: TableConfig) -> list[ConfigProblem]:
    """What identifies an existing table (its name, record key, partition and ordering fields)
    against the config: none of it can change once the table exists."""
    t = config.table
    problems = []
    for key, configured, kept in (
        ("name", t.name, stored.name),
        ("record_key", list(t.record_key), list(stored.record_key_fields)),
        ("partition_by", list(t.partition_by), list(stored.partition_fields)),
        ("ordering_field", t.ordering_field, stored.precombine_field),
    ):
        if configured != kept:
            problems.append(
                ConfigProblem(
                    config.config_path,
                    f"table.{key}",
                    f"the table at {t.path} has {kept!r}, the config says "
                    f"{configured!r}; it cannot change once a table exists",
                    f"set table.{key}: {_yaml(kept)}; or, to change it, write a new table (another table.path) "
                    "from the topics' start",
                )
            )
    return problems


def evolution_problems(config: JobConfig, table_schema: pa.Schema, columns: pa.Schema) -> list[ConfigProblem]:
    """Whether the table at `table_schema` takes `columns` (Hudi's schema evolution on write)."""
    try:
        evolve(table_schema, columns)
    except SchemaEvolutionError as e:
        where = "transform" if config.transform else "decode.value"
        return [
            ConfigProblem(
                config.config_path,
                where,
                f"the table at {config.table.path} cannot take these columns: {e}",
                "keep the table's columns, with the same or wider types (int to long "
                "or double, float to double); or write a new table (another table.path)",
            )
        ]
    return []


def _yaml(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(value) + "]"
    return str(value)
