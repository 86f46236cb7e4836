"""Record decoding (streamer/decode/record_decoder.py and the formats' modules beside it) and the schema
registry client, against batches shaped exactly like Spark's Kafka source and a real schema registry
server (Apicurio Registry, harness/schema_registry.py, or SCHEMA_REGISTRY_URL)."""

from __future__ import annotations

import io
import json
import pickle
import socket
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from harness.schema_registry import ApicurioRegistry
from streamer.decode.avro import parse_avro, read_avro, read_columns
from streamer.decode.decoded import decode_each
from streamer.decode.formats import FormatSpec
from streamer.decode.record_decoder import RecordDecoder
from streamer.decode.registry import SchemaRegistryClient, confluent_frame
from streamer.errors import SchemaRegistryError
from streamer.kafka.schema import ARROW_SCHEMA_WITHOUT_HEADERS
from table import arrow_schema_from_avro

pytestmark = pytest.mark.unit

ORDERS = pa.schema(
    [
        pa.field("order_id", pa.string()),
        pa.field("customer", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("updated_at", pa.int64()),
        pa.field("deleted", pa.bool_()),
        pa.field("created", pa.timestamp("us", tz="UTC")),
        pa.field("address", pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int32())])),
        pa.field("tags", pa.list_(pa.string())),
    ]
)
ORDER_FIELDS = ORDERS.names
STRING_KEY = FormatSpec("string", None)
NO_KEY = FormatSpec("none", None)
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def kafka_batch(
    values: list[bytes | None], keys: list[bytes | None] | None = None, topic: str = "orders"
) -> pa.RecordBatch:
    """Rows as Spark's Kafka source gives them (timestampType included: the decoder ignores it)."""
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys if keys is not None else [f"k{i}".encode() for i in range(n)], pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([i % 3 for i in range(n)], pa.int32()),
            pa.array([1000 + i for i in range(n)], pa.int64()),
            pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=ARROW_SCHEMA_WITHOUT_HEADERS,
    )


def order(i: int, **changes) -> bytes:
    record = {
        "order_id": f"o{i}",
        "customer": f"c{i}",
        "amount": i + 0.5,
        "updated_at": 100 + i,
        "deleted": False,
        "created": "2024-05-01T12:00:00.000001Z",
        "address": {"city": "Lyon", "zip": 69000 + i},
        "tags": ["a", "b"],
    }
    record.update(changes)
    return json.dumps(record).encode()


def json_decoder(key: FormatSpec = STRING_KEY, schema: pa.Schema = ORDERS, required=("order_id",)) -> RecordDecoder:
    return RecordDecoder(FormatSpec("json", schema), key, required_fields=required)


def decode(decoder: RecordDecoder, values, keys=None) -> list[dict]:
    out = decoder.decode(kafka_batch(values, keys))
    assert out.schema == decoder.output_schema
    return out.to_pylist()


def errors_of(rows: list[dict]) -> list[str | None]:
    return [r["_error"] for r in rows]


def value_of(row: dict, fields=ORDER_FIELDS) -> dict:
    return {f: row[f] for f in fields}


# -- JSON values --------------------------------------------------------------------------------
def test_good_json_decodes_every_type_including_timestamps_and_nested_structs():
    [row] = decode(json_decoder(), [order(1)])
    assert row["_error"] is None
    assert value_of(row) == {
        "order_id": "o1",
        "customer": "c1",
        "amount": 1.5,
        "updated_at": 101,
        "deleted": False,
        "created": datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=UTC),
        "address": {"city": "Lyon", "zip": 69001},
        "tags": ["a", "b"],
    }


def test_output_schema_is_the_value_fields_then_key_kafka_coordinates_and_error_columns():
    schema = json_decoder().output_schema
    assert schema.names == [
        *ORDER_FIELDS,
        "kafka_key",
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        "_error",
        "_raw_key",
        "_raw_value",
    ]
    assert schema.field("kafka_key").type == pa.string()
    assert schema.field("kafka_partition").type == pa.int32()
    assert schema.field("kafka_offset").type == pa.int64()
    assert schema.field("kafka_timestamp").type == pa.timestamp("us", tz="UTC")
    assert [schema.field(n).type for n in ("_error", "_raw_key", "_raw_value")] == [
        pa.string(),
        pa.binary(),
        pa.binary(),
    ]


def test_error_rows_fit_the_output_schema_even_when_fields_are_declared_not_null():
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("n", pa.int64())])
    decoder = json_decoder(schema=schema, required=())
    batch = decoder.decode(kafka_batch([b'{"id": "a", "n": 1}', b"{"]))
    assert decoder.output_schema.field("id").nullable
    assert batch.column("id").to_pylist() == ["a", None]
    assert batch.column("_error")[1].as_py() is not None


def test_output_rows_keep_input_order_and_count_with_kafka_coordinates():
    values = [order(0), b"{", None, order(3), b"[]", order(5)]
    rows = decode(json_decoder(), values)
    assert len(rows) == len(values)
    assert [r["kafka_offset"] for r in rows] == [1000 + i for i in range(6)]
    assert [r["kafka_partition"] for r in rows] == [i % 3 for i in range(6)]
    assert [r["kafka_key"] for r in rows] == [f"k{i}" for i in range(6)]
    assert {r["kafka_topic"] for r in rows} == {"orders"} and {r["kafka_timestamp"] for r in rows} == {T0}
    assert [r["order_id"] for r in rows] == ["o0", None, None, "o3", None, "o5"]


def test_truncated_json_is_an_error_row_and_its_neighbours_decode():
    rows = decode(json_decoder(), [order(1), order(2)[:-3], order(3)])
    assert errors_of(rows)[0] is None and errors_of(rows)[2] is None
    assert rows[1]["_error"].startswith("invalid JSON: ")
    assert [r["order_id"] for r in rows] == ["o1", None, "o3"]


def test_syntax_error_inside_braces_gives_json_loads_message():
    rows = decode(json_decoder(), [order(1), b'{"order_id": "o2", "amount": 1,}', order(3)])
    assert errors_of(rows) == [
        None,
        "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 32 (char 31)",
        None,
    ]


def test_wrong_type_names_the_field_the_expected_type_and_the_value():
    rows = decode(json_decoder(), [order(1), order(2, amount="abc"), order(3)])
    assert errors_of(rows) == [None, "field 'amount': expected double, got \"abc\"", None]


def test_wrong_type_in_a_nested_struct_names_the_dotted_path():
    [row] = decode(json_decoder(), [order(1, address={"city": "Lyon", "zip": "69k"})])
    assert row["_error"] == "field 'address.zip': expected int32, got \"69k\""


def test_value_out_of_the_field_types_range_is_an_error_row():
    [row] = decode(json_decoder(), [order(1, address={"zip": 2**40})])
    assert row["_error"] == f"field 'address.zip': expected int32, got {2**40}"


def test_unparsable_timestamp_is_an_error_row_naming_the_field():
    rows = decode(json_decoder(), [order(1), order(2, created="yesterday")])
    assert errors_of(rows) == [None, "field 'created': expected timestamp[us, tz=UTC], got \"yesterday\""]


def test_missing_required_field_is_an_error_row():
    record = json.loads(order(1))
    del record["order_id"]
    [row] = decode(json_decoder(), [json.dumps(record).encode()])
    assert row["_error"] == "required field 'order_id' is missing or null"


def test_null_required_field_is_an_error_row():
    rows = decode(json_decoder(), [order(1, order_id=None), order(2)])
    assert errors_of(rows) == ["required field 'order_id' is missing or null", None]


def test_missing_not_null_field_is_an_error_row():
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("n", pa.int64())])
    rows = decode(json_decoder(schema=schema, required=()), [b'{"id": "a"}', b'{"n": 1}', b'{"id": null}'])
    assert errors_of(rows) == [
        None,
        "field 'id' is missing or null but declared NOT NULL",
        "field 'id' is missing or null but declared NOT NULL",
    ]


def test_garbage_bytes_are_an_error_row():
    rows = decode(json_decoder(), [b"\x00\x01garbage", b"not json", order(3)])
    assert errors_of(rows) == [
        "invalid JSON: Expecting value: line 1 column 1 (char 0)",
        "invalid JSON: Expecting value: line 1 column 1 (char 0)",
        None,
    ]


def test_invalid_utf8_value_is_an_error_row_and_its_neighbours_decode():
    rows = decode(json_decoder(), [order(1), b'{"order_id": "o\xff"}', order(3)])
    assert errors_of(rows) == [None, "not valid UTF-8: invalid start byte at byte 15", None]


def test_null_value_is_an_error_row():
    rows = decode(json_decoder(), [None, order(2)])
    assert errors_of(rows) == ["value is null", None]


@pytest.mark.parametrize(
    "value, kind",
    [
        (b"[1, 2]", "an array"),
        (b'"text"', "a string"),
        (b"42", "a number"),
        (b"null", "null"),
        (b"true", "a boolean"),
    ],
)
def test_json_that_is_not_an_object_is_an_error_row(value, kind):
    [row] = decode(json_decoder(), [value])
    assert row["_error"] == f"the JSON is {kind}, not an object"


def test_raw_newlines_between_the_tokens_of_a_value_are_valid_json():
    pretty = json.dumps(json.loads(order(2)), indent=2).encode()
    rows = decode(json_decoder(), [order(1), pretty, order(3)])
    assert errors_of(rows) == [None, None, None]
    assert value_of(rows[1]) == value_of(decode(json_decoder(), [order(2)])[0])


def test_raw_newline_inside_a_json_string_is_an_error_row():
    rows = decode(json_decoder(), [order(1), b'{"order_id": "o\n2"}', order(3)])
    assert errors_of(rows)[0] is None and errors_of(rows)[2] is None
    assert rows[1]["_error"].startswith("invalid JSON: Invalid control character")


@pytest.mark.parametrize("value", [b'{"order_id": "a"}{"order_id": "b"}', b'{"order_id": "a"}\n{"order_id": "b"}'])
def test_two_objects_in_one_value_are_an_error_row(value):
    rows = decode(json_decoder(), [order(1), value, order(3)])
    assert errors_of(rows)[0] is None and errors_of(rows)[2] is None
    assert rows[1]["_error"].startswith("invalid JSON: Extra data")


def test_whitespace_around_a_value_is_ignored():
    rows = decode(json_decoder(), [b" \t" + order(1) + b"\r\n", order(2)])
    assert errors_of(rows) == [None, None]
    assert rows[0]["order_id"] == "o1"


def test_unknown_members_are_ignored_and_absent_nullable_fields_are_null():
    [row] = decode(json_decoder(), [b'{"order_id": "o1", "extra": {"deep": [1, {"x": null}]}}'])
    assert row["_error"] is None
    assert value_of(row) == {f: ("o1" if f == "order_id" else None) for f in ORDER_FIELDS}


def test_a_record_parsed_alone_gets_the_same_types_as_in_a_block():
    # A duplicated member fails Arrow's block parse, so this record is read alone (json.loads,
    # then read_json of its re-serialisation), where the last duplicate wins.
    duplicated = order(2)[:-1] + b', "customer": "last"}'
    alone, in_block = decode(json_decoder(), [duplicated, order(2)])
    assert alone["_error"] is None and in_block["_error"] is None
    assert alone["customer"] == "last"
    assert value_of(alone, [f for f in ORDER_FIELDS if f != "customer"]) == value_of(
        in_block, [f for f in ORDER_FIELDS if f != "customer"]
    )


def test_bad_records_anywhere_in_a_large_batch_are_isolated_exactly():
    bad_kinds = [
        order(0)[:-2],
        order(0, amount="x"),
        b"\xfe",
        b"[]",
        order(0, created="?"),
        order(0, order_id=None),
        b'{"a": 1}{"b": 2}',
        order(0, address={"zip": "z"}),
    ]
    values, expected_bad = [], set()
    for i in range(3000):
        if i % 37 == 5:
            values.append(bad_kinds[len(expected_bad) % len(bad_kinds)])
            expected_bad.add(i)
        else:
            values.append(order(i))
    rows = decode(json_decoder(), values)
    assert {i for i, r in enumerate(rows) if r["_error"] is not None} == expected_bad
    assert all(rows[i]["order_id"] == f"o{i}" for i in range(3000) if i not in expected_bad)


def test_error_rows_carry_the_raw_bytes_and_good_rows_do_not():
    values = [order(1), b"oops", None]
    keys = [b"k1", b"k2", None]
    rows = decode(json_decoder(), values, keys)
    assert [(r["_raw_key"], r["_raw_value"]) for r in rows] == [(None, None), (b"k2", b"oops"), (None, None)]
    assert [r["_error"] is not None for r in rows] == [False, True, True]


def test_error_rows_have_null_value_fields():
    [row] = decode(json_decoder(), [order(1, amount="x")])
    assert value_of(row) == dict.fromkeys(ORDER_FIELDS)


def test_empty_batch_gives_an_empty_batch_of_the_output_schema():
    out = json_decoder().decode(kafka_batch([]))
    assert out.num_rows == 0 and out.schema == json_decoder().output_schema


def test_decode_batches_maps_each_batch_for_map_in_arrow():
    decoder = json_decoder()
    outs = list(decoder.decode_batches(iter([kafka_batch([order(1)]), kafka_batch([b"x", order(2)])])))
    assert [errors_of(o.to_pylist()) for o in outs] == [
        [None],
        ["invalid JSON: Expecting value: line 1 column 1 (char 0)", None],
    ]


def test_decoder_pickles_as_its_settings_and_decodes_after_unpickling():
    decoder = RecordDecoder(FormatSpec("avro", None, AVRO_V1), STRING_KEY, required_fields=["order_id"])
    data = pickle.dumps(decoder)
    assert b"__fastavro_parsed" not in data  # parsed schemas are rebuilt where it is unpickled
    clone = pickle.loads(data)
    assert clone.output_schema == decoder.output_schema
    rows = clone.decode(kafka_batch([avro_bytes(AVRO_V1, {"order_id": "o1", "amount": 2.0}), b"\x02"])).to_pylist()
    assert [r["order_id"] for r in rows] == ["o1", None]


def test_value_fields_that_clash_with_added_columns_are_refused():
    with pytest.raises(ValueError, match="kafka_topic"):
        json_decoder(schema=pa.schema([pa.field("kafka_topic", pa.string())]), required=())


def test_required_fields_must_be_value_fields():
    with pytest.raises(ValueError, match="nope"):
        json_decoder(required=("nope",))


def test_value_format_must_decode_to_fields():
    with pytest.raises(ValueError, match="value's format"):
        RecordDecoder(FormatSpec("string", None), STRING_KEY)


# -- keys ---------------------------------------------------------------------------------------
def test_string_key_decodes_and_a_null_key_is_null_not_an_error():
    rows = decode(json_decoder(), [order(1), order(2)], keys=["clé".encode(), None])
    assert [(r["kafka_key"], r["_error"]) for r in rows] == [("clé", None), (None, None)]


def test_invalid_utf8_string_key_is_an_error_row_prefixed_with_key():
    rows = decode(json_decoder(), [order(1), order(2)], keys=[b"ok", b"\xc3("])
    assert errors_of(rows) == [None, "key: not valid UTF-8: invalid continuation byte at byte 0"]
    assert rows[1]["order_id"] is None and rows[1]["_raw_key"] == b"\xc3("


def test_binary_key_is_passed_through():
    rows = decode(json_decoder(key=FormatSpec("binary", None)), [order(1)], keys=[b"\xff\x00"])
    assert rows[0]["kafka_key"] == b"\xff\x00" and rows[0]["_error"] is None


def test_json_key_decodes_to_a_struct():
    key_schema = pa.schema([pa.field("order_id", pa.string()), pa.field("region", pa.int32())])
    decoder = json_decoder(key=FormatSpec("json", key_schema))
    assert decoder.output_schema.field("kafka_key").type == pa.struct(list(key_schema))
    rows = decode(decoder, [order(1), order(2)], keys=[b'{"order_id": "o1", "region": 3}', b'{"order_id": '])
    assert rows[0]["kafka_key"] == {"order_id": "o1", "region": 3} and rows[0]["_error"] is None
    assert rows[1]["_error"] == "key: invalid JSON: Expecting value: line 1 column 14 (char 13)"


def test_key_and_value_errors_are_both_reported():
    decoder = json_decoder(key=FormatSpec("json", pa.schema([pa.field("id", pa.string())])))
    [row] = decode(decoder, [b"[1]"], keys=[b"{"])
    assert row["_error"].startswith("the JSON is an array, not an object; key: invalid JSON: ")


def test_key_format_none_has_no_key_column():
    decoder = json_decoder(key=NO_KEY)
    assert "kafka_key" not in decoder.output_schema.names
    rows = decode(decoder, [order(1)], keys=[b"\xff"])
    assert rows[0]["_error"] is None and "kafka_key" not in rows[0]


# -- plain Avro ---------------------------------------------------------------------------------
AVRO_V1 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "order_id", "type": "string"},
            {"name": "amount", "type": ["null", "double"], "default": None},
        ],
    }
)
AVRO_V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "order_id", "type": "string"},
            {"name": "amount", "type": ["null", "double"], "default": None},
            {"name": "currency", "type": "string", "default": "EUR"},
        ],
    }
)
AVRO_RICH = json.dumps(
    {
        "type": "record",
        "name": "Event",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {
                "name": "where",
                "type": ["null", {"type": "record", "name": "Place", "fields": [{"name": "city", "type": "string"}]}],
                "default": None,
            },
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "counts", "type": {"type": "map", "values": "long"}},
        ],
    }
)


def avro_bytes(schema_json: str, record: dict) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(json.loads(schema_json)), record)
    return buffer.getvalue()


def avro_decoder(schema_json: str = AVRO_V1, required=("order_id",)) -> RecordDecoder:
    return RecordDecoder(FormatSpec("avro", None, schema_json), STRING_KEY, required_fields=required)


def test_plain_avro_decodes_with_the_arrow_schema_of_the_avro_schema():
    event_id = uuid.uuid4()
    record = {
        "id": event_id,
        "at": T0,
        "price": Decimal("12.34"),
        "kind": "B",
        "where": {"city": "Lyon"},
        "tags": ["x"],
        "counts": {"a": 1},
    }
    [row] = decode(avro_decoder(AVRO_RICH, required=()), [avro_bytes(AVRO_RICH, record)])
    assert row["_error"] is None
    assert {k: row[k] for k in record} == {**record, "id": str(event_id), "counts": [("a", 1)]}


def test_avro_records_of_one_schema_read_a_column_at_a_time_as_they_read_one_by_one():
    records = [
        {
            "id": uuid.uuid4(),
            "at": T0,
            "price": Decimal(f"{n}.25"),
            "kind": "AB"[n % 2],
            "where": {"city": "Lyon"} if n % 3 else None,
            "tags": ["x"] * (n % 3),
            "counts": {"a": n} if n % 2 else {},
        }
        for n in range(7)
    ]
    raw = pa.array([avro_bytes(AVRO_RICH, r) for r in records], pa.binary())
    struct = pa.struct(list(arrow_schema_from_avro(AVRO_RICH)))
    one_by_one, errors = decode_each(raw, lambda data: read_avro(data, 0, parse_avro(AVRO_RICH), None), struct)
    columns = read_columns(raw, np.arange(len(raw)), 0, AVRO_RICH, struct)
    assert not errors and columns is not None
    assert columns.to_pylist() == one_by_one.to_pylist()


def test_avro_records_are_read_one_by_one_when_a_field_is_not_the_type_the_table_wants():
    raw = pa.array([avro_bytes(AVRO_V1, {"order_id": "a", "amount": 1.0})], pa.binary())
    narrow = pa.struct([pa.field("order_id", pa.string()), pa.field("amount", pa.int8())])
    assert read_columns(raw, np.arange(1), 0, AVRO_V1, narrow) is None


def test_truncated_avro_is_an_error_row_and_its_neighbours_decode():
    good = avro_bytes(AVRO_V1, {"order_id": "o1", "amount": 1.0})
    rows = decode(avro_decoder(), [good, good[:-3], good])
    assert errors_of(rows) == [None, "invalid Avro: the record runs past the end of its 9 bytes", None]


def test_avro_with_trailing_bytes_is_an_error_row():
    good = avro_bytes(AVRO_V1, {"order_id": "o1", "amount": 1.0})
    rows = decode(avro_decoder(), [good + b"\x00\x00", good])
    assert errors_of(rows) == ["invalid Avro: 2 bytes left after the record", None]


def test_avro_with_invalid_utf8_string_is_an_error_row():
    [row] = decode(avro_decoder(), [b"\x04\xff\xfe\x00"])
    assert row["_error"].startswith("invalid Avro: UnicodeDecodeError: ")


def test_avro_null_required_field_is_an_error_row():
    schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": "order_id", "type": ["null", "string"]}]})
    rows = decode(avro_decoder(schema), [avro_bytes(schema, {"order_id": None}), avro_bytes(schema, {"order_id": "o"})])
    assert errors_of(rows) == ["required field 'order_id' is missing or null", None]


def test_avro_value_that_does_not_fit_a_narrower_arrow_type_is_an_error_row_naming_the_field():
    narrow = pa.schema([pa.field("order_id", pa.string(), nullable=False), pa.field("amount", pa.int8())])
    decoder = RecordDecoder(FormatSpec("avro", narrow, AVRO_V1), STRING_KEY)
    rows = decode(
        decoder,
        [
            avro_bytes(AVRO_V1, {"order_id": "a", "amount": 1.0}),
            avro_bytes(AVRO_V1, {"order_id": "b", "amount": 1000.0}),
        ],
    )
    assert errors_of(rows) == [None, "field 'amount': expected int8, got 1000.0"]
    assert rows[0]["amount"] == 1


# -- Confluent Avro -----------------------------------------------------------------------------
def confluent_decoder(url: str, reader: str = AVRO_V2) -> RecordDecoder:
    return RecordDecoder(
        FormatSpec("confluent-avro", None, reader), STRING_KEY, registry_url=url, required_fields=["order_id"]
    )


def subject() -> str:
    return f"orders-{uuid.uuid4().hex[:12]}-value"


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_confluent_avro_decodes_with_the_writer_schema_from_the_registry(schema_registry_url):
    schema_id = SchemaRegistryClient(schema_registry_url).register(subject(), AVRO_V2)
    record = {"order_id": "o1", "amount": 3.5, "currency": "USD"}
    [row] = decode(confluent_decoder(schema_registry_url), [confluent_frame(schema_id, avro_bytes(AVRO_V2, record))])
    assert row["_error"] is None
    assert {k: row[k] for k in record} == record


def test_confluent_avro_resolves_an_older_writer_schema_to_the_reader_schema(schema_registry_url):
    client = SchemaRegistryClient(schema_registry_url)
    name = subject()
    v1, v2 = client.register(name, AVRO_V1), client.register(name, AVRO_V2)
    assert v1 != v2
    values = [
        confluent_frame(v1, avro_bytes(AVRO_V1, {"order_id": "o1", "amount": 1.0})),
        confluent_frame(v2, avro_bytes(AVRO_V2, {"order_id": "o2", "amount": 2.0, "currency": "USD"})),
    ]
    rows = decode(confluent_decoder(schema_registry_url), values)
    assert [(r["order_id"], r["currency"], r["_error"]) for r in rows] == [("o1", "EUR", None), ("o2", "USD", None)]


def test_confluent_avro_writer_schema_the_reader_cannot_resolve_is_an_error_row(schema_registry_url):
    incompatible = json.dumps(
        {
            "type": "record",
            "name": "Order",
            "namespace": "shop",
            "fields": [{"name": "order_id", "type": "string"}, {"name": "qty", "type": "int"}],
        }
    )
    schema_id = SchemaRegistryClient(schema_registry_url).register(subject(), AVRO_V1)
    [row] = decode(
        confluent_decoder(schema_registry_url, reader=incompatible),
        [confluent_frame(schema_id, avro_bytes(AVRO_V1, {"order_id": "o1"}))],
    )
    assert row["_error"] == (
        f"writer schema id {schema_id} lacks field 'qty' (int), which the table's reader "
        "schema requires (the field has no default)"
    )


def test_confluent_avro_unknown_schema_id_is_an_error_row(schema_registry_url):
    schema_id = SchemaRegistryClient(schema_registry_url).register(subject(), AVRO_V1)
    payload = avro_bytes(AVRO_V1, {"order_id": "o1"})
    rows = decode(
        confluent_decoder(schema_registry_url),
        [confluent_frame(2_000_000_000, payload)] * 2 + [confluent_frame(schema_id, payload)],
    )
    assert errors_of(rows) == ["unknown schema id 2000000000 in the schema registry"] * 2 + [None]


def test_confluent_avro_wrong_magic_byte_is_an_error_row(schema_registry_url):
    rows = decode(confluent_decoder(schema_registry_url), [order(1), b"\x00\x00"])
    assert errors_of(rows) == [
        "not in Confluent wire format: first byte 0x7b, expected 0x00",
        "not in Confluent wire format: 2 bytes, shorter than the 5-byte header",
    ]


def test_confluent_avro_truncated_payload_names_the_writer_schema(schema_registry_url):
    schema_id = SchemaRegistryClient(schema_registry_url).register(subject(), AVRO_V1)
    framed = confluent_frame(schema_id, avro_bytes(AVRO_V1, {"order_id": "o1", "amount": 1.0}))
    [row] = decode(confluent_decoder(schema_registry_url), [framed[:-1]])
    assert row["_error"] == f"invalid Avro: the record runs past the end of its 11 bytes (writer schema id {schema_id})"


def test_confluent_schema_of_another_type_is_an_error_row_naming_the_type(schema_registry_url):
    json_schema = json.dumps({"type": "object", "properties": {"order_id": {"type": "string"}}})
    schema_id = SchemaRegistryClient(schema_registry_url).register(subject(), json_schema, schema_type="JSON")
    [row] = decode(confluent_decoder(schema_registry_url), [confluent_frame(schema_id, b"{}")])
    assert row["_error"] == f"schema id {schema_id} is a JSON schema, not AVRO: only Avro can be decoded"


def test_registry_down_raises_instead_of_making_error_rows():
    url = closed_port_url()
    with pytest.raises(SchemaRegistryError, match=f"schema registry {url}: GET /schemas/ids/1 failed"):
        confluent_decoder(url).decode(kafka_batch([confluent_frame(1, b"\x04o1\x00")]))


def test_registry_answering_404_without_schema_not_found_raises(schema_registry_url):
    wrong_path = schema_registry_url.rstrip("/") + "/not-the-registry"
    with pytest.raises(SchemaRegistryError, match="HTTP 404"):
        confluent_decoder(wrong_path).decode(kafka_batch([confluent_frame(1, b"\x04o1\x00")]))


@pytest.fixture
def private_registry(tmp_path):
    """A registry of this test alone: ids start at 1 and it can be stopped."""
    registry = ApicurioRegistry(tmp_path / "registry").start()
    yield registry
    registry.close()


def test_unknown_schema_id_is_asked_again_in_the_next_batch(private_registry):
    decoder = confluent_decoder(private_registry.url)
    framed = confluent_frame(1, avro_bytes(AVRO_V1, {"order_id": "o1"}))
    assert errors_of(decode(decoder, [framed])) == ["unknown schema id 1 in the schema registry"]
    assert SchemaRegistryClient(private_registry.url).register(subject(), AVRO_V1) == 1
    assert errors_of(decode(decoder, [framed])) == [None]


def test_writer_schemas_are_cached_for_the_process(private_registry):
    schema_id = SchemaRegistryClient(private_registry.url).register(subject(), AVRO_V1)
    framed = confluent_frame(schema_id, avro_bytes(AVRO_V1, {"order_id": "o1"}))
    decoder = confluent_decoder(private_registry.url)
    assert errors_of(decode(decoder, [framed])) == [None]
    private_registry.stop()
    assert errors_of(decode(pickle.loads(pickle.dumps(decoder)), [framed])) == [None]


def test_confluent_decoder_without_registry_url_is_refused():
    with pytest.raises(ValueError, match="schema registry URL"):
        RecordDecoder(FormatSpec("confluent-avro", None, AVRO_V1), STRING_KEY)


# -- schema registry client ---------------------------------------------------------------------
def test_register_gives_a_schema_the_same_id_under_any_subject(schema_registry_url):
    client = SchemaRegistryClient(schema_registry_url)
    first = client.register(subject(), AVRO_V1)
    assert client.register(subject(), AVRO_V1) == first
    assert json.loads(client.schema_by_id(first)) == json.loads(AVRO_V1)


def test_latest_schema_is_the_last_registered_version(schema_registry_url):
    client = SchemaRegistryClient(schema_registry_url)
    name = subject()
    client.register(name, AVRO_V1)
    v2 = client.register(name, AVRO_V2)
    schema_id, text = client.latest_schema(name)
    assert schema_id == v2 and json.loads(text) == json.loads(AVRO_V2)


def test_latest_schema_of_an_unknown_subject_raises_naming_it(schema_registry_url):
    with pytest.raises(SchemaRegistryError, match="no subject 'nobody-value'"):
        SchemaRegistryClient(schema_registry_url).latest_schema("nobody-value")


def test_schema_by_unknown_id_is_none(schema_registry_url):
    assert SchemaRegistryClient(schema_registry_url).schema_by_id(2_000_000_000) is None


def test_registry_errors_never_show_credentials():
    url = closed_port_url()
    client = SchemaRegistryClient(url.replace("http://", "http://alice:s3cret@"))
    for call in (lambda: client.schema_by_id(1), lambda: client.latest_schema("s")):
        with pytest.raises(SchemaRegistryError) as raised:
            call()
        assert url in str(raised.value) and "s3cret" not in str(raised.value) and "alice" not in str(raised.value)
    assert "s3cret" not in repr(client)


def test_basic_auth_is_sent_to_the_registry(schema_registry_url):
    client = SchemaRegistryClient(schema_registry_url, basic_auth_user_info="alice:s3cret")
    assert client.schema_by_id(2_000_000_000) is None  # the test registry ignores credentials


def test_confluent_frame_is_magic_byte_then_big_endian_id_then_payload():
    assert confluent_frame(258, b"avro") == b"\x00\x00\x00\x01\x02avro"


# -- throughput ---------------------------------------------------------------------------------
def test_json_decode_throughput_is_printed():
    values = [order(i, customer=f"customer-{i:08d}-" + "x" * 20) for i in range(100_000)]
    batch = kafka_batch(values)
    decoder = json_decoder()
    decoder.decode(kafka_batch(values[:100]))  # warm up
    started = time.perf_counter()
    out = decoder.decode(batch)
    seconds = time.perf_counter() - started
    assert out.num_rows == len(values) and out.column("_error").null_count == len(values)
    mean_bytes = sum(map(len, values)) / len(values)
    print(
        f"\nJSON decode: {len(values):,} records of ~{mean_bytes:.0f} bytes in {seconds:.3f}s "
        f"= {len(values) / seconds:,.0f} records/s"
    )
