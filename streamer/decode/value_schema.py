"""The Avro reader schema of a stream's values as its table's contract, and how it evolves.

With `confluent-avro` every record names the schema it was written with, and is read with one
reader schema (Avro schema resolution); the reader schema's fields are the table's columns. A
writer schema relates to the reader schema in one of three ways:

- **It fits**: Avro resolves it to the reader schema. A field it lacks takes the reader's
  default, so records of older writer schemas read the fields added since as null; an int where
  the reader has a long is promoted.
- **It evolves the contract**: it has fields the reader schema lacks, or a field of a wider type
  (`table.schema.widens`: int to long or double, float to double), and nothing that does not fit.
  The reader schema takes the new fields, nullable with default null, and the wider types.
- **It does not fit**: it lacks a field the reader schema requires (one without a default), or
  changes a field's type other than by widening. Its records cannot become rows of the table;
  the reason names the field and both types.

The fields of a nested record, array or map do not evolve: a writer schema that changes them
does not fit.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, cast

import fastavro
import pyarrow as pa

from table import AvroSchema, arrow_schema_from_avro, widens

_NAMED = ("record", "enum", "fixed")
_WIDENINGS = "int to long or double, float to double"


@dataclass(frozen=True)
class WriterSchemaChange:
    """What a writer schema changes in the reader schema: fields to add, types to widen, or why
    its records cannot be read into the table (`problem`)."""

    added: tuple[AvroSchema, ...] = ()
    widened: tuple[tuple[str, Any], ...] = ()  # (field name, its wider Avro type)
    problem: str | None = None

    @property
    def evolves(self) -> bool:
        return self.problem is None and bool(self.added or self.widened)


def compare(
    reader: AvroSchema, writer: AvroSchema, reserved: Collection[str] = (), additions_nullable: bool = False
) -> WriterSchemaChange:
    """How records of `writer` relate to the `reader` schema. `reserved` are names a new field
    may not take (the columns the decoder adds). With `additions_nullable`, a new field that the
    writer declares without null (a database's NOT NULL column) does not fit: the rows already in
    the table have no value for it."""
    try:
        writer_types = {f.name: f.type for f in arrow_schema_from_avro(writer)}
    except (TypeError, ValueError, KeyError) as e:
        return WriterSchemaChange(problem=f"cannot be read into a table: {e}")
    reader_types = {f.name: f.type for f in arrow_schema_from_avro(reader)}
    # fastavro types the expansion of any schema (a name, a union, a record); a record's is a record
    expanded = cast(AvroSchema, fastavro.schema.expand_schema(writer))
    writer_fields = {f["name"]: f for f in expanded["fields"]}
    widened = []
    for field in reader["fields"]:
        name = field["name"]
        if name not in writer_fields:
            if "default" not in field:
                return WriterSchemaChange(
                    problem=(
                        f"lacks field '{name}' ({type_name(field['type'])}), which the table's reader schema "
                        "requires (the field has no default)"
                    )
                )
            continue
        old, new = reader_types[name], writer_types[name]
        if new == old or _promotes(new, old):
            continue
        if pa.types.is_nested(old) and pa.types.is_nested(new):
            return WriterSchemaChange(
                problem=(f"changes field '{name}' from {old} to {new}; the fields of a nested type cannot change")
            )
        if not widens(old, new):
            return WriterSchemaChange(
                problem=(
                    f"changes field '{name}' from {type_name(field['type'])} to "
                    f"{type_name(writer_fields[name]['type'])}; a column's type can only widen ({_WIDENINGS})"
                )
            )
        widened.append((name, writer_fields[name]["type"]))
    added = []
    for name, field in writer_fields.items():
        if name in reader_types:
            continue
        if name in reserved:
            return WriterSchemaChange(problem=f"adds field '{name}', the name of a column the decoder adds")
        if additions_nullable and not _is_nullable(field["type"]):
            return WriterSchemaChange(
                problem=(
                    f"adds field '{name}' ({type_name(field['type'])}) as required (NOT NULL); the rows the "
                    "table holds have no value for it, so only a column that may be null can be added"
                )
            )
        added.append({"name": name, "type": _nullable(field["type"]), "default": None})
    change = WriterSchemaChange(tuple(added), tuple(widened))
    if change.added:
        try:
            fastavro.parse_schema(evolve(reader, change))
        except (ValueError, fastavro.schema.SchemaParseException) as e:
            new = ", ".join(f"'{f['name']}'" for f in added)
            return WriterSchemaChange(problem=f"adds field(s) {new} whose types cannot join the reader schema: {e}")
    return change


def evolve(reader: AvroSchema, change: WriterSchemaChange) -> AvroSchema:
    """The reader schema with the change's wider types and, after its fields, the new ones. New
    fields' named types that the reader schema already defines become references to them."""
    widened = dict(change.widened)
    fields = [_widened(f, widened[f["name"]]) if f["name"] in widened else f for f in reader["fields"]]
    defined = _defined_names(reader)
    fields += [dict(f, type=_referencing(f["type"], defined)) for f in change.added]
    return dict(reader, fields=fields)


def evolve_json(reader: str, change: WriterSchemaChange) -> str:
    return json.dumps(evolve(json.loads(reader), change), separators=(",", ":"))


def type_name(avro: Any) -> str:
    """A short name of an Avro type for messages: `long`, `null|string`, `record Address`."""
    if isinstance(avro, str):
        return avro.rsplit(".", 1)[-1] if "." in avro else avro
    if isinstance(avro, list):
        return "|".join(type_name(branch) for branch in avro)
    kind = avro["type"]
    if "logicalType" in avro:
        return avro["logicalType"]
    if kind in _NAMED:
        return f"{kind} {type_name(avro['name'])}"
    if kind == "array":
        return f"array<{type_name(avro['items'])}>"
    if kind == "map":
        return f"map<{type_name(avro['values'])}>"
    return type_name(kind)


def _promotes(writer: pa.DataType, reader: pa.DataType) -> bool:
    """Avro schema resolution's promotions, as Arrow types: int to long, float or double; long to
    float or double; float to double; string and bytes both ways."""
    promotions = {
        pa.int32(): (pa.int64(), pa.float32(), pa.float64()),
        pa.int64(): (pa.float32(), pa.float64()),
        pa.float32(): (pa.float64(),),
        pa.string(): (pa.binary(),),
        pa.binary(): (pa.string(),),
    }
    return reader in promotions.get(writer, ())


def _is_nullable(avro: Any) -> bool:
    return avro == "null" or (isinstance(avro, list) and "null" in avro)


def _nullable(avro: Any) -> list:
    """The type as a union with null first, so that null is a valid default."""
    branches = avro if isinstance(avro, list) else [avro]
    return ["null", *(b for b in branches if b != "null")]


def _widened(field: AvroSchema, wider: Any) -> AvroSchema:
    """The reader's field with the writer's wider type, nullable where the reader's was."""
    wider = next(b for b in wider if b != "null") if isinstance(wider, list) else wider
    if not isinstance(field["type"], list):
        return dict(field, type=wider)
    null_first = field["type"][0] == "null"
    return dict(field, type=["null", wider] if null_first else [wider, "null"])


def _defined_names(schema: Any, namespace: str = "", names: set[str] | None = None) -> set[str]:
    """Full names of the named types a schema defines."""
    names = set() if names is None else names
    if isinstance(schema, list):
        for branch in schema:
            _defined_names(branch, namespace, names)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind in _NAMED:
            name = schema["name"]
            full = name if "." in name else f"{schema.get('namespace', namespace)}.{name}".lstrip(".")
            names.add(full)
            namespace = full.rsplit(".", 1)[0] if "." in full else ""
        for field in schema.get("fields", ()) if kind == "record" else ():
            _defined_names(field["type"], namespace, names)
        for key in ("items", "values"):
            if key in schema:
                _defined_names(schema[key], namespace, names)
        if isinstance(kind, (dict, list)):
            _defined_names(kind, namespace, names)
    return names


def _referencing(avro: Any, defined: set[str]) -> Any:
    """An expanded type (full names, definitions inline) whose named types already defined are
    references; the others are defined here, once."""
    if isinstance(avro, list):
        return [_referencing(branch, defined) for branch in avro]
    if not isinstance(avro, dict):
        return avro
    kind = avro["type"]
    if kind in _NAMED:
        if avro["name"] in defined:
            return avro["name"]
        defined.add(avro["name"])
    out = dict(avro)
    if kind == "record":
        out["fields"] = [dict(f, type=_referencing(f["type"], defined)) for f in avro["fields"]]
    for key in ("items", "values"):
        if key in avro:
            out[key] = _referencing(avro[key], defined)
    if isinstance(kind, (dict, list)):
        out["type"] = _referencing(kind, defined)
    return out
