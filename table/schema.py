"""Arrow <-> Avro schema conversion, the way Hudi names and shapes a table's Avro schema.

Hudi keeps a table's schema as Avro: in commit metadata (`extraMetadata.schema`), in every log
block's SCHEMA header and in `parquet.avro.schema`. Readers resolve log blocks against it, so
the shape must be Hudi's: a record `<table>_record` in namespace `hoodie.<table>`, every field a
union `["null", T]` with `"default": null`, and, in log blocks, the five `_hoodie_*` meta fields
first. Nested names follow Spark's Avro converter (what Hudi's Spark writer emits): a struct
field `f` becomes record `f` in namespace `<parent namespace>.<parent name>`, a decimal becomes
`fixed` named `fixed` in namespace `<...>.<field>`, so every named type is unique.

Avro timestamps are instants: both tz-aware and naive Arrow timestamps map to
`timestamp-millis`/`timestamp-micros` and come back as UTC timestamps.

A table's schema evolves the way Hudi's schema evolution on write allows, by `evolve`: new
columns (nullable, after the others) and lossless widenings of a column's type (int to long or
double, float to double). Files keep the schema they were written with; readers conform each one
to the table's. A column is never dropped, narrowed or changed to another kind of type.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from table.errors import FormatError, SchemaEvolutionError, UnsupportedTypeError

COMMIT_TIME = "_hoodie_commit_time"
COMMIT_SEQNO = "_hoodie_commit_seqno"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
FILE_NAME = "_hoodie_file_name"
META_FIELDS: tuple[str, ...] = (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)
"""Hudi's meta columns, in the order every base file and log block schema starts with."""

AvroSchema = dict[str, Any]
"""A parsed Avro schema (the JSON object), as `json.loads` returns it."""

_PRIMITIVES = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def to_avro_schema(schema: pa.Schema, table_name: str, *, with_meta_fields: bool = False) -> AvroSchema:
    """The table's Avro schema: without meta fields as Hudi stores it in commit metadata; with
    them (first) as in a log block's SCHEMA header. Meta columns in `schema` are not repeated."""
    name = f"{table_name}_record"
    namespace = f"hoodie.{table_name}"
    child_namespace = f"{namespace}.{name}"
    fields: list[AvroSchema] = []
    if with_meta_fields:
        fields += [{"name": meta, "type": ["null", "string"], "doc": "", "default": None} for meta in META_FIELDS]
    for f in schema:
        if f.name not in META_FIELDS:
            fields.append(_avro_field(f, child_namespace))
    return {"type": "record", "name": name, "namespace": namespace, "fields": fields}


def avro_schema_json(schema: pa.Schema, table_name: str, *, with_meta_fields: bool = False) -> str:
    """`to_avro_schema` as compact JSON, byte for byte what Java's `Schema.toString()` gives."""
    avro = to_avro_schema(schema, table_name, with_meta_fields=with_meta_fields)
    return json.dumps(avro, separators=(",", ":"), ensure_ascii=False)


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """True when every value of `old` is a value of `new`, exactly: the type changes a column may
    take (signed integers to wider ones or to double, float to double). Avro also promotes long
    to double and int or long to float, which lose digits, so a column does not."""
    if pa.types.is_signed_integer(old):
        if pa.types.is_signed_integer(new):
            return new.bit_width > old.bit_width
        return new == pa.float64() and old.bit_width <= 32
    return pa.types.is_floating(old) and pa.types.is_floating(new) and new.bit_width > old.bit_width


def evolve(table: pa.Schema, incoming: pa.Schema) -> pa.Schema:
    """The table's schema once data of the `incoming` schema is written to it: its columns, the
    ones `incoming` widens with the wider type, then the columns new in `incoming`, nullable.
    An incoming column of the null type (all values null) takes the table's type."""
    missing = [f.name for f in table if f.name not in incoming.names]
    if missing:
        raise SchemaEvolutionError(f"the table's column(s) {missing} are missing")
    fields = []
    for f in table:
        t = incoming.field(f.name).type
        if t == f.type or pa.types.is_null(t):
            fields.append(f)
        elif widens(f.type, t):
            fields.append(f.with_type(t))
        else:
            raise SchemaEvolutionError(
                f"column '{f.name}' is {t} but {f.type} in the table; a column's type "
                "can only widen (int to long or double, float to double)"
            )
    for f in incoming:
        if f.name not in table.names:
            if pa.types.is_null(f.type):
                raise SchemaEvolutionError(f"new column '{f.name}' has no type: all its values are null")
            fields.append(f.with_nullable(True))
    return pa.schema(fields)


def arrow_schema_from_avro(schema: AvroSchema | str) -> pa.Schema:
    """The Arrow schema of a record Avro schema (JSON text or parsed)."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise FormatError("a table's Avro schema must be a record")
    names: dict[str, Any] = {}
    struct = _arrow_type(schema, "", names)
    return pa.schema(list(struct))


def _avro_field(f: pa.Field, namespace: str) -> AvroSchema:
    """Every record field is nullable with a null default, as Hudi writes table schemas."""
    return {"name": f.name, "type": ["null", _avro_type(f.type, f.name, namespace)], "default": None}


def _maybe_null(avro: Any, nullable: bool) -> Any:
    return ["null", avro] if nullable else avro


def _avro_type(t: pa.DataType, name: str, namespace: str) -> Any:
    """Avro type of an Arrow type; `name`/`namespace` name nested records and fixed types."""
    if pa.types.is_dictionary(t):
        return _avro_type(t.value_type, name, namespace)
    if pa.types.is_boolean(t):
        return "boolean"
    if t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16()):
        return "int"
    if t in (pa.int64(), pa.uint32()):
        return "long"
    if pa.types.is_floating(t):
        return "double" if t == pa.float64() else "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "bytes"
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed", "name": "fixed", "namespace": f"{namespace}.{name}", "size": t.byte_width}
    if pa.types.is_date(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t):
        logical = "timestamp-millis" if t.unit in ("s", "ms") else "timestamp-micros"
        return {"type": "long", "logicalType": logical}
    if pa.types.is_time32(t):
        return {"type": "int", "logicalType": "time-millis"}
    if pa.types.is_time64(t):
        return {"type": "long", "logicalType": "time-micros"}
    if pa.types.is_decimal(t):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": _decimal_fixed_size(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if pa.types.is_struct(t):
        child_namespace = f"{namespace}.{name}" if namespace else name
        return {
            "type": "record",
            "name": name,
            "namespace": namespace,
            "fields": [_avro_field(t.field(i), child_namespace) for i in range(t.num_fields)],
        }
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = t.value_field
        return {"type": "array", "items": _maybe_null(_avro_type(item.type, name, namespace), item.nullable)}
    if pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise UnsupportedTypeError(f"Avro map keys are strings; {name!r} has {t.key_type} keys")
        item = t.item_field
        return {"type": "map", "values": _maybe_null(_avro_type(item.type, name, namespace), item.nullable)}
    raise UnsupportedTypeError(f"no Avro type for Arrow type {t} (field {name!r})")


def _decimal_fixed_size(precision: int) -> int:
    """Fewest bytes whose two's complement holds every unscaled value of `precision` digits."""
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def _full_name(schema: AvroSchema, namespace: str) -> tuple[str, str]:
    """(full name, namespace for children) of a named Avro type."""
    name = schema["name"]
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    ns = schema.get("namespace", namespace)
    return (f"{ns}.{name}" if ns else name), ns


def _arrow_type(schema: Any, namespace: str, names: dict[str, Any]) -> pa.DataType:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        for key in (full, schema):
            if key in names:
                return _arrow_type(names[key], namespace, names)
        raise FormatError(f"unknown Avro type {schema!r}")
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise FormatError(f"only [null, T] unions map to Arrow, not {schema}")
        return _arrow_type(branches[0], namespace, names)

    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        if kind == "fixed":
            names[_full_name(schema, namespace)[0]] = schema
        precision, scale = schema["precision"], schema.get("scale", 0)
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical == "time-millis" and kind == "int":
        return pa.time32("ms")
    if logical == "time-micros" and kind == "long":
        return pa.time64("us")
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("ms" if logical == "timestamp-millis" else "us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return pa.timestamp("ms" if logical == "local-timestamp-millis" else "us")
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind == "record":
        full, child_ns = _full_name(schema, namespace)
        names[full] = schema
        return pa.struct([_arrow_field(f, child_ns, names) for f in schema["fields"]])
    if kind == "enum":
        names[_full_name(schema, namespace)[0]] = schema
        return pa.string()
    if kind == "fixed":
        names[_full_name(schema, namespace)[0]] = schema
        return pa.binary(schema["size"])
    if kind == "array":
        items = schema["items"]
        return pa.list_(pa.field("element", _arrow_type(items, namespace, names), _is_nullable(items)))
    if kind == "map":
        values = schema["values"]
        value_field = pa.field("value", _arrow_type(values, namespace, names), _is_nullable(values))
        return pa.map_(pa.string(), value_field)
    raise FormatError(f"unsupported Avro type {schema!r}")


def _arrow_field(field: AvroSchema, namespace: str, names: dict[str, Any]) -> pa.Field:
    avro = field["type"]
    return pa.field(field["name"], _arrow_type(avro, namespace, names), _is_nullable(avro))


def _is_nullable(avro: Any) -> bool:
    return avro == "null" or (isinstance(avro, list) and "null" in avro)
