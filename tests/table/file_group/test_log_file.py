"""Hudi log files: Hudi's own samples, round trips, torn writes, and hudi-rs reading our files."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shutil
import struct
from decimal import Decimal
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from table.errors import FormatError
from table.file_group.log_file.avro_binary import log_schema, read_avro_records, varint
from table.file_group.log_file.block import (
    DATA_BLOCK_TYPES,
    MAGIC,
    BlockType,
    CommandBlock,
    CommandType,
    CorruptBlock,
    DataBlock,
    DeleteBlock,
    HeaderKey,
)
from table.file_group.log_file.reader import parse_log_bytes, read_log_file, read_log_files
from table.file_group.log_file.writer import encode_avro_runs, encode_block, write_log_file
from table.schema import META_FIELDS, avro_schema_json
from table.storage.file_io import Storage
from tests.support.hudi_samples import SAMPLES
from tests.support.log_blocks import avro_records_in

pytestmark = pytest.mark.unit


PARTITION = "city=san_francisco"
UPDATE_LOG = f"{PARTITION}/.d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85"
DELETE_LOG = f"{PARTITION}/.6d3d1d6e-2298-4080-a0c1-494877d6f40a-0_20250618054711154.log.1_0-26-85"
UPDATE_INSTANT = "20250331030645735"  # the completed deltacommit of v6_trips_8i1u that wrote the log

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


def sample(name: str) -> Storage:
    return Storage(str(SAMPLES / name))


def copy_sample(name: str, tmp_path: Path) -> Storage:
    """A writable copy of a sample table (the samples are read-only)."""
    target = tmp_path / name
    shutil.copytree(sample(name).base_uri, target, copy_function=shutil.copyfile)
    for root, _, _ in os.walk(target):
        os.chmod(root, 0o755)
    return Storage(str(target))


def header(table_name: str, schema: pa.Schema, instant: str = UPDATE_INSTANT) -> dict[HeaderKey, str]:
    return {
        HeaderKey.INSTANT_TIME: instant,
        HeaderKey.SCHEMA: avro_schema_json(schema, table_name, with_meta_fields=True),
    }


def with_meta(records: pa.Table, instant: str, partition: str, file_id: str) -> pa.Table:
    """Records with the five meta columns first, filled in as Hudi's writer does."""
    n = records.num_rows
    meta = {
        "_hoodie_commit_time": [instant] * n,
        "_hoodie_commit_seqno": [f"{instant}_0_{i}" for i in range(n)],
        "_hoodie_record_key": records["uuid"],
        "_hoodie_partition_path": [partition] * n,
        "_hoodie_file_name": [file_id] * n,
    }
    columns = [
        pa.array(meta[name], pa.string()) if isinstance(meta[name], list) else meta[name] for name in META_FIELDS
    ]
    return pa.Table.from_arrays(columns + records.columns, names=[*META_FIELDS, *records.column_names])


# ---------------------------------------------------------------------------------------------
# Reading what Hudi wrote


def test_reads_hudi_avro_data_block():
    (block,) = read_log_file(sample("v6_trips_8i1u"), UPDATE_LOG)
    assert isinstance(block, DataBlock) and block.block_type == BlockType.AVRO_DATA
    assert block.instant == UPDATE_INSTANT
    assert list(block.header) == [HeaderKey.INSTANT_TIME, HeaderKey.SCHEMA] and block.footer == {}
    assert block.records.to_pylist() == [
        {
            "_hoodie_commit_time": UPDATE_INSTANT,
            "_hoodie_commit_seqno": f"{UPDATE_INSTANT}_0_1",
            "_hoodie_record_key": "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
            "_hoodie_partition_path": PARTITION,
            "_hoodie_file_name": "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0",
            "ts": 1695046462179,
            "uuid": "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
            "rider": "rider-D",
            "driver": "driver-L",
            "fare": 25.0,
            "city": "san_francisco",
        }
    ]


def test_reads_hudi_delete_block():
    (block,) = read_log_file(sample("v6_trips_8i3d"), DELETE_LOG)
    assert isinstance(block, DeleteBlock) and block.block_type == BlockType.DELETE
    assert block.instant == "20250618054714114"
    assert json.loads(block.header[HeaderKey.SCHEMA])["name"] == "v6_trips_8i3d_record"
    assert block.records.to_pylist() == [
        {"record_key": key, "partition_path": PARTITION, "ordering_value": 0}
        for key in (
            "e96c4396-3fad-413a-a942-4cb36106d721",
            "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
            "334e26e9-8355-45cc-97c6-c31daf0df330",
        )
    ]
    assert block.ordering_values.type == pa.int32()  # Hudi's default ordering value, IntWrapper(0)


@pytest.mark.parametrize("name, path", [("v6_trips_8i1u", UPDATE_LOG), ("v6_trips_8i3d", DELETE_LOG)])
def test_rewriting_a_hudi_log_file_from_its_decoded_blocks_is_byte_identical(tmp_path, name, path):
    original = sample(name).read_bytes(path)
    blocks = read_log_file(sample(name), path)
    ours = Storage(str(tmp_path))
    assert write_log_file(ours, "copy.log", blocks) == len(original)
    assert ours.read_bytes("copy.log") == original


# ---------------------------------------------------------------------------------------------
# Round trips

RICH_SCHEMA = pa.schema(
    [
        ("uuid", pa.string()),
        ("ts", pa.int64()),
        ("qty", pa.int32()),
        ("ok", pa.bool_()),
        ("ratio", pa.float32()),
        ("fare", pa.float64()),
        ("blob", pa.binary()),
        ("code", pa.binary(3)),
        ("day", pa.date32()),
        ("at_ms", pa.time32("ms")),
        ("at_us", pa.time64("us")),
        ("event_ms", pa.timestamp("ms", tz="UTC")),
        ("event_us", pa.timestamp("us", tz="UTC")),
        ("amount", pa.decimal128(10, 2)),
        ("wide", pa.decimal128(38, 9)),
        ("addr", pa.struct([("street", pa.string()), ("geo", pa.struct([("lat", pa.float64())]))])),
        ("tags", pa.list_(pa.string())),
        ("lines", pa.list_(pa.struct([("sku", pa.string()), ("price", pa.decimal128(9, 2))]))),
        ("attrs", pa.map_(pa.string(), pa.int64())),
    ]
)


def rich_rows(n: int) -> list[dict]:
    """Rows that exercise every type: nulls, negatives, multi-byte varints, empty and null lists."""
    rows = []
    for i in range(n):
        sign = -1 if i % 3 == 0 else 1
        rows.append(
            {
                "uuid": f"key-{i}-{'é' * (i % 3)}",
                "ts": sign * (i**7),
                "qty": None if i % 5 == 0 else sign * i * 1000,
                "ok": None if i % 7 == 0 else bool(i % 2),
                "ratio": i / 4,
                "fare": None if i % 4 == 0 else sign * i * 1.25,
                "blob": bytes(range(i % 20)),
                "code": bytes([i % 256, 0, 255]),
                "day": dt.date(1969, 12, 1) + dt.timedelta(days=i * 37),
                "at_ms": dt.time(i % 24, i % 60, 0, (i % 1000) * 1000),
                "at_us": dt.time(23, 59, i % 60, i % 1_000_000),
                "event_ms": dt.datetime(1960 + i % 80, 1, 1, 12, 0, 0, 123000, tzinfo=dt.UTC),
                "event_us": None
                if i % 6 == 0
                else dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=sign * i**5),
                "amount": Decimal(sign * i * 137) / 100,
                "wide": Decimal(sign * 10**28 + i) / 10**9,
                "addr": None if i % 8 == 0 else {"street": f"{i} main", "geo": None if i % 3 else {"lat": i / 7}},
                "tags": None if i % 9 == 0 else [f"t{j}" for j in range(i % 4)],
                "lines": [{"sku": f"s{j}", "price": Decimal(j * 101) / 100} for j in range(i % 3)],
                "attrs": None if i % 10 == 0 else {f"k{j}": j * i for j in range(i % 3)},
            }
        )
    return rows


def rich_table(n: int = 300) -> pa.Table:
    return with_meta(pa.Table.from_pylist(rich_rows(n), schema=RICH_SCHEMA), UPDATE_INSTANT, PARTITION, "f-0")


def reference_avro_records(schema_json: str, rows: list[dict]) -> list[bytes]:
    """Each row as fastavro encodes it under the schema: the reference our records must equal."""
    avro = fastavro.parse_schema(json.loads(schema_json))
    encoded = []
    for row in rows:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, avro, row)
        encoded.append(out.getvalue())
    return encoded


def test_avro_records_are_byte_identical_to_a_reference_avro_encoder():
    table = rich_table()
    hdr = header("t", RICH_SCHEMA)
    expected = reference_avro_records(hdr[HeaderKey.SCHEMA], table.to_pylist(maps_as_pydicts="strict"))
    assert avro_records_in(encode_block(DataBlock(table, hdr))) == expected


@pytest.mark.parametrize("rows", [1, 200])
def test_avro_fields_of_one_width_in_every_row_are_joined_as_a_reference_avro_encoder_writes_them(rows):
    """Fields that encode to as many bytes in every row (union branches, short lengths, keys of
    one length) are laid side by side before the others are joined: each record is still its
    fields' bytes in order. One row makes every field one width."""
    schema = pa.schema(
        [
            ("uuid", pa.string()),
            ("ts", pa.int64()),
            ("fare", pa.float64()),
            ("city", pa.string()),
            ("note", pa.string()),
        ]
    )
    records = [
        {"uuid": f"id-{i:04d}", "ts": i % 50, "fare": i / 2, "city": "sf", "note": None if i % 3 else "x" * (i % 5)}
        for i in range(rows)
    ]
    table = with_meta(pa.Table.from_pylist(records, schema=schema), UPDATE_INSTANT, PARTITION, "f-0")
    hdr = header("t", schema)
    expected = reference_avro_records(hdr[HeaderKey.SCHEMA], table.to_pylist())
    assert avro_records_in(encode_block(DataBlock(table, hdr))) == expected


@pytest.mark.parametrize("runs", [[(0, 120), (120, 5), (125, 175)], [(3, 40), (50, 1), (200, 90)]])
def test_avro_blocks_of_runs_of_one_table_are_the_blocks_of_their_slices(runs):
    """A write hands its rows over whole with the run of each file group (all of them, or some
    with rows between them left out): each block is the one its slice alone makes."""
    table = rich_table()
    schema_json = avro_schema_json(RICH_SCHEMA, "t", with_meta_fields=True)
    expected = [
        encode_block(DataBlock.create(table.slice(start, count), UPDATE_INSTANT, schema_json)) for start, count in runs
    ]
    assert encode_avro_runs(table, runs, UPDATE_INSTANT, schema_json) == expected


@pytest.mark.parametrize("fmt", ["avro", "parquet"])
def test_data_block_round_trip(tmp_path, fmt):
    table = rich_table()
    block = DataBlock(table, header("t", RICH_SCHEMA), DATA_BLOCK_TYPES[fmt])
    storage = Storage(str(tmp_path))
    size = write_log_file(storage, "f.log.1_0-1-1", [block])
    assert size == storage.size("f.log.1_0-1-1")
    (back,) = read_log_file(storage, "f.log.1_0-1-1")
    assert isinstance(back, DataBlock) and back.block_type == DATA_BLOCK_TYPES[fmt]
    assert back.header == block.header
    assert back.records.to_pylist() == table.to_pylist()


def test_avro_block_with_schema_shapes_of_other_writers():
    """Null-last unions, a non-null field and a named-type reference, as Java writers may emit."""
    schema_json = json.dumps(
        {
            "type": "record",
            "name": "r",
            "namespace": "ns",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "name", "type": ["string", "null"]},
                {"name": "p", "type": {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}},
                {"name": "q", "type": ["null", "P"]},
                {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            ],
        }
    )
    rows = [
        {"id": -1, "name": None, "p": {"x": 1}, "q": None, "e": "B"},
        {"id": 2**40, "name": "n", "p": {"x": -7}, "q": {"x": 3}, "e": "A"},
    ]
    block = DataBlock(
        pa.Table.from_pylist(rows), {HeaderKey.INSTANT_TIME: UPDATE_INSTANT, HeaderKey.SCHEMA: schema_json}
    )
    encoded = encode_block(block)
    assert avro_records_in(encoded) == reference_avro_records(schema_json, rows)
    (back,) = parse_log_bytes(encoded)
    assert back.records.to_pylist() == rows


def test_avro_records_read_for_some_of_their_fields_step_over_the_others():
    """A reader that wants a few fields of wide records (a change event's envelope) gets them, and
    each record's end, as a reading of every field does: fields of every type are stepped over."""
    schema_json = header("t", RICH_SCHEMA)[HeaderKey.SCHEMA]
    schema = log_schema(schema_json)
    records = reference_avro_records(schema_json, rich_table().to_pylist(maps_as_pydicts="strict"))
    ends = np.cumsum([len(record) for record in records])
    starts = ends - [len(record) for record in records]
    wanted = pa.struct([("uuid", pa.string()), ("addr", pa.struct([("geo", pa.null())])), ("attrs", pa.null())])

    every, every_end = read_avro_records(b"".join(records), starts, schema)
    some, some_end = read_avro_records(b"".join(records), starts, schema, wanted)

    assert some.column_names == ["uuid", "addr", "attrs"]
    assert some.to_pylist() == [
        {"uuid": row["uuid"], "addr": row["addr"] and {"geo": row["addr"]["geo"]}, "attrs": row["attrs"]}
        for row in every.to_pylist()
    ]
    assert some_end.tolist() == every_end.tolist() == ends.tolist()


def test_avro_arrays_in_blocks_with_their_byte_size_are_stepped_over_by_it():
    """Java's buffered encoder writes an array's blocks as a negative count and the block's byte
    size; a reader that does not want the array steps over each block at once."""
    schema = log_schema(
        json.dumps(
            {
                "type": "record",
                "name": "r",
                "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}}, {"name": "id", "type": "long"}],
            }
        )
    )
    items = varint(1) + varint(2) + varint(300)
    record = varint(-3) + varint(len(items)) + items + varint(0) + varint(7)
    content = record + record

    every, every_end = read_avro_records(content, np.array([0, len(record)]), schema)
    some, some_end = read_avro_records(content, np.array([0, len(record)]), schema, pa.struct([("id", pa.int64())]))

    assert every.to_pylist() == [{"xs": [1, 2, 300], "id": 7}] * 2
    assert some.to_pylist() == [{"id": 7}] * 2
    assert some_end.tolist() == every_end.tolist() == [len(record), len(content)]


def record_schema(**fields: str) -> str:
    return json.dumps({"type": "record", "name": "r", "fields": [{"name": n, "type": t} for n, t in fields.items()]})


NUMBERS_SCHEMA = record_schema(n="long", x="double", s="string")
#: Longs of every varint length, one to ten bytes, and each side of where lengths change.
EDGE_LONGS = [0, -1, 1, 63, -64, 64, -65, 2**55 - 1, -(2**55), 2**55, -(2**55) - 1, 2**62, 2**63 - 1, -(2**63)]


def test_avro_numbers_of_every_length_and_values_at_the_content_end_read_as_written():
    """Values are read eight bytes at a time where they fit: varints of one to ten bytes, and
    values in the content's last bytes (or in content shorter than eight bytes), read as written."""
    rows = [{"n": n, "x": n / 3, "s": "é" * (i % 14)} for i, n in enumerate(EDGE_LONGS)]
    records = reference_avro_records(NUMBERS_SCHEMA, rows)
    ends = np.cumsum([len(record) for record in records])
    (tiny,) = reference_avro_records(record_schema(n="long"), [{"n": -3}])

    read, read_ends = read_avro_records(b"".join(records), ends - [len(r) for r in records], log_schema(NUMBERS_SCHEMA))
    last, last_end = read_avro_records(records[-1], np.array([0]), log_schema(NUMBERS_SCHEMA))
    small, small_end = read_avro_records(tiny, np.array([0]), log_schema(record_schema(n="long")))

    assert read.to_pylist() == rows and read_ends.tolist() == ends.tolist()
    assert last.to_pylist() == rows[-1:] and last_end.tolist() == [len(records[-1])]
    assert small.to_pylist() == [{"n": -3}] and small_end.tolist() == [len(tiny)]


@pytest.mark.parametrize("cut", [1, 3, 9, 15])
def test_avro_record_cut_short_is_a_format_error(cut):
    """A record whose string, double or varint runs past the content's end is not read from the
    bytes after it (zeros, or nothing): it is a FormatError."""
    record = reference_avro_records(NUMBERS_SCHEMA, [{"n": -(2**62), "x": 0.5, "s": "abcd"}])[0]
    with pytest.raises(FormatError, match="runs past the"):
        read_avro_records(record[:-cut], np.array([0]), log_schema(NUMBERS_SCHEMA))


@pytest.mark.parametrize("fmt", ["avro", "parquet"])
def test_empty_data_block_round_trip(fmt):
    table = rich_table(0)
    (back,) = parse_log_bytes(encode_block(DataBlock(table, header("t", RICH_SCHEMA), DATA_BLOCK_TYPES[fmt])))
    assert isinstance(back, DataBlock) and back.records.num_rows == 0
    assert back.records.schema.names == table.schema.names


def test_create_makes_the_headers_hudi_writes():
    schema_json = avro_schema_json(TRIPS, "t", with_meta_fields=True)
    data = DataBlock.create(pa.table({}), "20250101000000000", schema_json, "parquet")
    assert data.header == {HeaderKey.INSTANT_TIME: "20250101000000000", HeaderKey.SCHEMA: schema_json}
    assert data.block_type == BlockType.PARQUET_DATA and data.instant == "20250101000000000"
    deletes = DeleteBlock.create(["k"], ["p"], instant="20250101000000000")
    assert deletes.header == {HeaderKey.INSTANT_TIME: "20250101000000000"}
    assert (
        DeleteBlock.create(["k"], ["p"], [1], instant="1", schema_json=schema_json).header[HeaderKey.SCHEMA]
        == schema_json
    )


def test_data_block_takes_columns_by_name_and_casts_to_the_block_schema():
    hdr = header("v6_trips_8i1u", TRIPS)
    records = with_meta(
        pa.table(
            {
                "uuid": ["k"],
                "city": ["c"],
                "ts": pa.array([5], pa.int32()),
                "rider": ["r"],
                "driver": ["d"],
                "fare": [1.0],
            }
        ),
        UPDATE_INSTANT,
        PARTITION,
        "f-0",
    ).append_column("extra", pa.array([1]))
    (back,) = parse_log_bytes(encode_block(DataBlock(records, hdr)))
    assert back.records.column_names == [*META_FIELDS, *TRIPS.names]
    assert back.records["ts"].type == pa.int64() and back.records["ts"].to_pylist() == [5]


def test_data_block_needs_its_columns_and_a_schema():
    hdr = header("v6_trips_8i1u", TRIPS)
    with pytest.raises(ValueError, match="lack columns"):
        encode_block(DataBlock(pa.table({"uuid": ["k"]}), hdr))
    with pytest.raises(ValueError, match="SCHEMA"):
        encode_block(DataBlock(pa.table({"uuid": ["k"]}), {HeaderKey.INSTANT_TIME: UPDATE_INSTANT}))
    with pytest.raises(ValueError, match="a data block is Avro or Parquet"):
        DataBlock(pa.table({"uuid": ["k"]}), hdr, BlockType.DELETE)


# Hudi 0.14/0.15's HoodieDeleteRecordList.avsc (HUDI-5760) and its wrapper records, written out
# here as the reference the delete block payload is checked against.
JAVA_NS = "org.apache.hudi.avro.model"
JAVA_WRAPPERS = [
    ("BooleanWrapper", "boolean", pa.bool_()),
    ("IntWrapper", "int", pa.int32()),
    ("LongWrapper", "long", pa.int64()),
    ("FloatWrapper", "float", pa.float32()),
    ("DoubleWrapper", "double", pa.float64()),
    ("BytesWrapper", "bytes", pa.binary()),
    ("StringWrapper", "string", pa.string()),
    ("DateWrapper", "int", pa.date32()),  # Java fills it with LocalDate#toEpochDay
    (
        "DecimalWrapper",
        {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15},
        pa.decimal128(30, 15),
    ),
    ("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}, pa.time64("us")),
    ("TimestampMicrosWrapper", "long", pa.timestamp("us", tz="UTC")),  # filled with epoch micros
]
JAVA_WRAPPER_OF = {arrow: name for name, _, arrow in JAVA_WRAPPERS}
JAVA_DELETE_RECORD_LIST = fastavro.parse_schema(
    {
        "type": "record",
        "name": "HoodieDeleteRecordList",
        "namespace": JAVA_NS,
        "fields": [
            {
                "name": "deleteRecordList",
                "type": {
                    "type": "array",
                    "items": {
                        "name": "HoodieDeleteRecord",
                        "type": "record",
                        "fields": [
                            {"name": "recordKey", "type": ["null", "string"], "default": None},
                            {"name": "partitionPath", "type": ["null", "string"], "default": None},
                            {
                                "name": "orderingVal",
                                "type": ["null"]
                                + [
                                    {
                                        "type": "record",
                                        "name": name,
                                        "namespace": JAVA_NS,
                                        "fields": [{"name": "value", "type": avro}],
                                    }
                                    for name, avro, _ in JAVA_WRAPPERS
                                ],
                                "default": None,
                            },
                        ],
                    },
                },
            }
        ],
    }
)


@pytest.mark.parametrize(
    "ordering",
    [
        None,
        pa.array([1, None, -(2**40)], pa.int64()),
        pa.array([1, 2, 3], pa.int32()),
        pa.array([True, False, None]),
        pa.array([1.5, -2.0, 0.0], pa.float32()),
        pa.array([1.5, -2.0, None], pa.float64()),
        pa.array(["b", "a", None]),
        pa.array([b"\x00", b"", None]),
        pa.array([dt.date(2024, 1, 1), dt.date(1960, 5, 5), None]),
        pa.array([Decimal("1.5"), Decimal("-123456789012345.123456789012345"), None], pa.decimal128(30, 15)),
        pa.array([dt.time(1, 2, 3, 4), None, dt.time(0)], pa.time64("us")),
        pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 5, tzinfo=dt.UTC), None, None], pa.timestamp("us", tz="UTC")),
    ],
)
def test_delete_block_round_trip_and_hudi_wire_format(ordering):
    keys, paths = ["a", "b", None], [PARTITION, "city=x", PARTITION]
    block = DeleteBlock(keys, paths, ordering, header("t", TRIPS))
    encoded = encode_block(block)
    (back,) = parse_log_bytes(encoded)
    assert isinstance(back, DeleteBlock)
    assert back.records.to_pylist() == block.records.to_pylist()
    # The payload is Hudi's HoodieDeleteRecordList, as a reference Avro encoder writes it.
    values = block.records["ordering_value"]
    name = JAVA_WRAPPER_OF[values.type]
    if name in ("DateWrapper", "TimestampMicrosWrapper"):
        values = values.cast(pa.int32() if name == "DateWrapper" else pa.int64())
    items = [
        {"recordKey": k, "partitionPath": p, "orderingVal": None if v is None else (f"{JAVA_NS}.{name}", {"value": v})}
        for k, p, v in zip(keys, paths, values.to_pylist())
    ]
    payload = io.BytesIO()
    fastavro.schemaless_writer(payload, JAVA_DELETE_RECORD_LIST, {"deleteRecordList": items})
    content = struct.pack(">ii", 3, len(payload.getvalue())) + payload.getvalue()
    assert content in encoded


def test_empty_delete_block_round_trip():
    (back,) = parse_log_bytes(encode_block(DeleteBlock([], [], None, header("t", TRIPS))))
    assert isinstance(back, DeleteBlock) and back.records.num_rows == 0


def test_delete_block_columns_must_match():
    with pytest.raises(ValueError, match="differ in length"):
        DeleteBlock(["a", "b"], ["p"], None, header("t", TRIPS))


def test_rollback_command_block_round_trip():
    block = CommandBlock.rollback(instant="20250101000000001", target_instant="20250101000000000")
    (back,) = parse_log_bytes(encode_block(block))
    assert isinstance(back, CommandBlock)
    assert back.command_type == CommandType.ROLLBACK
    assert back.target_instant == "20250101000000000" and back.instant == "20250101000000001"
    assert list(back.header) == [HeaderKey.INSTANT_TIME, HeaderKey.TARGET_INSTANT_TIME, HeaderKey.COMMAND_BLOCK_TYPE]


def test_write_log_file_creates_a_new_file_and_never_appends(tmp_path):
    storage = Storage(str(tmp_path))
    blocks = [CommandBlock.rollback("20250101000000001", "20250101000000000")]
    write_log_file(storage, "p/.f_1.log.1_0-1-1", blocks)
    with pytest.raises(FileExistsError):
        write_log_file(storage, "p/.f_1.log.1_0-1-1", blocks)
    assert [type(b) for b in read_log_file(storage, "p/.f_1.log.1_0-1-1")] == [CommandBlock]
    with pytest.raises(TypeError):
        encode_block(CorruptBlock(0, b"", "not writable"))


# ---------------------------------------------------------------------------------------------
# Torn and damaged files


def three_blocks() -> list:
    trips = pa.table(
        {
            "ts": [1, 2],
            "uuid": ["a", "b"],
            "rider": ["r", "s"],
            "driver": ["d", "e"],
            "fare": [1.0, 2.0],
            "city": ["c", "c"],
        }
    )
    hdr = header("v6_trips_8i1u", TRIPS)
    return [
        DataBlock(with_meta(trips, UPDATE_INSTANT, PARTITION, "f-0"), hdr),
        DeleteBlock(["x"], [PARTITION], pa.array([7], pa.int64()), hdr),
        DataBlock(with_meta(trips, UPDATE_INSTANT, PARTITION, "f-0"), hdr, BlockType.PARQUET_DATA),
    ]


def same_block(a, b) -> bool:
    return type(a) is type(b) and encode_block(a) == encode_block(b)


def test_truncated_file_keeps_its_complete_blocks_and_never_raises(tmp_path):
    blocks = three_blocks()
    encoded = [encode_block(b) for b in blocks]
    data = b"".join(encoded)
    starts = [sum(len(e) for e in encoded[:i]) for i in range(len(encoded))]
    cuts = set()
    for start, block in zip(starts, encoded):
        cuts |= {
            start + k
            for k in (
                0,
                1,
                3,
                5,
                6,
                10,
                13,
                14,
                20,
                30,
                len(block) // 2,
                len(block) - 9,
                len(block) - 8,
                len(block) - 1,
            )
        }
    cuts |= {len(data)}
    storage = Storage(str(tmp_path))
    for cut in sorted(c for c in cuts if 0 <= c <= len(data)):
        name = f"cut-{cut}.log"
        storage.create(name, data[:cut])
        got = read_log_file(storage, name)
        whole = sum(1 for s, e in zip(starts, encoded) if s + len(e) <= cut)
        assert all(same_block(g, b) for g, b in zip(got[:whole], blocks)), cut
        torn = got[whole:]
        assert len(torn) == (0 if cut in starts or cut == len(data) else 1), cut
        assert all(isinstance(b, CorruptBlock) and b.data == data[b.offset : cut] for b in torn), cut


def test_damaged_block_in_the_middle_is_skipped_and_later_blocks_are_kept():
    blocks = three_blocks()
    encoded = [encode_block(b) for b in blocks]
    second = len(encoded[0])

    def read(damaged_second: bytes) -> list:
        return list(parse_log_bytes(encoded[0] + damaged_second + encoded[2]))

    # Its size field lies: the framing check fails and the scan resyncs at the next magic.
    wrong_size = bytearray(encoded[1])
    wrong_size[6:14] = struct.pack(">q", 99999)
    got = read(bytes(wrong_size))
    assert [type(b) for b in got] == [DataBlock, CorruptBlock, DataBlock]
    assert got[1].offset == second and got[1].data == bytes(wrong_size)
    assert same_block(got[2], blocks[2])

    # Its framing holds but its content is garbage: undecodable, so corrupt.
    garbage = bytearray(encoded[1])
    garbage[-60:-20] = b"\xff" * 40
    got = read(bytes(garbage))
    assert [type(b) for b in got] == [DataBlock, CorruptBlock, DataBlock]
    assert "undecodable" in got[1].reason

    # Garbage before the first magic.
    got = list(parse_log_bytes(b"junk" + b"".join(encoded)))
    assert [type(b) for b in got] == [CorruptBlock, DataBlock, DeleteBlock, DataBlock]


def files_of_small_blocks(
    tmp_path: Path, damaged: int | None = None, mixed_delete: int | None = None
) -> tuple[Storage, list[str]]:
    """Four log files of small Avro blocks in two schemas (one with a column more), delete blocks
    of different keys and ordering types and a Parquet block between them; with `damaged`, that
    file's first block holds garbage records; with `mixed_delete`, that file's delete block mixes
    ordering value types no column can hold."""
    trips = three_blocks()[0].records
    wider = trips.append_column("tip", pa.array([0.5, None], pa.float64()))
    wider_header = header("v6_trips_8i1u", TRIPS.append(pa.field("tip", pa.float64())))
    hdr = header("v6_trips_8i1u", TRIPS)
    deletes = [
        DeleteBlock(["x"], [PARTITION], pa.array([7], pa.int64()), hdr),
        DeleteBlock(["y", "z"], [PARTITION, "city=x"], None, hdr),  # Hudi's default ordering value
        DeleteBlock(
            ["w"], [PARTITION], pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", "UTC")), hdr
        ),
        DeleteBlock(["v", "u"], [PARTITION, PARTITION], pa.array([None, 9], pa.int64()), hdr),
    ]
    storage, names = Storage(str(tmp_path)), []
    for i in range(4):
        blocks = [
            DataBlock(trips.slice(i % 2, 1 + i % 2), hdr),
            deletes[i],
            three_blocks()[2],
            DataBlock(wider, wider_header),
        ]
        encoded = [bytearray(encode_block(b)) for b in blocks]
        if i == damaged:
            encoded[0][-60:-20] = b"\xff" * 40
        if i == mixed_delete:
            encoded[1] = bytearray(delete_block_of_wrappers([("StringWrapper", "a"), ("IntWrapper", 1)], hdr))
        names.append(f"{i}.log")
        storage.create(names[-1], b"".join(encoded))
    return storage, names


def delete_block_of_wrappers(values: list[tuple[str, object]], hdr: dict[HeaderKey, str]) -> bytes:
    """A delete block whose ordering values come in the given Java wrappers, one key each, framed
    as our writer frames an empty delete block with the same header."""
    items = [
        {"recordKey": f"k{i}", "partitionPath": PARTITION, "orderingVal": (f"{JAVA_NS}.{name}", {"value": value})}
        for i, (name, value) in enumerate(values)
    ]
    payload = io.BytesIO()
    fastavro.schemaless_writer(payload, JAVA_DELETE_RECORD_LIST, {"deleteRecordList": items})
    content = struct.pack(">ii", 3, len(payload.getvalue())) + payload.getvalue()
    empty = encode_block(DeleteBlock([], [], None, hdr))
    empty_content = struct.pack(">ii", 3, 1) + b"\x00"
    framed = empty.replace(
        struct.pack(">q", len(empty_content)) + empty_content, struct.pack(">q", len(content)) + content
    )
    size = len(framed) - len(MAGIC) - 8
    return MAGIC + struct.pack(">q", size) + framed[len(MAGIC) + 8 : -8] + struct.pack(">q", len(MAGIC) + size)


def test_log_files_read_together_give_each_file_the_blocks_it_gives_alone(tmp_path):
    storage, names = files_of_small_blocks(tmp_path)
    together = read_log_files(storage, names)
    for name, blocks in zip(names, together):
        alone = read_log_file(storage, name)
        assert [type(b) for b in blocks] == [DataBlock, DeleteBlock, DataBlock, DataBlock]
        assert all(same_block(a, b) for a, b in zip(blocks, alone)), name
        assert all(a.records.equals(b.records) for a, b in zip(blocks, alone))
    assert [b.records.to_pylist() for b in [blocks[1] for blocks in together]] == [
        [{"record_key": "x", "partition_path": PARTITION, "ordering_value": 7}],
        [
            {"record_key": "y", "partition_path": PARTITION, "ordering_value": 0},
            {"record_key": "z", "partition_path": "city=x", "ordering_value": 0},
        ],
        [{"record_key": "w", "partition_path": PARTITION, "ordering_value": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}],
        [
            {"record_key": "v", "partition_path": PARTITION, "ordering_value": None},
            {"record_key": "u", "partition_path": PARTITION, "ordering_value": 9},
        ],
    ]


def test_a_block_that_does_not_decode_among_files_read_together_is_corrupt_and_the_rest_are_read(tmp_path):
    storage, names = files_of_small_blocks(tmp_path, damaged=2, mixed_delete=3)
    together = read_log_files(storage, names)
    assert [type(b) for b in together[2]] == [CorruptBlock, DeleteBlock, DataBlock, DataBlock]
    assert "undecodable" in together[2][0].reason
    assert together[2][0].data == storage.read_bytes(names[2])[: len(together[2][0].data)]
    assert [type(b) for b in together[3]] == [DataBlock, CorruptBlock, DataBlock, DataBlock]
    assert "mixes ordering value types" in together[3][1].reason
    intact, _ = files_of_small_blocks(tmp_path / "intact")
    for name, blocks in zip(names, together):
        expected = read_log_file(intact, name)
        kept = [(b, e) for b, e in zip(blocks, expected) if not isinstance(b, CorruptBlock)]
        assert len(kept) == (3 if name in names[2:] else 4)
        assert all(same_block(b, e) for b, e in kept), name


def test_unsupported_or_unknown_blocks_are_corrupt_not_errors():
    block = bytearray(encode_block(three_blocks()[1]))
    block[18:22] = struct.pack(">i", BlockType.HFILE_DATA)
    (got,) = parse_log_bytes(bytes(block))
    assert isinstance(got, CorruptBlock) and "HFILE_DATA" in got.reason
    block[18:22] = struct.pack(">i", 42)
    (got,) = parse_log_bytes(bytes(block))
    assert isinstance(got, CorruptBlock)


# ---------------------------------------------------------------------------------------------
# Conformance: hudi-rs (the `hudi` package) reads what we write


def hudi_rs_rows(storage: Storage) -> dict[str, dict]:
    from hudi import HudiTableBuilder

    table = pa.Table.from_batches(HudiTableBuilder.from_base_uri(storage.base_uri).build().read())
    return {row["uuid"]: row for row in table.to_pylist()}


def replace_sample_log(tmp_path: Path, blocks) -> tuple[Storage, dict[str, dict]]:
    """v6_trips_8i1u with its log file (deltacommit UPDATE_INSTANT) replaced by ours; the commit
    metadata names the same path, so nothing else changes. Returns the rows before."""
    storage = copy_sample("v6_trips_8i1u", tmp_path)
    before = hudi_rs_rows(storage)
    (hudi_block,) = read_log_file(storage, UPDATE_LOG)
    storage.delete(UPDATE_LOG)
    write_log_file(storage, UPDATE_LOG, blocks(hudi_block))
    return storage, before


def updates(hudi_block: DataBlock) -> pa.Table:
    """The sample's update changed again, plus a new key in the same file group."""
    (row,) = hudi_block.records.to_pylist()
    changed = {**row, "rider": "rider-UPD", "fare": 99.5, "ts": row["ts"] + 1000}
    new = {**row, "uuid": "new-key", "_hoodie_record_key": "new-key", "_hoodie_commit_seqno": f"{UPDATE_INSTANT}_0_2"}
    return pa.Table.from_pylist([changed, new], schema=hudi_block.records.schema)


@pytest.mark.parametrize("fmt", ["avro", "parquet"])
def test_hudi_rs_reads_our_data_block(tmp_path, fmt):
    storage, before = replace_sample_log(
        tmp_path, lambda hudi: [DataBlock(updates(hudi), dict(hudi.header), DATA_BLOCK_TYPES[fmt])]
    )
    rows = hudi_rs_rows(storage)
    assert set(rows) == set(before) | {"new-key"}
    updated = rows["9909a8b1-2d15-4d3d-8ec9-efc48c536a00"]
    assert (updated["rider"], updated["fare"], updated["ts"]) == ("rider-UPD", 99.5, 1695046463179)
    assert rows["new-key"]["_hoodie_commit_time"] == UPDATE_INSTANT
    assert all(rows[k] == before[k] for k in before if k != "9909a8b1-2d15-4d3d-8ec9-efc48c536a00")


DELETED = ["e96c4396-3fad-413a-a942-4cb36106d721", "334e26e9-8355-45cc-97c6-c31daf0df330"]


@pytest.mark.parametrize(
    "ordering, with_schema",
    [
        (None, True),
        (pa.array([1695091554788, 1695159649087], pa.int64()), True),
        (pa.array([None, None], pa.int64()), True),
        (pa.array([1695091554788, 1695159649087], pa.int64()), False),
    ],
    ids=["default", "long", "null", "long-no-schema-header"],
)
def test_hudi_rs_reads_our_delete_block(tmp_path, ordering, with_schema):
    storage, before = replace_sample_log(
        tmp_path,
        lambda hudi: [
            DeleteBlock.create(
                DELETED,
                [PARTITION] * 2,
                ordering,
                instant=UPDATE_INSTANT,
                schema_json=hudi.header[HeaderKey.SCHEMA] if with_schema else None,
            )
        ],
    )
    rows = hudi_rs_rows(storage)
    assert set(rows) == set(before) - set(DELETED)


def test_hudi_rs_reads_a_file_of_several_blocks(tmp_path):
    storage, before = replace_sample_log(
        tmp_path,
        lambda hudi: [
            DataBlock(updates(hudi), dict(hudi.header)),
            DeleteBlock(DELETED[:1], [PARTITION], None, dict(hudi.header)),
            DataBlock(updates(hudi).slice(1), dict(hudi.header), BlockType.PARQUET_DATA),
        ],
    )
    rows = hudi_rs_rows(storage)
    assert set(rows) == (set(before) | {"new-key"}) - set(DELETED[:1])
    assert rows["9909a8b1-2d15-4d3d-8ec9-efc48c536a00"]["rider"] == "rider-UPD"


CONFORMANCE_EXTRA = [
    "qty",
    "ok",
    "ratio",
    "blob",
    "day",
    "event_ms",
    "event_us",
    "amount",
    "wide",
    "addr",
    "tags",
    "lines",
    "attrs",
]


@pytest.mark.parametrize("fmt", ["avro", "parquet"])
def test_hudi_rs_reads_logical_and_nested_types_from_a_log_only_file_group(tmp_path, fmt):
    """A new file group made of one log file (as bucket-index inserts are), in a table whose
    commit schema has gained columns of every logical and nested kind."""
    storage = copy_sample("v6_trips_8i1u", tmp_path)
    rich = pa.Table.from_pylist(rich_rows(40), schema=RICH_SCHEMA).select(CONFORMANCE_EXTRA)
    trips = pa.table(
        {
            "ts": pa.array(range(40), pa.int64()),
            "uuid": [f"rich-{i}" for i in range(40)],
            "rider": ["r"] * 40,
            "driver": ["d"] * 40,
            "fare": [1.0] * 40,
            "city": ["san_francisco"] * 40,
        }
    )
    records = pa.Table.from_arrays(trips.columns + rich.columns, names=trips.column_names + rich.column_names)
    file_id = "aaaaaaaa-1111-2222-3333-444444444444-0"
    block = DataBlock(
        with_meta(records, UPDATE_INSTANT, PARTITION, file_id),
        header("v6_trips_8i1u", records.schema),
        DATA_BLOCK_TYPES[fmt],
    )
    write_log_file(storage, f"{PARTITION}/.{file_id}_{UPDATE_INSTANT}.log.1_0-1-1", [block])
    commit_path = f".hoodie/{UPDATE_INSTANT}.deltacommit"
    commit = json.loads(storage.read_bytes(commit_path))
    commit["extraMetadata"]["schema"] = avro_schema_json(records.schema, "v6_trips_8i1u")
    storage.write_bytes(commit_path, json.dumps(commit).encode())

    rows = hudi_rs_rows(storage)
    expected = {row["uuid"]: row for row in records.to_pylist()}
    assert {k: {c: rows[k][c] for c in records.column_names} for k in expected} == expected
    assert rows["9909a8b1-2d15-4d3d-8ec9-efc48c536a00"]["amount"] is None  # older rows lack the new columns
    assert len(rows) == 8 + 40


def test_hudi_rs_honours_our_rollback_command_block(tmp_path):
    """A rollback block discards the blocks of its target instant (here the sample's update)."""
    storage, before = replace_sample_log(
        tmp_path,
        lambda hudi: [
            DataBlock(updates(hudi), dict(hudi.header)),
            CommandBlock.rollback(instant=UPDATE_INSTANT, target_instant=UPDATE_INSTANT),
        ],
    )
    rows = hudi_rs_rows(storage)
    assert set(rows) == set(before)
    rolled_back = rows["9909a8b1-2d15-4d3d-8ec9-efc48c536a00"]
    assert rolled_back["rider"] == "rider-D" and rolled_back["_hoodie_commit_time"] != UPDATE_INSTANT
