"""Debezium's change events and Kafka tombstones decoded into rows and deletes
(streamer/decode/debezium.py, connect_json.py and the record decoder), from messages shaped as
Debezium 3.6's PostgreSQL and MySQL connectors write them: Kafka Connect's JSON with and without
its schemas, and Avro in Confluent's wire format through a real schema registry process. The
whole path against PostgreSQL and Kafka Connect is tests/e2e/test_debezium.py."""

from __future__ import annotations

import io
import json
import uuid

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from streamer.config.choices import EnvelopeField, TombstonePolicy
from streamer.decode.avro import parse_avro, read_avro, read_columns
from streamer.decode.debezium import BINLOG_FILE_FACTOR, EnvelopeColumns, envelope_type
from streamer.decode.decoded import decode_each
from streamer.decode.evolution import SchemaEvolution
from streamer.decode.formats import FormatSpec
from streamer.decode.record_decoder import Deletes, RecordDecoder
from streamer.decode.registry import CONFLUENT_HEADER_SIZE, SchemaRegistryClient, confluent_frame
from streamer.errors import SchemaEvolutionError
from streamer.kafka.schema import ARROW_SCHEMA_WITHOUT_HEADERS
from table.schema import arrow_schema_from_avro, to_avro_schema

pytestmark = pytest.mark.unit

ROW = pa.schema([("region", pa.string()), ("id", pa.int32()), ("name", pa.string()), ("visits", pa.int64())])
ROW_STRUCT = pa.struct(list(ROW))
KEY = pa.schema([("region", pa.string()), ("id", pa.int32())])
COLUMNS = EnvelopeColumns(
    ((EnvelopeField.POSITION, "position"), (EnvelopeField.OP, "op"), (EnvelopeField.SOURCE_TS_MS, "changed_at"))
)
CONNECT_TYPES = {pa.string(): "string", pa.int32(): "int32", pa.int64(): "int64"}


# -- messages as Debezium writes them -------------------------------------------------------------
def source(lsn: int | None = 1000, connector: str = "postgresql", **more) -> dict:
    fields = {
        "version": "3.6.1.Final",
        "connector": connector,
        "name": "pg",
        "ts_ms": 1_700_000_000_000,
        "snapshot": "false",
        "db": "shop",
        "sequence": None,
        "schema": "public",
        "table": "accounts",
        "txId": 7,
        "lsn": lsn,
        "xmin": None,
    }
    fields.update(more)
    return fields


def event(op: str, before: dict | None = None, after: dict | None = None, **source_fields) -> dict:
    return {
        "before": before,
        "after": after,
        "source": source(**source_fields),
        "transaction": None,
        "op": op,
        "ts_ms": 1_700_000_000_500,
    }


def row(region: str = "emea", row_id: int = 1, name: str | None = "a", visits: int | None = 1, **more) -> dict:
    return {"region": region, "id": row_id, "name": name, "visits": visits, **more}


def connect_struct(schema: pa.Schema, name: str, optional_after: set[str] = frozenset(), **extra_types) -> dict:
    fields = [{"type": CONNECT_TYPES[f.type], "optional": f.name not in KEY.names, "field": f.name} for f in schema]
    fields += [{"type": t, "optional": f in optional_after, "field": f} for f, t in extra_types.items()]
    return {"type": "struct", "fields": fields, "optional": True, "name": name}


def with_schema(payload: dict | None, value_schema: dict) -> dict:
    """Kafka Connect's JSON with `schemas.enable`: the Envelope's Connect schema beside the payload."""
    envelope = {
        "type": "struct",
        "name": "pg.public.accounts.Envelope",
        "optional": False,
        "fields": [
            dict(value_schema, field="before"),
            dict(value_schema, field="after"),
            {
                "type": "struct",
                "optional": False,
                "field": "source",
                "name": "io.debezium.connector.postgresql.Source",
                "fields": [{"type": "int64", "optional": True, "field": "lsn"}],
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    return {"schema": envelope, "payload": payload}


def kafka_batch(values: list, keys: list) -> pa.RecordBatch:
    encode = lambda m: None if m is None else (m if isinstance(m, bytes) else json.dumps(m).encode())  # noqa: E731
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([encode(k) for k in keys], pa.binary()),
            pa.array([encode(v) for v in values], pa.binary()),
            pa.array(["pg.public.accounts"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=ARROW_SCHEMA_WITHOUT_HEADERS,
    )


def debezium_decoder(
    partition_by: tuple[str, ...] = ("region",),
    tombstones=TombstonePolicy.DELETE,
    key: FormatSpec | None = None,
    row: pa.Schema = ROW,
) -> RecordDecoder:
    value = FormatSpec("json", row, json.dumps(to_avro_schema(row, "accounts")))
    needed = (*KEY.names, *(p for p in partition_by if p not in KEY.names))
    return RecordDecoder(
        value,
        key or FormatSpec("json", KEY),
        required_fields=(*KEY.names, "position"),
        deletes=Deletes(tombstones, COLUMNS, needed, "position"),
    )


def decode(decoder: RecordDecoder, values: list, keys: list) -> list[dict]:
    out = decoder.decode(kafka_batch(values, keys))
    assert out.schema == decoder.output_schema
    return out.to_pylist()


def written(rows: list[dict]) -> list[tuple]:
    """What each record makes: ('upsert'|'delete', key, name, position), ('skip', kind) or ('bad', reason)."""
    made = []
    for r in rows:
        if r["_error"] is not None:
            made.append(("bad", r["_error"]))
        elif r["_skipped"] is not None:
            made.append(("skip", r["_skipped"]))
        else:
            made.append(("delete" if r["_delete"] else "upsert", (r["region"], r["id"]), r["name"], r["position"]))
    return made


# -- the envelope ---------------------------------------------------------------------------------
def changes_of_one_row() -> tuple[list, list]:
    key = {"region": "emea", "id": 1}
    values = [
        event("r", after=row(), lsn=100),
        event("u", before=None, after=row(name="b"), lsn=200),
        event("d", before={**key, "name": None, "visits": None}, lsn=300),
        None,
        event("c", after=row(name="c"), lsn=400),
    ]
    return values, [key] * len(values)


def test_creates_snapshot_reads_and_updates_upsert_after_and_a_delete_takes_the_key_of_before():
    values, keys = changes_of_one_row()
    rows = decode(debezium_decoder(), values, keys)
    assert written(rows) == [
        ("upsert", ("emea", 1), "a", 100),
        ("upsert", ("emea", 1), "b", 200),
        ("delete", ("emea", 1), None, 300),
        ("delete", ("emea", 1), None, 0),
        ("upsert", ("emea", 1), "c", 400),
    ]
    assert [r["op"] for r in rows] == ["r", "u", "d", None, "c"]
    assert rows[0]["changed_at"] == 1_700_000_000_000


def test_json_with_and_without_connect_schemas_decode_alike():
    values, keys = changes_of_one_row()
    value_schema = connect_struct(ROW, "pg.public.accounts.Value")
    key_schema = {
        "type": "struct",
        "name": "pg.public.accounts.Key",
        "optional": False,
        "fields": [
            {"type": "string", "optional": False, "field": "region"},
            {"type": "int32", "optional": False, "field": "id"},
        ],
    }
    enveloped = [None if v is None else with_schema(v, value_schema) for v in values]
    keyed = [{"schema": key_schema, "payload": k} for k in keys]
    assert decode(debezium_decoder(), enveloped, keyed) == decode(debezium_decoder(), values, keys)


def test_a_primary_key_update_ends_with_only_the_new_key():
    old, new = {"region": "emea", "id": 1}, {"region": "apac", "id": 9}
    values = [
        event("c", after=row(), lsn=10),
        event("d", before={**old, "name": None, "visits": None}, lsn=20),
        None,
        event("c", after=row("apac", 9, "moved"), lsn=20),
    ]
    rows = decode(debezium_decoder(), values, [old, old, old, new])
    assert written(rows) == [
        ("upsert", ("emea", 1), "a", 10),
        ("delete", ("emea", 1), None, 20),
        ("delete", ("emea", 1), None, 0),
        ("upsert", ("apac", 9), "moved", 20),
    ]


def test_a_delete_without_before_takes_its_key_from_the_kafka_key():
    rows = decode(debezium_decoder(), [event("d", before=None, lsn=50)], [{"region": "amer", "id": 4}])
    assert written(rows) == [("delete", ("amer", 4), None, 50)]


def test_truncates_messages_heartbeats_schema_changes_and_transaction_markers_write_nothing_and_say_what_they_are():
    values = [
        event("t", lsn=5),
        event("m", lsn=6),
        {"ts_ms": 1_700_000_000_000},
        {
            "source": source(connector="mysql", lsn=None),
            "databaseName": "shop",
            "ddl": "ALTER TABLE t ADD c INT",
            "tableChanges": [],
        },
        {"status": "BEGIN", "id": "571:53195829", "event_count": None, "ts_ms": 1},
        event("c", after=row(), lsn=7),
    ]
    rows = decode(debezium_decoder(), values, [{"serverName": "pg"}] * 5 + [{"region": "emea", "id": 1}])
    assert written(rows) == [
        ("skip", "truncate"),
        ("skip", "message"),
        ("skip", "heartbeat"),
        ("skip", "schema_change"),
        ("skip", "transaction"),
        ("upsert", ("emea", 1), "a", 7),
    ]


def test_an_unknown_op_a_change_without_after_or_a_record_that_is_no_change_event_is_a_bad_record():
    values = [event("x", after=row()), event("c", after=None), {"hello": "world"}]
    rows = decode(debezium_decoder(), values, [{"region": "emea", "id": 1}] * 3)
    assert written(rows) == [
        ("bad", "unknown Debezium op 'x' (expected c, r, u, d, t or m)"),
        ("bad", "Debezium op 'c' without an `after` row"),
        ("bad", "not a Debezium change event: it has no op"),
    ]


def test_a_delete_whose_before_has_a_field_of_the_wrong_type_is_a_bad_record_naming_it():
    key = {"region": "emea", "id": 1}
    values = [
        event("d", before={**key, "name": None, "visits": "many"}, lsn=9),
        event("c", after=row(name="b"), lsn=10),
    ]
    rows = decode(debezium_decoder(), values, [key] * 2)
    assert written(rows) == [
        ("bad", "field 'before.visits': expected int64, got \"many\""),
        ("upsert", ("emea", 1), "b", 10),
    ]


def test_a_bad_record_inside_connects_schema_wrapper_is_told_as_without_it_and_its_neighbours_decode():
    key = {"region": "emea", "id": 1}
    values = [
        event("c", after=row(name="a"), lsn=8),
        event("d", before={**key, "name": None, "visits": "many"}, lsn=9),
        event("c", after=row(name="b"), lsn=10),
    ]
    schema = connect_struct(ROW, "pg.public.accounts.Value")
    wrapped = [json.dumps(with_schema(v, schema), separators=(",", ":")).encode() for v in values]  # cut at payload
    made = written(decode(debezium_decoder(), wrapped, [key] * 3))
    assert made == written(decode(debezium_decoder(), values, [key] * 3))
    assert made[1:] == [
        ("bad", "field 'before.visits': expected int64, got \"many\""),
        ("upsert", ("emea", 1), "b", 10),
    ]


def test_the_log_position_is_the_lsn_for_postgresql_binlog_file_and_position_for_mysql_else_ts_ms():
    mysql = event("c", after=row(), connector="mysql", lsn=None, file="mysql-bin.000003", pos=154)
    later_file = event("u", after=row(), connector="mysql", lsn=None, file="mysql-bin.000004", pos=4)
    other = event("c", after=row(), connector="sqlserver", lsn=None)
    rows = decode(
        debezium_decoder(),
        [event("c", after=row(), lsn=22046592), mysql, later_file, other],
        [{"region": "emea", "id": 1}] * 4,
    )
    assert [r["position"] for r in rows] == [
        22046592,
        3 * BINLOG_FILE_FACTOR + 154,
        4 * BINLOG_FILE_FACTOR + 4,
        1_700_000_000_000,
    ]
    assert rows[1]["position"] < rows[2]["position"]


def test_every_envelope_column_reads_alike_from_changes_read_in_part_and_read_whole():
    """PostgreSQL's upserts are read for the columns kept alone; its deletes, MySQL's changes and
    messages without an op are read again whole: each column has its value either way."""
    columns = EnvelopeColumns(
        (
            (EnvelopeField.POSITION, "position"),
            (EnvelopeField.OP, "op"),
            (EnvelopeField.SOURCE_TS_MS, "changed_at"),
            (EnvelopeField.TS_MS, "sent_at"),
        )
    )
    decoder = RecordDecoder(
        FormatSpec("json", ROW, json.dumps(to_avro_schema(ROW, "accounts"))),
        FormatSpec("json", KEY),
        required_fields=(*KEY.names, "position"),
        deletes=Deletes(TombstonePolicy.DELETE, columns, ("region", "id"), "position"),
    )
    key = {"region": "emea", "id": 1}
    values = [
        dict(event("u", after=row(name="pg"), lsn=10, ts_ms=1), ts_ms=11),
        dict(event("d", before={**key, "name": None, "visits": None}, lsn=20, ts_ms=2), ts_ms=12),
        dict(
            event("c", after=row(name="my"), connector="mysql", lsn=None, file="bin.000002", pos=30, ts_ms=3), ts_ms=13
        ),
        {"ts_ms": 14},
        dict(event("c", after=row(name="pg2"), lsn=40, ts_ms=4), ts_ms=15),
    ]
    rows = decode(decoder, values, [key] * len(values))
    kept = [
        (r["_delete"], r["_skipped"], r["name"], r["position"], r["op"], r["changed_at"], r["sent_at"]) for r in rows
    ]
    assert kept == [
        (False, None, "pg", 10, "u", 1, 11),
        (True, None, None, 20, "d", 2, 12),
        (False, None, "my", 2 * BINLOG_FILE_FACTOR + 30, "c", 3, 13),
        (False, "heartbeat", None, None, None, None, 14),
        (False, None, "pg2", 40, "c", 4, 15),
    ]
    assert [r["_error"] for r in rows] == [None] * len(values)


def test_changes_read_in_one_native_pass_decode_as_when_read_in_part_and_whole():
    """With the native decoder, a batch of changes of rows is read in one pass, `before` into
    `after`'s columns; a batch with any other message is read in part and whole. The same events
    give the same rows either way, with Connect's schemas and without."""
    key = {"region": "emea", "id": 1}
    changes = [
        event("c", after=row(name="new", visits=None), lsn=10),
        event("u", before=row(name="old"), after=row(name="full", visits=7), lsn=11),  # REPLICA IDENTITY FULL
        {**event("u", before=row(name="old"), lsn=12), "after": row(name="after first")},
        event("d", before={**key, "name": None, "visits": None}, lsn=13),
        event("d", before=None, lsn=14),
        None,
        event("u", before=row(name="old"), after=None, lsn=15),
        event("c", after=row("apac", 2, "binlog"), connector="mysql", lsn=None, file="bin.000002", pos=30),
        event("r", after=row("amer", 3, "sqlserver"), connector="sqlserver", lsn=None),
    ]
    heartbeat = {"ts_ms": 1}  # not a change of a row: the batch is read in part and whole
    schema = connect_struct(ROW, "pg.public.accounts.Value")
    for wrap in (lambda v: v, lambda v: None if v is None else with_schema(v, schema)):
        values = [wrap(v) for v in changes]
        decoder = debezium_decoder()
        in_place = decode(decoder, values, [key] * len(values))
        in_parts = decode(decoder, [*values, wrap(heartbeat)], [key] * (len(values) + 1))
        assert in_place == in_parts[:-1]
        read = [decoder._value.decode(kafka_batch(v, [key] * len(v)).column("value"))[0] for v in (values, [heartbeat])]
        assert [r.type.field("before").type for r in read] == [pa.int8(), ROW_STRUCT]  # the pass each batch took
    assert [r["name"] for r in in_place] == [
        "new",
        "full",
        "after first",
        None,
        None,
        None,
        None,
        "binlog",
        "sqlserver",
    ]
    assert [r["_delete"] for r in in_place] == [False, False, False, True, True, True, False, False, False]
    assert in_place[6]["_error"] == "Debezium op 'u' without an `after` row"
    assert [r["position"] for r in in_place[7:]] == [2 * BINLOG_FILE_FACTOR + 30, 1_700_000_000_000]


def test_a_delete_that_lacks_a_partition_field_is_a_bad_record_naming_it():
    decoder = debezium_decoder(partition_by=("name",))  # a column that is not part of the key
    rows = decode(
        decoder,
        [event("d", before={"region": "emea", "id": 1, "name": None, "visits": None})],
        [{"region": "emea", "id": 1}],
    )
    assert written(rows) == [
        (
            "bad",
            "a delete without field 'name': neither the change's `before` nor the "
            "Kafka key has it (PostgreSQL puts every column in `before` with ALTER TABLE "
            "... REPLICA IDENTITY FULL)",
        )
    ]


# -- tombstones -----------------------------------------------------------------------------------
def plain_decoder(tombstones: TombstonePolicy) -> RecordDecoder:
    return RecordDecoder(
        FormatSpec("json", pa.schema([("id", pa.string()), ("n", pa.int64()), ("v", pa.int64())])),
        FormatSpec("string", None),
        required_fields=("id", "v"),
        deletes=Deletes(tombstones, None, ("id",), "v"),
    )


def test_a_tombstone_of_a_plain_json_topic_deletes_its_key_when_the_table_asks():
    out = (
        plain_decoder(TombstonePolicy.DELETE)
        .decode(kafka_batch([{"id": "k1", "n": 1, "v": 5}, None, None], [b"k1", b"k1", None]))
        .to_pylist()
    )
    assert [(r["id"], r["_delete"], r["v"], r["_error"]) for r in out] == [
        ("k1", False, 5, None),
        ("k1", True, 0, None),
        (None, False, None, "a tombstone (null value) deletes its key, but its key is null or does not decode"),
    ]


def test_a_tombstone_is_skipped_or_a_bad_record_as_the_table_says():
    batch = kafka_batch([None], [b"k1"])
    [skipped] = plain_decoder(TombstonePolicy.SKIP).decode(batch).to_pylist()
    assert (skipped["_skipped"], skipped["_error"]) == ("tombstone", None)
    [bad] = plain_decoder(TombstonePolicy.BAD).decode(batch).to_pylist()
    assert bad["_error"] == "value is null"


# -- schema changes in Connect's JSON schemas -----------------------------------------------------
def test_a_nullable_column_added_in_the_database_defers_its_records_and_evolves_the_reader_schema():
    decoder = debezium_decoder()
    before = with_schema(event("u", after=row(), lsn=1), connect_struct(ROW, "pg.public.accounts.Value"))
    added = with_schema(
        event("u", after=row(tier="gold"), lsn=2),
        connect_struct(ROW, "pg.public.accounts.Value", optional_after={"tier"}, tier="string"),
    )
    out = decoder.decode(kafka_batch([before, added], [{"region": "emea", "id": 1}] * 2)).to_pylist()
    assert out[0]["_evolving_schema"] is None and out[0]["name"] == "a"
    schema_id = out[1]["_evolving_schema"]
    assert schema_id is not None and out[1]["_raw_value"] is not None

    reader = json.dumps(to_avro_schema(ROW, "accounts"))
    evolution = SchemaEvolution(
        "accounts",
        reader,
        decoder,
        lambda r: decoder.with_value(FormatSpec("json", arrow_schema_from_avro(r), r)),
        None,
        strict=True,
    )
    assert evolution.evolve({schema_id}, decoder.writer_schemas)
    assert "tier" in evolution.value_columns
    again = evolution.decoder.decode(kafka_batch([before, added], [{"region": "emea", "id": 1}] * 2)).to_pylist()
    assert [(r["tier"], r["_evolving_schema"], r["_error"]) for r in again] == [
        (None, None, None),
        ("gold", None, None),
    ]


def test_connect_json_as_the_converter_writes_it_tells_interleaved_schemas_apart():
    """Compact JSON, as JsonConverter writes it, is cut at its payload by schema text: schemas of
    the same length (`tier`, `tear`) interleaved in one batch evolve apart, the unchanged ones
    decode, and a record with spaces (which does not cut) reads alike."""
    decoder = debezium_decoder()
    base = connect_struct(ROW, "pg.public.accounts.Value")
    tier = connect_struct(ROW, "pg.public.accounts.Value", optional_after={"tier"}, tier="string")
    tear = connect_struct(ROW, "pg.public.accounts.Value", optional_after={"tear"}, tear="string")
    compact = lambda m: json.dumps(m, separators=(",", ":")).encode()  # noqa: E731
    values = [
        compact(with_schema(event("u", after=row(row_id=1), lsn=1), base)),
        compact(with_schema(event("u", after=row(row_id=2, tier="gold"), lsn=2), tier)),
        compact(with_schema(event("u", after=row(row_id=3, tear="drop"), lsn=3), tear)),
        compact(with_schema(event("u", after=row(row_id=4), lsn=4), base)),
        compact(with_schema(event("u", after=row(row_id=5, tier="lead"), lsn=5), tier)),
        json.dumps(with_schema(event("u", after=row(row_id=6, name="spaced"), lsn=6), base)).encode(),
    ]
    keys = [{"region": "emea", "id": i} for i in range(1, 7)]
    out = decoder.decode(kafka_batch(values, keys)).to_pylist()
    assert [(r["id"], r["name"], r["_error"]) for r in out if r["_evolving_schema"] is None] == [
        (1, "a", None),
        (4, "a", None),
        (6, "spaced", None),
    ]
    ids = [r["_evolving_schema"] for r in out]
    assert ids[1] is not None and ids[1] == ids[4] and ids[2] is not None and ids[2] != ids[1]
    assert {json.loads(decoder.writer_schemas[i])["fields"][-1]["name"] for i in (ids[1], ids[2])} == {"tier", "tear"}


def test_a_not_null_column_added_stops_the_table_naming_the_column_and_the_record():
    decoder = debezium_decoder()
    added = with_schema(
        event("u", after=row(tier="gold"), lsn=2), connect_struct(ROW, "pg.public.accounts.Value", tier="string")
    )
    [out] = decoder.decode(kafka_batch([added], [{"region": "emea", "id": 1}])).to_pylist()
    schema_id = out["_evolving_schema"]
    evolution = SchemaEvolution(
        "accounts", json.dumps(to_avro_schema(ROW, "accounts")), decoder, lambda r: decoder, None, strict=True
    )
    with pytest.raises(
        SchemaEvolutionError,
        match=r"accounts: the change at pg\.public\.accounts\[0\]@41 has a "
        r"row that adds field 'tier' \(string\) as required \(NOT NULL\)",
    ):
        evolution.evolve({schema_id}, decoder.writer_schemas, {schema_id: ("pg.public.accounts", 0, 41)})


def test_a_column_retyped_in_the_database_other_than_by_widening_stops_the_table():
    decoder = debezium_decoder()
    narrowed = connect_struct(ROW, "pg.public.accounts.Value")
    narrowed["fields"][3]["type"] = "int32"  # visits: bigint to int still reads into the long column
    narrowed["fields"][2]["type"] = "int32"  # name: text to int does not
    [out] = decoder.decode(
        kafka_batch([with_schema(event("u", after=row(name=None), lsn=2), narrowed)], [{"region": "emea", "id": 1}])
    ).to_pylist()
    evolution = SchemaEvolution(
        "accounts", json.dumps(to_avro_schema(ROW, "accounts")), decoder, lambda r: decoder, None, strict=True
    )
    with pytest.raises(
        SchemaEvolutionError,
        match=r"changes field 'name' from null\|string to null\|int; a column's "
        r"type can only widen",
    ):
        evolution.evolve({out["_evolving_schema"]}, decoder.writer_schemas)


# -- Avro through the registry --------------------------------------------------------------------
def avro_envelope(prefix: str, value_fields: list[dict]) -> dict:
    """The Envelope schema Debezium's events have in Avro: `after` refers to the `Value` record
    that `before` defines, the Source record in Debezium's namespace."""
    value = {"type": "record", "name": "Value", "fields": value_fields}
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": f"{prefix}.public.accounts",
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {
                "name": "source",
                "type": {
                    "type": "record",
                    "name": "Source",
                    "namespace": "io.debezium.connector.postgresql",
                    "fields": [
                        {"name": "version", "type": "string"},
                        {"name": "connector", "type": "string"},
                        {"name": "ts_ms", "type": "long"},
                        {"name": "lsn", "type": ["null", "long"], "default": None},
                    ],
                },
            },
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


VALUE_FIELDS = [
    {"name": "region", "type": "string"},
    {"name": "id", "type": "int"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "visits", "type": ["null", "long"], "default": None},
]


def avro_event(schema: dict, schema_id: int, op: str, before=None, after=None, lsn: int = 1) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out,
        fastavro.parse_schema(schema),
        {
            "before": before,
            "after": after,
            "op": op,
            "ts_ms": 5,
            "source": {"version": "3.6.1.Final", "connector": "postgresql", "ts_ms": 4, "lsn": lsn},
        },
    )
    return confluent_frame(schema_id, out.getvalue())


def test_avro_change_events_of_one_schema_read_a_column_at_a_time_as_they_read_one_by_one():
    envelope = avro_envelope("pg", VALUE_FIELDS)
    key = {"region": "emea", "id": 1, "name": None, "visits": None}
    raw = pa.array(
        [
            avro_event(envelope, 7, "r", after=row(), lsn=10),
            avro_event(envelope, 7, "u", after=row(name=None, visits=None), lsn=20),
            avro_event(envelope, 7, "d", before=key, lsn=30),
        ],
        pa.binary(),
    )
    text = json.dumps(envelope)
    struct = envelope_type(
        pa.struct(list(arrow_schema_from_avro(fastavro.schema.expand_schema(envelope)["fields"][0]["type"][1])))
    )
    one_by_one, errors = decode_each(
        raw, lambda data: read_avro(data, CONFLUENT_HEADER_SIZE, parse_avro(text), None), struct
    )
    columns = read_columns(raw, np.arange(len(raw)), CONFLUENT_HEADER_SIZE, text, struct)
    assert not errors and columns is not None
    assert columns.to_pylist() == one_by_one.to_pylist()
    assert [e["op"] for e in columns.to_pylist()] == ["r", "u", "d"]


def test_avro_change_events_through_the_registry_decode_and_a_new_nullable_column_evolves_the_row(schema_registry_url):
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient(schema_registry_url)
    v1 = avro_envelope(prefix, VALUE_FIELDS)
    v2 = avro_envelope(prefix, [*VALUE_FIELDS, {"name": "tier", "type": ["null", "string"], "default": None}])
    id1, id2 = (client.register(f"{prefix}.public.accounts-value", json.dumps(s)) for s in (v1, v2))
    reader = json.dumps(fastavro.schema.expand_schema(v1)["fields"][0]["type"][1])

    def decoder_for(reader_schema: str) -> RecordDecoder:
        return RecordDecoder(
            FormatSpec("confluent-avro", arrow_schema_from_avro(reader_schema), reader_schema),
            FormatSpec("json", KEY),
            registry_url=schema_registry_url,
            required_fields=("region", "id", "position"),
            deletes=Deletes(TombstonePolicy.DELETE, COLUMNS, ("region", "id"), "position"),
        )

    decoder = decoder_for(reader)
    key = {"region": "emea", "id": 1}
    values = [
        avro_event(v1, id1, "c", after=row(), lsn=10),
        avro_event(v1, id1, "d", before={**key, "name": None, "visits": None}, lsn=20),
        None,
        avro_event(v2, id2, "c", after=row(tier="gold"), lsn=30),
    ]
    rows = decode(decoder, values, [key] * 4)
    assert written(rows[:3]) == [
        ("upsert", ("emea", 1), "a", 10),
        ("delete", ("emea", 1), None, 20),
        ("delete", ("emea", 1), None, 0),
    ]
    assert rows[3]["_evolving_schema"] == id2

    evolution = SchemaEvolution(
        "accounts", reader, decoder, decoder_for, SchemaRegistryClient(schema_registry_url), strict=True
    )
    assert evolution.evolve({id2}, decoder.writer_schemas)
    again = decode(evolution.decoder, values, [key] * 4)
    assert [(r["tier"], r["_error"]) for r in again] == [(None, None)] * 3 + [("gold", None)]
    assert written(again)[3] == ("upsert", ("emea", 1), "a", 30)
