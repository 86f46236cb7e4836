"""Kafka records to table rows: the value's fields, the decoded key and the Kafka coordinates.

The sink runs `RecordDecoder.decode_batches` in Spark's `mapInArrow`, on executors: the decoder is
plain Python, pyarrow and fastavro, and pickles as its settings only (schemas are parsed again
where it is unpickled).

Every input row yields one output row, in input order. A record that cannot be decoded is not an
exception but a row with the reason in `_error`, the original bytes in `_raw_key`/`_raw_value`
(null on good rows, to save memory) and null value fields, so the sink can fail, skip or
quarantine it as the table's policy says. A schema registry that does not answer is different:
that says nothing about the record, so it raises and the batch is retried.

With `confluent-avro`, the value's reader schema is the table's contract (`streamer.decode.value_schema`).
A record whose writer schema does not fit it is a bad record whose reason names the field. A
record whose writer schema evolves it (new fields, wider types) cannot be decoded into this
decoder's columns, so it comes out undecoded, its bytes kept and its schema id in `_evolving_schema`:
the sink decodes it once the table's schema has evolved (`streamer.decode.evolution`).

Deletes come from three places (`Deletes`): the value's delete field (a boolean column), a
tombstone (a null value whose key decodes, under `tombstones: delete`), and Debezium's change
events (`streamer.decode.debezium`), whose `before` names the key a `d` deletes. A delete takes
the record key and partition fields its value lacks from the decoded Kafka key, and must have them
all, with its ordering value; a tombstone's ordering value is 0, which orders it by commit (it
carries none). Records that write nothing (heartbeats, truncates, skipped tombstones) come out
with the kind of skip in `_skipped`.

Each format decodes in a module of its own: `streamer.decode.plain` (string, binary),
`streamer.decode.json`, `streamer.decode.connect_json` (Kafka Connect's JSON, with or without its
schemas), `streamer.decode.avro` and `streamer.decode.confluent`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.config.choices import DecodeFormat, RecordFormat, TombstonePolicy
from streamer.decode.avro import AvroDecoder
from streamer.decode.columns import (
    ADDED_COLUMNS,
    DELETE,
    DELETE_FIELD,
    ERROR_FIELDS,
    EVOLVING_FIELD,
    KAFKA_COORDINATES,
    KAFKA_KEY,
    SKIPPED_FIELD,
)
from streamer.decode.confluent import ConfluentAvroDecoder
from streamer.decode.connect_json import CommonFields, ConnectJsonDecoder
from streamer.decode.debezium import (
    TOMBSTONE,
    ChangeEvents,
    EnvelopeColumns,
    common_envelope_type,
    envelope_row,
    envelope_type,
    in_place_envelope_type,
    in_place_needs_whole,
    needs_whole,
)
from streamer.decode.decoded import not_null_reason, scatter
from streamer.decode.formats import FormatSpec
from streamer.decode.json import JsonDecoder
from streamer.decode.plain import BinaryDecoder, Utf8Decoder
from streamer.decode.registry import SchemaRegistryClient
from streamer.errors import DecoderSettingsError
from table import arrow_schema_from_avro


@dataclass(frozen=True)
class Deletes:
    """Which records delete their key, and what a delete needs."""

    tombstones: TombstonePolicy = TombstonePolicy.BAD
    envelope: EnvelopeColumns | None = None  # Debezium's change events, keeping these envelope columns
    key_fields: tuple[str, ...] = ()  # the record key and partition fields: a delete needs them all
    ordering_field: str | None = None  # a delete needs it too; a tombstone's is 0
    column: str = DELETE  # the marker: DELETE, or the value's own delete field

    @property
    def made(self) -> bool:
        """Whether the decoder marks deletes, and so has the marker column."""
        return self.envelope is not None or self.tombstones == TombstonePolicy.DELETE or self.column != DELETE

    @property
    def skips(self) -> bool:
        """Whether the decoder has the `_skipped` column."""
        return self.envelope is not None or self.tombstones == TombstonePolicy.SKIP


NO_DELETES = Deletes()


class RecordDecoder:
    """Decodes batches of Spark's Kafka rows (key, value, topic, partition, offset, timestamp;
    other columns are ignored) to `output_schema`. `required_fields` are value fields that must
    not be null (the record key, the ordering field); fields declared NOT NULL must not be either.
    With a `confluent-avro` value, or Debezium's envelope in JSON with Connect's schemas, the last
    column is `EVOLVING`."""

    def __init__(
        self,
        value: FormatSpec,
        key: FormatSpec,
        registry_url: str | None = None,
        registry_auth: str | None = None,
        required_fields: Sequence[str] = (),
        deletes: Deletes = NO_DELETES,
    ):
        self._settings = (value, key, registry_url, registry_auth, tuple(required_fields), deletes)
        if value.format not in [DecodeFormat(f) for f in RecordFormat]:
            raise DecoderSettingsError(
                f"a value's format must be one of {', '.join(RecordFormat)}, not '{value.format}'"
            )
        registry = None
        if DecodeFormat.CONFLUENT_AVRO in (value.format, key.format):
            if not registry_url:
                raise DecoderSettingsError("format 'confluent-avro' needs a schema registry URL")
            registry = SchemaRegistryClient(registry_url, registry_auth)
        self.deletes = deletes
        envelope = deletes.envelope
        row_type = _row_type(value, envelope is not None)
        self._events = None if envelope is None else ChangeEvents(row_type, envelope)
        self._value = _decoder_for(value, registry, reserved_names=ADDED_COLUMNS, envelope=envelope)
        self._key = _decoder_for(key, registry, connect=envelope is not None)
        key_type = key.decoded_type()
        value_fields = (
            self._events.output_fields if self._events is not None else [f.with_nullable(True) for f in row_type]
        )
        key_fields = [] if key_type is None else [pa.field(KAFKA_KEY, key_type)]
        self._defers_evolving = hasattr(self._value, "decode_deferring_evolving")
        names = [f.name for f in value_fields]
        self._delete_index = names.index(deletes.column) if deletes.column in names else None
        marker = [DELETE_FIELD] if deletes.made and self._delete_index is None else []
        # Value fields are nullable whatever their declaration: error rows have none.
        self.output_schema = pa.schema(
            [
                *value_fields,
                *marker,
                *key_fields,
                *(f for _, f in KAFKA_COORDINATES),
                *ERROR_FIELDS,
                *([SKIPPED_FIELD] if deletes.skips else []),
                *([EVOLVING_FIELD] if self._defers_evolving else []),
            ]
        )
        names = self.output_schema.names
        clashes = sorted({n for n in names if names.count(n) > 1})
        if clashes:
            raise DecoderSettingsError(f"value fields clash with the columns the decoder adds: {', '.join(clashes)}")
        self._value_type = pa.struct(value_fields)
        self._not_null = _not_null_checks(row_type, self._value_type, required_fields)
        self._delete_checks = _delete_checks(self._value_type, deletes)
        self._fill_from_key = _key_fills(self._value_type, key_type, deletes)

    def __reduce__(self):
        return (RecordDecoder, self._settings)

    @property
    def value_columns(self) -> tuple[str, ...]:
        """The columns of a decoded row: the value's fields (the row's and the envelope's) and the
        delete marker, when the decoder adds it."""
        marker = (DELETE,) if self.deletes.made and self._delete_index is None else ()
        return (*self._value_type.names, *marker)

    def with_value(self, value: FormatSpec) -> RecordDecoder:
        """The same decoder with another value format or schema."""
        return RecordDecoder(value, *self._settings[1:])

    @property
    def writer_schemas(self) -> dict[int, str]:
        """The writer schemas of the value (its row, with an envelope) by id, as far as decoded."""
        return getattr(self._value, "writer_schemas", {})

    def decode_batches(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """`mapInArrow`'s function: Spark hands a task an iterator of batches."""
        for batch in batches:
            yield self.decode(batch)

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        length = batch.num_rows
        raw_value = batch.column("value").cast(pa.binary())
        raw_key = batch.column("key").cast(pa.binary())
        if self._defers_evolving:
            (value, errors), evolving = self._value.decode_deferring_evolving(raw_value)
        else:
            (value, errors), evolving = self._value.decode(raw_value), {}
        key = None
        key_columns = []
        if self._key is not None:
            key, key_errors = self._key.decode(raw_key)
            for row, reason in key_errors.items():
                errors[row] = f"{errors[row]}; key: {reason}" if row in errors else f"key: {reason}"
            key_columns.append(key)
        if self._events is not None:
            unpacked = self._events.unpack(value)
            fields, delete, skipped = unpacked.fields, unpacked.delete, unpacked.skipped
            for row, reason in unpacked.errors.items():
                errors.setdefault(row, reason)
        else:
            fields = value.flatten()
            delete = np.zeros(length, dtype=bool)
            if self._delete_index is not None:
                delete = np.asarray(pc.fill_null(fields[self._delete_index].cast(pa.bool_()), False), dtype=bool)
            skipped = pa.nulls(length, pa.string())
        tombstone = np.asarray(raw_value.is_null(), dtype=bool)
        fields, delete, skipped = self._tombstones(tombstone, key, raw_key, fields, delete, skipped, errors)
        for index, key_index in self._fill_from_key:  # only with a key
            fill = pa.array(delete & np.asarray(fields[index].is_null(), dtype=bool))
            source = pc.struct_field(key, key_index) if key_index is not None else key
            if source is not None:
                fields[index] = pc.if_else(fill, source.cast(fields[index].type), fields[index])
        writes = pa.array(np.asarray(skipped.is_null(), dtype=bool))
        upsert_rows, delete_rows = pc.and_(writes, pa.array(~delete)), pc.and_(writes, pa.array(delete))
        for checks, rows in ((self._not_null, upsert_rows), (self._delete_checks, delete_rows)):
            for index, reason in checks:
                for row in pc.indices_nonzero(pc.and_(rows, fields[index].is_null())).to_pylist():
                    if row not in evolving:
                        errors.setdefault(row, reason)
        evolving = {row: schema_id for row, schema_id in evolving.items() if row not in errors}

        value_type = self._value_type
        if errors:
            rows = np.fromiter(errors, dtype=np.int64, count=len(errors))
            error = scatter(pa.array(list(errors.values()), pa.string()), rows, length)
            valid = error.is_null()
            fields = [pc.if_else(valid, f, pa.scalar(None, f.type)) for f in fields]
            skipped = pc.if_else(valid, skipped, pa.scalar(None, pa.string()))
            delete = delete & np.asarray(valid, dtype=bool)
        else:
            error = pa.nulls(length, pa.string())
        kept = sorted(errors.keys() | evolving.keys())  # rows whose bytes the sink needs
        if kept:
            rows = np.array(kept, dtype=np.int64)
            raw_columns = [scatter(raw.take(rows), rows, length) for raw in (raw_key, raw_value)]
        else:
            raw_columns = [pa.nulls(length, pa.binary())] * 2
        marker = []
        if self.deletes.made:
            if self._delete_index is not None:
                fields[self._delete_index] = pa.array(delete)
            else:
                marker.append(pa.array(delete))
        extra = [skipped] if self.deletes.skips else []
        if self._defers_evolving:
            evolving_rows = np.fromiter(evolving, dtype=np.int64, count=len(evolving))
            extra.append(scatter(pa.array(list(evolving.values()), pa.int32()), evolving_rows, length))
        coordinates = [batch.column(name).cast(f.type) for name, f in KAFKA_COORDINATES]
        fields = [f.cast(t.type) for f, t in zip(fields, value_type)]
        return pa.RecordBatch.from_arrays(
            [*fields, *marker, *key_columns, *coordinates, error, *raw_columns, *extra], schema=self.output_schema
        )

    def _tombstones(
        self,
        tombstone: np.ndarray,
        key: pa.Array | None,
        raw_key: pa.Array,
        fields: list[pa.Array],
        delete: np.ndarray,
        skipped: pa.Array,
        errors: dict[int, str],
    ):
        """What the table's tombstone policy makes of the records whose value is null."""
        if not tombstone.any():
            return fields, delete, skipped
        policy = self.deletes.tombstones
        rows = np.flatnonzero(tombstone).tolist()
        if policy == TombstonePolicy.BAD:
            for row in rows:
                errors.setdefault(row, "value is null")
            return fields, delete, skipped
        if policy == TombstonePolicy.SKIP:
            return fields, delete, pc.if_else(pa.array(tombstone), TOMBSTONE, skipped)
        keyless = np.asarray(raw_key.is_null(), dtype=bool) | (
            np.ones(len(raw_key), dtype=bool) if key is None else np.asarray(key.is_null(), dtype=bool)
        )
        for row in np.flatnonzero(tombstone & keyless).tolist():
            errors.setdefault(row, "a tombstone (null value) deletes its key, but its key is null or does not decode")
        delete = delete | tombstone
        ordering = self.deletes.ordering_field
        if ordering is not None:
            index = self._value_type.get_field_index(ordering)
            zero = pa.scalar(0).cast(fields[index].type)
            fields[index] = pc.if_else(pa.array(tombstone), zero, fields[index])
        return fields, delete, skipped


def _row_type(value: FormatSpec, envelope: bool) -> pa.StructType:
    """The row's fields: the value's, or with an Avro envelope in a schema file, its `after`'s."""
    if envelope and value.format == DecodeFormat.AVRO and value.arrow_schema is None:
        row = envelope_row(json.loads(value.avro_text()))
        if row is None:
            raise DecoderSettingsError("the Avro schema is not a Debezium change event's (no `after` record)")
        return pa.struct(list(arrow_schema_from_avro(row)))
    return value.decoded_type()


def _not_null_checks(
    row_type: pa.StructType, value_type: pa.StructType, required_fields: Sequence[str]
) -> list[tuple[int, str]]:
    """(value field index, reason) of the fields a good record must have: the required ones,
    then those declared NOT NULL."""
    names = [f.name for f in value_type]
    unknown = [n for n in required_fields if n not in names]
    if unknown:
        raise DecoderSettingsError(f"required fields {unknown} are not value fields; the value has {names}")
    checks = [(names.index(n), f"required field {n!r} is missing or null") for n in required_fields]
    checks += [
        (names.index(f.name), not_null_reason(f.name))
        for f in row_type
        if not f.nullable and f.name not in required_fields
    ]
    return checks


def _delete_checks(value_type: pa.StructType, deletes: Deletes) -> list[tuple[int, str]]:
    """(value field index, reason) of the fields a delete must have."""
    names = [f.name for f in value_type]
    needed = [*deletes.key_fields, *([deletes.ordering_field] if deletes.ordering_field else [])]
    unknown = [n for n in needed if n not in names]
    if unknown:
        raise DecoderSettingsError(f"fields {unknown} that a delete needs are not value fields; the value has {names}")
    if deletes.envelope is not None:
        where, hint = (
            "the change's `before` nor the Kafka key",
            (" (PostgreSQL puts every column in `before` with ALTER TABLE ... REPLICA IDENTITY FULL)"),
        )
    else:
        where, hint = "the value nor the Kafka key", ""
    return [(names.index(n), f"a delete without field {n!r}: neither {where} has it{hint}") for n in needed]


def _key_fills(
    value_type: pa.StructType, key_type: pa.DataType | None, deletes: Deletes
) -> list[tuple[int, int | None]]:
    """(value field index, key field index) of the fields a delete takes from the Kafka key
    when it lacks them: fields of a structured key by name; a plain key is the record key when
    it is one field (the key field index is then None)."""
    if key_type is None or not deletes.made:
        return []
    names = [f.name for f in value_type]
    if pa.types.is_struct(key_type):
        key_names = [f.name for f in key_type]
        return [(names.index(n), key_names.index(n)) for n in deletes.key_fields if n in key_names and n in names]
    if deletes.key_fields and pa.types.is_string(key_type):
        return [(names.index(deletes.key_fields[0]), None)]
    return []


def _decoder_for(
    spec: FormatSpec,
    registry: SchemaRegistryClient | None,
    reserved_names: tuple[str, ...] = (),
    envelope: EnvelopeColumns | None = None,
    connect: bool = False,
):
    """The object whose `decode(raw: pa.BinaryArray) -> Decoded` reads records of this format;
    `reserved_names` are names its fields may not take. With `envelope`, it reads Debezium's
    change events around the format's row, for a table that keeps those envelope columns;
    `connect` reads JSON as Kafka Connect writes it."""
    if spec.format == DecodeFormat.NONE:
        return None
    if spec.format == DecodeFormat.STRING:
        return Utf8Decoder()
    if spec.format == DecodeFormat.BINARY:
        return BinaryDecoder()
    row = _row_type(spec, envelope is not None)
    struct = row if envelope is None else envelope_type(row)
    if spec.format == DecodeFormat.JSON:
        if envelope is not None:
            # Each field asked of JSON costs every event: `before` (deletes), `ddl` and `status`
            # (messages without an op) and most of `source` are read only where they are needed.
            common = CommonFields(common_envelope_type(row, envelope), needs_whole)
            in_place = CommonFields(in_place_envelope_type(row, envelope), in_place_needs_whole)
            return ConnectJsonDecoder(
                struct, "after", spec.avro_schema, reserved_names, common=common, in_place=in_place
            )
        return ConnectJsonDecoder(struct) if connect else JsonDecoder(struct)
    if spec.format == DecodeFormat.AVRO:
        return AvroDecoder(spec.avro_text(), struct)
    if registry is None:
        raise DecoderSettingsError("format 'confluent-avro' needs a schema registry URL")
    return ConfluentAvroDecoder(spec.avro_text(), struct, registry, reserved_names, envelope=envelope is not None)
