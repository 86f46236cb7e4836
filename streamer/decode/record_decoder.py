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

Each format decodes in a module of its own: `streamer.decode.plain` (string, binary),
`streamer.decode.json`, `streamer.decode.avro` and `streamer.decode.confluent`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.config.choices import DecodeFormat, RecordFormat
from streamer.decode.avro import AvroDecoder
from streamer.decode.columns import ADDED_COLUMNS, ERROR_FIELDS, EVOLVING_FIELD, KAFKA_COORDINATES, KAFKA_KEY
from streamer.decode.confluent import ConfluentAvroDecoder
from streamer.decode.decoded import not_null_reason, scatter
from streamer.decode.formats import FormatSpec
from streamer.decode.json import JsonDecoder
from streamer.decode.plain import BinaryDecoder, Utf8Decoder
from streamer.decode.registry import SchemaRegistryClient


class RecordDecoder:
    """Decodes batches of Spark's Kafka rows (key, value, topic, partition, offset, timestamp;
    other columns are ignored) to `output_schema`. `required_fields` are value fields that must
    not be null (the record key, the ordering field); fields declared NOT NULL must not be either.
    With a `confluent-avro` value, the last column is `EVOLVING`."""

    def __init__(self, value: FormatSpec, key: FormatSpec, registry_url: str | None = None,
                 registry_auth: str | None = None, required_fields: Sequence[str] = ()):
        self._settings = (value, key, registry_url, registry_auth, tuple(required_fields))
        if value.format not in list(RecordFormat):
            raise ValueError(f"a value's format must be one of {', '.join(RecordFormat)}, not '{value.format}'")
        registry = None
        if DecodeFormat.CONFLUENT_AVRO in (value.format, key.format):
            if not registry_url:
                raise ValueError("format 'confluent-avro' needs a schema registry URL")
            registry = SchemaRegistryClient(registry_url, registry_auth)
        self._value = _decoder_for(value, registry, reserved_names=ADDED_COLUMNS)
        self._key = _decoder_for(key, registry)
        value_type = value.decoded_type()
        key_type = key.decoded_type()
        key_fields = [] if key_type is None else [pa.field(KAFKA_KEY, key_type)]
        self._defers_evolving = isinstance(self._value, ConfluentAvroDecoder)
        # Value fields are nullable whatever their declaration: error rows have none.
        self.output_schema = pa.schema(
            [*(f.with_nullable(True) for f in value_type), *key_fields, *(f for _, f in KAFKA_COORDINATES),
             *ERROR_FIELDS, *([EVOLVING_FIELD] if self._defers_evolving else [])])
        names = self.output_schema.names
        clashes = sorted({n for n in names if names.count(n) > 1})
        if clashes:
            raise ValueError(f"value fields clash with the columns the decoder adds: {', '.join(clashes)}")
        self._not_null = _not_null_checks(value_type, required_fields)

    def __reduce__(self):
        return (RecordDecoder, self._settings)

    def with_value(self, value: FormatSpec) -> "RecordDecoder":
        """The same decoder with another value format or schema."""
        return RecordDecoder(value, *self._settings[1:])

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
        for row in _null_rows(raw_value):
            errors[row] = "value is null"
        key_columns = []
        if self._key is not None:
            key, key_errors = self._key.decode(raw_key)
            for row, reason in key_errors.items():
                errors[row] = f"{errors[row]}; key: {reason}" if row in errors else f"key: {reason}"
            key_columns.append(key)
        fields = value.flatten()
        for index, reason in self._not_null:
            for row in _null_rows(fields[index]):
                if row not in evolving:
                    errors.setdefault(row, reason)
        evolving = {row: schema_id for row, schema_id in evolving.items() if row not in errors}

        if errors:
            rows = np.fromiter(errors, dtype=np.int64, count=len(errors))
            error = scatter(pa.array(list(errors.values()), pa.string()), rows, length)
            fields = pc.if_else(error.is_valid(), pa.scalar(None, value.type), value).flatten()
        else:
            error = pa.nulls(length, pa.string())
        kept = sorted(errors.keys() | evolving.keys())  # rows whose bytes the sink needs
        if kept:
            rows = np.array(kept, dtype=np.int64)
            raw_columns = [scatter(raw.take(rows), rows, length) for raw in (raw_key, raw_value)]
        else:
            raw_columns = [pa.nulls(length, pa.binary())] * 2
        evolving_column = []
        if self._defers_evolving:
            evolving_rows = np.fromiter(evolving, dtype=np.int64, count=len(evolving))
            evolving_column.append(scatter(pa.array(list(evolving.values()), pa.int32()), evolving_rows, length))
        coordinates = [batch.column(name).cast(f.type) for name, f in KAFKA_COORDINATES]
        return pa.RecordBatch.from_arrays(
            [*fields, *key_columns, *coordinates, error, *raw_columns, *evolving_column], schema=self.output_schema)


def _not_null_checks(value_type: pa.StructType, required_fields: Sequence[str]) -> list[tuple[int, str]]:
    """(value field index, reason) of the fields a good record must have: the required ones,
    then those declared NOT NULL."""
    names = [f.name for f in value_type]
    unknown = [n for n in required_fields if n not in names]
    if unknown:
        raise ValueError(f"required fields {unknown} are not value fields; the value has {names}")
    checks = [(names.index(n), f"required field {n!r} is missing or null") for n in required_fields]
    checks += [(i, not_null_reason(f.name)) for i, f in enumerate(value_type)
               if not f.nullable and f.name not in required_fields]
    return checks


def _null_rows(column: pa.Array) -> list[int]:
    return pc.indices_nonzero(column.is_null()).to_pylist()


def _decoder_for(spec: FormatSpec, registry: SchemaRegistryClient | None, reserved_names: tuple[str, ...] = ()):
    """The object whose `decode(raw: pa.BinaryArray) -> Decoded` reads records of this format;
    `reserved_names` are names its fields may not take."""
    if spec.format == DecodeFormat.NONE:
        return None
    if spec.format == DecodeFormat.STRING:
        return Utf8Decoder()
    if spec.format == DecodeFormat.BINARY:
        return BinaryDecoder()
    if spec.format == DecodeFormat.JSON:
        return JsonDecoder(spec.decoded_type())
    if spec.format == DecodeFormat.AVRO:
        return AvroDecoder(spec.avro_schema, spec.decoded_type())
    return ConfluentAvroDecoder(spec.avro_schema, spec.decoded_type(), registry, reserved_names)
