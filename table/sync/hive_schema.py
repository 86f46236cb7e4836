"""A table's columns as a Hive Metastore holds them, and as Spark reads them from the table's
properties.

Hive column types are what Hudi's `HiveSchemaUtil` makes of the table's Parquet schema with its
defaults: timestamps are `bigint` (Hudi's `support_timestamp` is off by default), every other
type its Hive name. Spark's schema is the JSON of a `StructType` (`spark.sql.sources.schema.*`),
which Hudi's Spark reads the table by: the partition columns go last there, as Spark keeps them,
and the meta columns first.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from table.errors import UnsupportedTypeError

#: Hudi splits the Spark schema into properties of at most this many characters
#: (`hoodie.datasource.hive_sync.schema_string_length_thresh`).
SCHEMA_PART_LENGTH = 4000


def hive_type(t: pa.DataType) -> str:
    """The Hive type name of an Arrow type."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"  # Avro has no smaller int: Hudi stores them as INT32
    if pa.types.is_int64(t) or pa.types.is_timestamp(t):
        return "bigint"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{hive_type(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{hive_type(t.key_type)},{hive_type(t.item_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{hive_type(f.type)}" for f in t) + ">"
    raise UnsupportedTypeError(f"no Hive type for {t}")


def _spark_type(t: pa.DataType) -> str | dict[str, Any]:
    """The JSON of Spark's DataType for an Arrow type, as Hudi derives it from Parquet."""
    simple = {
        "string": "string",
        "boolean": "boolean",
        "int": "integer",
        "float": "float",
        "double": "double",
        "date": "date",
        "binary": "binary",
    }
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "elementType": _spark_type(t.value_type), "containsNull": t.value_field.nullable}
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": _spark_type(t.key_type),
            "valueType": _spark_type(t.item_type),
            "valueContainsNull": t.item_field.nullable,
        }
    if pa.types.is_struct(t):
        return _spark_struct(list(t))
    name = hive_type(t)
    return simple.get(name, name)


def _spark_struct(fields: list[pa.Field]) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [
            {"name": f.name, "type": _spark_type(f.type), "nullable": f.nullable, "metadata": {}} for f in fields
        ],
    }


def spark_schema_json(schema: pa.Schema, partition_fields: tuple[str, ...]) -> str:
    """Spark's StructType JSON: data columns in table order, then the partition columns (a
    partition field the schema lacks is a string, as in Hudi)."""
    data = [f for f in schema if f.name not in partition_fields]
    partitions = [
        schema.field(p) if p in schema.names else pa.field(p, pa.string(), nullable=False) for p in partition_fields
    ]
    return json.dumps(_spark_struct(data + partitions), separators=(",", ":"))


def spark_table_properties(schema: pa.Schema, partition_fields: tuple[str, ...]) -> dict[str, str]:
    """What Hudi's `SparkDataSourceTableUtils` records so Spark reads the table as a Hudi data
    source table: the provider, the schema in parts, the partition columns."""
    text = spark_schema_json(schema, partition_fields)
    parts = [text[i : i + SCHEMA_PART_LENGTH] for i in range(0, len(text), SCHEMA_PART_LENGTH)]
    props = {"spark.sql.sources.provider": "hudi", "spark.sql.sources.schema.numParts": str(len(parts))}
    props.update({f"spark.sql.sources.schema.part.{i}": part for i, part in enumerate(parts)})
    if partition_fields:
        props["spark.sql.sources.schema.numPartCols"] = str(len(partition_fields))
        props.update({f"spark.sql.sources.schema.partCol.{i}": p for i, p in enumerate(partition_fields)})
    return props
