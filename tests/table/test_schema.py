"""Arrow <-> Avro schema conversion against the schemas Hudi itself wrote in the samples."""

from __future__ import annotations

import json
import struct

import fastavro
import pyarrow as pa
import pytest

from table.schema import (
    COMMIT_SEQNO,
    COMMIT_TIME,
    FILE_NAME,
    META_FIELDS,
    PARTITION_PATH,
    RECORD_KEY,
    arrow_schema_from_avro,
    avro_schema_json,
    to_avro_schema,
)
from tests.support.hudi_samples import SAMPLES

pytestmark = pytest.mark.unit

SAMPLE = SAMPLES / "v6_trips_8i1u"
SAMPLE_LOG = SAMPLE / "city=san_francisco" / ".d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85"

TRIPS = pa.schema(
    [
        ("ts", pa.int64()),
        ("uuid", pa.string()),
        ("rider", pa.string()),
        ("driver", pa.string()),
        ("fare", pa.float64()),
        ("city", pa.string()),
    ]
)


def _header_schema_of_sample_log() -> str:
    """The SCHEMA (key 2) header entry of the sample's log block, read straight from the bytes:
    magic, block size, format version and block type come first, then the header entries."""
    data = SAMPLE_LOG.read_bytes()
    (count,) = struct.unpack_from(">i", data, 22)
    pos = 26
    for _ in range(count):
        key, length = struct.unpack_from(">ii", data, pos)
        if key == 2:
            return data[pos + 8 : pos + 8 + length].decode()
        pos += 8 + length
    raise AssertionError("no SCHEMA header")


def test_table_schema_is_the_one_hudi_puts_in_commit_metadata():
    commit = json.loads((SAMPLE / ".hoodie" / "20250331030645735.deltacommit").read_text())
    assert avro_schema_json(TRIPS, "v6_trips_8i1u") == commit["extraMetadata"]["schema"]


def test_log_schema_is_the_one_hudi_puts_in_the_block_header():
    ours = avro_schema_json(TRIPS, "v6_trips_8i1u", with_meta_fields=True)
    assert ours == _header_schema_of_sample_log()  # byte for byte, key order included


def test_meta_fields_come_first_and_are_nullable_strings():
    avro = to_avro_schema(TRIPS, "t", with_meta_fields=True)
    assert META_FIELDS == (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)
    assert tuple(f["name"] for f in avro["fields"][:5]) == META_FIELDS
    assert all(f["type"] == ["null", "string"] and f["doc"] == "" for f in avro["fields"][:5])
    assert avro["name"] == "t_record" and avro["namespace"] == "hoodie.t"


def test_meta_columns_in_the_arrow_schema_are_not_duplicated():
    with_meta = pa.schema([pa.field(name, pa.string()) for name in META_FIELDS] + list(TRIPS))
    assert to_avro_schema(with_meta, "t", with_meta_fields=True) == to_avro_schema(TRIPS, "t", with_meta_fields=True)
    assert to_avro_schema(with_meta, "t") == to_avro_schema(TRIPS, "t")


def test_every_field_is_a_null_union_with_null_default():
    avro = to_avro_schema(pa.schema([pa.field("id", pa.int64(), nullable=False)]), "t")
    assert avro["fields"] == [{"name": "id", "type": ["null", "long"], "default": None}]


@pytest.mark.parametrize(
    "arrow_type, avro_type",
    [
        (pa.bool_(), "boolean"),
        (pa.int8(), "int"),
        (pa.int32(), "int"),
        (pa.int64(), "long"),
        (pa.uint32(), "long"),
        (pa.float32(), "float"),
        (pa.float64(), "double"),
        (pa.string(), "string"),
        (pa.large_string(), "string"),
        (pa.binary(), "bytes"),
        (pa.date32(), {"type": "int", "logicalType": "date"}),
        (pa.time32("ms"), {"type": "int", "logicalType": "time-millis"}),
        (pa.time64("us"), {"type": "long", "logicalType": "time-micros"}),
        (pa.timestamp("ms", tz="UTC"), {"type": "long", "logicalType": "timestamp-millis"}),
        (pa.timestamp("us", tz="UTC"), {"type": "long", "logicalType": "timestamp-micros"}),
        (pa.timestamp("us"), {"type": "long", "logicalType": "timestamp-micros"}),
        (pa.timestamp("ns", tz="Europe/Paris"), {"type": "long", "logicalType": "timestamp-micros"}),
    ],
)
def test_primitive_and_logical_types(arrow_type, avro_type):
    avro = to_avro_schema(pa.schema([("c", arrow_type)]), "t")
    assert avro["fields"][0]["type"] == ["null", avro_type]


def test_decimal_is_fixed_sized_for_its_precision_and_named_like_spark():
    avro = to_avro_schema(pa.schema([("amount", pa.decimal128(10, 2)), ("big", pa.decimal128(38, 6))]), "t")
    assert avro["fields"][0]["type"][1] == {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.t.t_record.amount",
        "size": 5,
        "logicalType": "decimal",
        "precision": 10,
        "scale": 2,
    }
    assert avro["fields"][1]["type"][1]["size"] == 16


NESTED = pa.schema(
    [
        ("addr", pa.struct([("street", pa.string()), ("geo", pa.struct([("lat", pa.float64())]))])),
        ("tags", pa.list_(pa.string())),
        ("items", pa.list_(pa.struct([("sku", pa.string()), ("price", pa.decimal128(9, 2))]))),
        ("attrs", pa.map_(pa.string(), pa.int64())),
        ("price", pa.decimal128(9, 2)),
    ]
)


def test_nested_types_get_unique_spark_style_names():
    avro = to_avro_schema(NESTED, "t")
    addr = avro["fields"][0]["type"][1]
    assert (addr["name"], addr["namespace"]) == ("addr", "hoodie.t.t_record")
    geo = addr["fields"][1]["type"][1]
    assert (geo["name"], geo["namespace"]) == ("geo", "hoodie.t.t_record.addr")
    assert avro["fields"][1]["type"][1] == {"type": "array", "items": ["null", "string"]}
    item = avro["fields"][2]["type"][1]["items"][1]
    assert (item["name"], item["namespace"]) == ("items", "hoodie.t.t_record")
    assert avro["fields"][3]["type"][1] == {"type": "map", "values": ["null", "long"]}
    fastavro.parse_schema(avro)  # rejects a schema that redefines a name


def test_avro_to_arrow_round_trip():
    schema = pa.schema(
        [
            ("b", pa.bool_()),
            ("i", pa.int32()),
            ("l", pa.int64()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("s", pa.string()),
            ("bin", pa.binary()),
            ("fx", pa.binary(4)),
            ("day", pa.date32()),
            ("t_ms", pa.time32("ms")),
            ("t_us", pa.time64("us")),
            ("ts_ms", pa.timestamp("ms", tz="UTC")),
            ("ts_us", pa.timestamp("us", tz="UTC")),
            *NESTED,
        ]
    )
    back = arrow_schema_from_avro(avro_schema_json(schema, "t"))
    assert back.names == schema.names
    for field in schema:
        got = back.field(field.name).type
        if pa.types.is_list(field.type):
            assert got.value_type == field.type.value_type
        elif pa.types.is_map(field.type):
            assert (got.key_type, got.item_type) == (field.type.key_type, field.type.item_type)
        else:
            assert got == field.type, field.name


def test_arrow_schema_of_the_sample_log_header():
    schema = arrow_schema_from_avro(_header_schema_of_sample_log())
    assert schema.names == [*META_FIELDS, *TRIPS.names]
    assert schema.field("fare").type == pa.float64() and schema.field("fare").nullable


def test_avro_to_arrow_reads_java_forms():
    """Unions with null last, named-type references and local timestamps, as other writers emit."""
    avro = {
        "type": "record",
        "name": "r",
        "namespace": "ns",
        "fields": [
            {"name": "a", "type": ["long", "null"]},
            {"name": "p", "type": {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}},
            {"name": "q", "type": ["null", "Point"]},
            {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}},
        ],
    }
    schema = arrow_schema_from_avro(avro)
    assert schema.field("a").type == pa.int64() and schema.field("a").nullable
    assert schema.field("q").type == schema.field("p").type == pa.struct([pa.field("x", pa.int32(), False)])
    assert schema.field("lt").type == pa.timestamp("us")
    assert schema.field("e").type == pa.string()
    assert schema.field("dec").type == pa.decimal128(30, 15)


@pytest.mark.parametrize(
    "schema",
    [
        pa.schema([("u", pa.uint64())]),
        pa.schema([("m", pa.map_(pa.int32(), pa.string()))]),
        pa.schema([("n", pa.null())]),
    ],
)
def test_types_avro_cannot_hold_are_refused(schema):
    with pytest.raises(TypeError):
        to_avro_schema(schema, "t")


def test_unions_of_several_types_are_refused():
    avro = {"type": "record", "name": "r", "fields": [{"name": "u", "type": ["null", "int", "string"]}]}
    with pytest.raises(ValueError, match=r"only \[null, T\] unions"):
        arrow_schema_from_avro(avro)
