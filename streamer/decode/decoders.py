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

JSON is parsed vectorised, with one `pyarrow.json.read_json` over the batch's values joined by
newlines. Only when that fails is the block split to isolate the bad records: around the row
Arrow's error names, else in halves, recursively. A single record is checked with `json.loads`
(for a precise message) and parsed alone through the same `read_json`, so a record gets the same
types whichever path read it. Each `read_json` call costs about 0.3 ms, so a batch decodes at tens
of thousands of records per second when 1% of them have wrong types, about a thousand per second
when all do. Avro is read record by record with fastavro and converted to Arrow in one go.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from streamer.config.choices import DecodeFormat, RecordFormat
from streamer.decode.registry import (
    CONFLUENT_HEADER_SIZE,
    SchemaRegistryClient,
    UnsupportedSchemaTypeError,
    confluent_schema_id,
)
from streamer.decode.value_schema import WriterSchemaChange, compare
from table.schema import arrow_schema_from_avro

KAFKA_KEY = "kafka_key"
KAFKA_TOPIC = "kafka_topic"
KAFKA_PARTITION = "kafka_partition"
KAFKA_OFFSET = "kafka_offset"
KAFKA_TIMESTAMP = "kafka_timestamp"
ERROR = "_error"
RAW_KEY = "_raw_key"
RAW_VALUE = "_raw_value"
EVOLVING = "_evolving_schema"

_KAFKA_COORDINATES = (  # (input column, output field)
    ("topic", pa.field(KAFKA_TOPIC, pa.string())),
    ("partition", pa.field(KAFKA_PARTITION, pa.int32())),
    ("offset", pa.field(KAFKA_OFFSET, pa.int64())),
    ("timestamp", pa.field(KAFKA_TIMESTAMP, pa.timestamp("us", tz="UTC"))),
)
_ERROR_FIELDS = (pa.field(ERROR, pa.string()), pa.field(RAW_KEY, pa.binary()), pa.field(RAW_VALUE, pa.binary()))
_EVOLVING_FIELD = pa.field(EVOLVING, pa.int32())
ADDED_COLUMNS = (KAFKA_KEY, *(f.name for _, f in _KAFKA_COORDINATES), *(f.name for f in _ERROR_FIELDS), EVOLVING)
"""The columns the decoder adds to the value's fields: no value field may take these names."""

_JSON_WHITESPACE = " \t\r\n"
_ARROW_JSON_ROW = re.compile(r" in row (\d+)$")
_ARROW_JSON_COLUMN = re.compile(r"Column\((/[^)]*)\) changed from")
_PREVIEW_CHARS = 60


@dataclass(frozen=True)
class FormatSpec:
    """How a key or a value is encoded, and the fields it decodes to."""

    format: DecodeFormat
    arrow_schema: pa.Schema | None
    """The decoded fields: required for json; for the Avro formats, None means the Avro schema's."""
    avro_schema: str | None = None
    """Avro schema JSON: the writer schema for "avro", the reader schema for "confluent-avro"."""

    def __post_init__(self):
        object.__setattr__(self, "format", DecodeFormat.parse(self.format, "format"))
        if self.format == DecodeFormat.JSON and self.arrow_schema is None:
            raise ValueError("format 'json' needs an Arrow schema")
        if self.format in (DecodeFormat.AVRO, DecodeFormat.CONFLUENT_AVRO) and self.avro_schema is None:
            raise ValueError(f"format '{self.format}' needs an Avro schema")

    def decoded_type(self) -> pa.DataType | None:
        """The Arrow type the records decode to; None for "none"."""
        if self.format == DecodeFormat.NONE:
            return None
        if self.format in (DecodeFormat.STRING, DecodeFormat.BINARY):
            return pa.string() if self.format == DecodeFormat.STRING else pa.binary()
        fields = self.arrow_schema if self.arrow_schema is not None else arrow_schema_from_avro(self.avro_schema)
        return pa.struct(list(fields))


class _BadRecord(Exception):
    """This record cannot be decoded; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


Decoded = tuple[pa.Array, dict[int, str]]
"""A column of decoded records (null where the input is null or bad) and the reasons by row."""

Evolving = dict[int, int]
"""The rows whose writer schema evolves the reader schema, with its schema id."""


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
        self._defers_evolving = isinstance(self._value, _ConfluentAvroDecoder)
        # Value fields are nullable whatever their declaration: error rows have none.
        self.output_schema = pa.schema(
            [*(f.with_nullable(True) for f in value_type), *key_fields, *(f for _, f in _KAFKA_COORDINATES),
             *_ERROR_FIELDS, *([_EVOLVING_FIELD] if self._defers_evolving else [])])
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
            error = _scatter(pa.array(list(errors.values()), pa.string()), rows, length)
            fields = pc.if_else(error.is_valid(), pa.scalar(None, value.type), value).flatten()
        else:
            error = pa.nulls(length, pa.string())
        kept = sorted(errors.keys() | evolving.keys())  # rows whose bytes the sink needs
        if kept:
            rows = np.array(kept, dtype=np.int64)
            raw_columns = [_scatter(raw.take(rows), rows, length) for raw in (raw_key, raw_value)]
        else:
            raw_columns = [pa.nulls(length, pa.binary())] * 2
        evolving_column = []
        if self._defers_evolving:
            evolving_rows = np.fromiter(evolving, dtype=np.int64, count=len(evolving))
            evolving_column.append(_scatter(pa.array(list(evolving.values()), pa.int32()), evolving_rows, length))
        coordinates = [batch.column(name).cast(f.type) for name, f in _KAFKA_COORDINATES]
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
    checks += [(i, _not_null_reason(f.name)) for i, f in enumerate(value_type)
               if not f.nullable and f.name not in required_fields]
    return checks


def _not_null_reason(path: str) -> str:
    return f"field {path!r} is missing or null but declared NOT NULL"


def _null_rows(column: pa.Array) -> list[int]:
    return pc.indices_nonzero(column.is_null()).to_pylist()


def _scatter(values: pa.Array, rows: np.ndarray, length: int) -> pa.Array:
    """`values[k]` at row `rows[k]`, null in the other rows of a column of `length`."""
    index = np.full(length, -1, dtype=np.int64)
    index[rows] = np.arange(len(rows))
    return values.take(pa.array(index, mask=index < 0))


def _decoder_for(spec: FormatSpec, registry: SchemaRegistryClient | None, reserved_names: tuple[str, ...] = ()):
    """The object whose `decode(raw: pa.BinaryArray) -> Decoded` reads records of this format;
    `reserved_names` are names its fields may not take."""
    if spec.format == DecodeFormat.NONE:
        return None
    if spec.format == DecodeFormat.STRING:
        return _Utf8Decoder()
    if spec.format == DecodeFormat.BINARY:
        return _BinaryDecoder()
    if spec.format == DecodeFormat.JSON:
        return _JsonDecoder(spec.decoded_type())
    if spec.format == DecodeFormat.AVRO:
        return _AvroDecoder(spec.avro_schema, spec.decoded_type())
    return _ConfluentAvroDecoder(spec.avro_schema, spec.decoded_type(), registry, reserved_names)


# -- per-record decoding ------------------------------------------------------------------------
def _decode_each(raw: pa.Array, read: Callable[[bytes], Any], arrow_type: pa.DataType) -> Decoded:
    """Reads each non-null record to a Python value with `read`, then converts them all to Arrow
    at once; one by one only when that fails, to find the records at fault."""
    values = raw.to_pylist()
    errors: dict[int, str] = {}
    for row, data in enumerate(values):
        if data is not None:
            try:
                values[row] = read(data)
            except _BadRecord as bad:
                values[row] = None
                errors[row] = bad.reason
    try:
        return pa.array(values, arrow_type), errors
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        for row, value in enumerate(values):
            problem = _conversion_problem(value, arrow_type, _converts_from_python)
            if problem is not None:
                values[row] = None
                errors[row] = problem
        return pa.array(values, arrow_type), errors


def _conversion_problem(value: Any, arrow_type: pa.DataType, converts: Callable[[Any, pa.DataType], bool],
                        path: str = "") -> str | None:
    """Why `value` does not convert to `arrow_type`; None when it converts."""
    if value is None or converts(value, arrow_type):
        return None
    return _why_not(value, arrow_type, converts, path)


def _why_not(value: Any, arrow_type: pa.DataType, converts: Callable[[Any, pa.DataType], bool], path: str = "") -> str:
    """Why `value`, which does not convert to `arrow_type`, does not: naming the innermost field
    at fault."""
    if pa.types.is_struct(arrow_type) and isinstance(value, dict):
        for field in arrow_type:
            field_path = f"{path}.{field.name}" if path else field.name
            child = value.get(field.name)
            if child is None and not field.nullable:
                return _not_null_reason(field_path)
            problem = _conversion_problem(child, field.type, converts, field_path)
            if problem is not None:
                return problem
    where = f"field {path!r}: " if path else ""
    return f"{where}expected {arrow_type}, got {_preview(value)}"


def _converts_from_python(value: Any, arrow_type: pa.DataType) -> bool:
    try:
        pa.array([value], arrow_type)
        return True
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return False


def _preview(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "..."


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _BadRecord(f"not valid UTF-8: {e.reason} at byte {e.start}") from None


class _Utf8Decoder:
    def decode(self, raw: pa.Array) -> Decoded:
        try:
            return raw.cast(pa.string()), {}
        except pa.ArrowInvalid:  # some record is not UTF-8: find which
            return _decode_each(raw, _utf8, pa.string())


class _BinaryDecoder:
    def decode(self, raw: pa.Array) -> Decoded:
        return raw, {}


# -- JSON ---------------------------------------------------------------------------------------
class _JsonDecoder:
    """JSON objects, their members mapped to the struct's fields by name (others ignored)."""

    def __init__(self, struct: pa.StructType):
        self._type = struct
        self._schema = pa.schema(list(struct))

    def decode(self, raw: pa.Array) -> Decoded:
        return _JsonBatch(raw, self._type, self._schema).decode()


class _JsonBatch:
    """One batch's JSON records: their texts joined into one block, parsed whole, and in row
    ranges (zero-copy slices of the block) when records in it are bad."""

    def __init__(self, raw: pa.Array, struct: pa.StructType, schema: pa.Schema):
        self.raw, self.type, self.schema = raw, struct, schema
        self.pieces: list[tuple[np.ndarray, pa.Array]] = []  # (rows, their records)
        self.errors: dict[int, str] = {}
        self.rows, text = self._object_texts(np.asarray(pc.indices_nonzero(raw.is_valid()), dtype=np.int64))
        lists = pa.ListArray.from_arrays(pa.array([0, len(text)], pa.int32()), text)
        self.block = pc.binary_join(lists, "\n")[0].as_buffer()
        lengths = np.asarray(pc.binary_length(text), dtype=np.int64)
        self.ends = np.cumsum(lengths + 1) - 1  # a newline follows each text but the last
        self.starts = self.ends - lengths

    def decode(self) -> Decoded:
        self._parse(0, len(self.rows))
        if not self.pieces:
            return pa.nulls(len(self.raw), self.type), self.errors
        rows = np.concatenate([rows for rows, _ in self.pieces])
        records = pa.concat_arrays([records for _, records in self.pieces])
        return _scatter(records, rows, len(self.raw)), self.errors

    def _object_texts(self, rows: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        """The rows that may hold JSON objects and their texts, without surrounding whitespace;
        the others get their reason. Only such texts may share a block: after a closing brace,
        the newline joining two texts and an opening brace, no JSON can still be inside a string
        or a container of the first text, so a block that parses to as many rows as it has texts
        has one row per text."""
        if len(rows) == 0:
            return rows, pa.array([], pa.string())
        records = _take_rows(self.raw, rows)
        try:
            text = records.cast(pa.string())
        except pa.ArrowInvalid:  # read_json does not check UTF-8, so find the records that are not
            utf8 = np.array([self._is_utf8(int(row)) for row in rows], dtype=bool)
            rows, text = rows[utf8], records.filter(utf8).cast(pa.string())
        braced = _braced(text)
        if not pc.all(braced).as_py():  # trimming copies the texts: only when some need it
            text = pc.utf8_trim(text, characters=_JSON_WHITESPACE)
            braced = np.asarray(_braced(text))
            for row in rows[~braced]:  # not objects: json.loads says what they are
                self._decode_alone(int(row))
            rows, text = rows[braced], text.filter(braced)
        return rows, text

    def _is_utf8(self, row: int) -> bool:
        try:
            _utf8(self.raw[row].as_py())
            return True
        except _BadRecord as bad:
            self.errors[row] = bad.reason
            return False

    def _parse(self, first: int, end: int) -> None:
        """Parses texts [first, end) as one block. When that fails: the texts before the row
        Arrow names, that row alone and the rest; when it names none, each half on its own."""
        while first < end:
            parsed, bad = self._parse_range(first, end)
            if parsed is not None:
                self.pieces.append((self.rows[first:end], parsed))
                return
            if end - first == 1:
                self._decode_alone(int(self.rows[first]))
                return
            split = (first + end) // 2 if bad is None else bad
            self._parse(first, split)
            if bad is not None:
                self._decode_alone(int(self.rows[bad]))
                split += 1
            first = split

    def _parse_range(self, first: int, end: int) -> tuple[pa.Array | None, int | None]:
        """(the records of texts [first, end), None) or, when they do not parse to one row per
        text, (None, the text Arrow reports at fault, if it does)."""
        start = self.starts[first]
        try:
            table = _read_json(self.block.slice(start, self.ends[end - 1] - start), self.schema)
        except pa.ArrowInvalid as e:
            named = _ARROW_JSON_ROW.search(str(e))
            bad = first + int(named.group(1)) if named else None
            return None, (bad if bad is not None and bad < end else None)
        if table.num_rows != end - first:
            return None, None
        return table.to_struct_array().combine_chunks(), None

    def _decode_alone(self, row: int) -> None:
        """One record, parsed through read_json too, so it gets the types of the block path."""
        try:
            record = _json_object(self.raw[row].as_py())
            try:
                parsed = _read_json(json.dumps(record).encode(), self.schema)
            except pa.ArrowInvalid as e:
                raise _BadRecord(_json_field_problem(str(e), record, self.type)
                                 or _why_not(record, self.type, _converts_from_json)) from None
            self.pieces.append((np.array([row]), parsed.to_struct_array().combine_chunks()))
        except _BadRecord as bad:
            self.errors[row] = bad.reason


def _take_rows(raw: pa.Array, rows: np.ndarray) -> pa.Array:
    """`raw[rows]`; a zero-copy slice when the rows are consecutive, as they mostly are."""
    if rows[-1] - rows[0] + 1 == len(rows):
        return raw.slice(int(rows[0]), len(rows))
    return raw.take(rows)


def _braced(text: pa.Array) -> pa.BooleanArray:
    return pc.and_(pc.starts_with(text, "{"), pc.ends_with(text, "}"))


def _json_object(data: bytes) -> dict:
    """The record as json.loads reads it: a precise reason when it is not JSON or not an object."""
    try:
        record = json.loads(_utf8(data))
    except (ValueError, RecursionError) as e:
        raise _BadRecord(f"invalid JSON: {e}") from None
    if not isinstance(record, dict):
        raise _BadRecord(f"the JSON is {_json_kind(record)}, not an object")
    return record


def _json_field_problem(arrow_message: str, record: dict, struct: pa.StructType) -> str | None:
    """The reason for a field Arrow names ("Column(/a/b) changed from number to string"),
    without parsing again; None when Arrow names no field of the record."""
    column = _ARROW_JSON_COLUMN.search(arrow_message)
    path, value, arrow_type = [], record, struct
    for name in column.group(1).split("/")[1:] if column else ():
        if not (isinstance(value, dict) and pa.types.is_struct(arrow_type) and arrow_type.get_field_index(name) >= 0):
            break  # inside a list: the list field is at fault
        path.append(name)
        value, arrow_type = value.get(name), arrow_type.field(name).type
    return f"field {'.'.join(path)!r}: expected {arrow_type}, got {_preview(value)}" if path else None


def _read_json(block: bytes | pa.Buffer, schema: pa.Schema) -> pa.Table:
    """One block, on this thread: a Spark task owns one core."""
    return pj.read_json(
        pa.BufferReader(block),
        read_options=pj.ReadOptions(use_threads=False, block_size=len(block) + 1),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )


def _converts_from_json(value: Any, arrow_type: pa.DataType) -> bool:
    try:
        _read_json(json.dumps({"v": value}).encode(), pa.schema([pa.field("v", arrow_type)]))
        return True
    except pa.ArrowInvalid:
        return False


def _json_kind(value: Any) -> str:
    kinds = ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"), (list, "an array"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


# -- Avro ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _WriterSchema:
    parsed: dict  # as fastavro reads with it
    avro: dict  # as registered, to compare with the reader schema


_WRITER_SCHEMAS: dict[tuple[str, int], _WriterSchema | str] = {}
"""Writer schemas by (registry URL, schema id) for the life of the process, since an id's
schema never changes: parsed, or why the id cannot be decoded (not Avro, not a valid schema)."""


def _parse_avro(schema_json: str) -> dict:
    """fastavro's parsed schema, with uuid strings kept as strings (their Arrow type)."""
    return fastavro.parse_schema(json.loads(schema_json, object_hook=_without_uuid_logical_type))


def _without_uuid_logical_type(node: dict) -> dict:
    return {k: v for k, v in node.items() if k != "logicalType"} if node.get("logicalType") == "uuid" else node


def _read_avro(data: bytes, start: int, writer: dict, reader: dict | None) -> Any:
    """The Avro record in `data` from `start`, which must use exactly the bytes to the end."""
    buffer = io.BytesIO(data)
    buffer.seek(start)
    try:
        record = fastavro.schemaless_reader(buffer, writer, reader)
    except EOFError:
        raise _BadRecord(f"invalid Avro: the record runs past the end of its {len(data) - start} bytes") from None
    except Exception as e:  # malformed bytes surface as whatever fastavro's reading code hit
        raise _BadRecord(f"invalid Avro: {type(e).__name__}: {e}") from None
    if buffer.tell() != len(data):
        raise _BadRecord(f"invalid Avro: {len(data) - buffer.tell()} bytes left after the record")
    return record


class _AvroDecoder:
    """Avro binary without framing, all records written with one writer schema."""

    def __init__(self, writer_schema: str, struct: pa.StructType):
        self._writer = _parse_avro(writer_schema)
        self._type = struct

    def decode(self, raw: pa.Array) -> Decoded:
        return _decode_each(raw, lambda data: _read_avro(data, 0, self._writer, None), self._type)


class _ConfluentAvroDecoder:
    """Confluent's wire format: the writer schema's id, then Avro binary, resolved to the reader
    schema (so records written with older or newer compatible schemas read alike). A record whose
    writer schema does not fit the reader schema (`streamer.decode.value_schema`) is a bad record."""

    def __init__(self, reader_schema: str, struct: pa.StructType, registry: SchemaRegistryClient,
                 reserved_names: tuple[str, ...]):
        self._reader = _parse_avro(reader_schema)
        self._reader_avro = json.loads(reader_schema)
        self._type = struct
        self._registry = registry
        self._reserved_names = reserved_names
        self._changes: dict[int, WriterSchemaChange] = {}

    def decode(self, raw: pa.Array) -> Decoded:
        return self._decode(raw, set())

    def decode_deferring_evolving(self, raw: pa.Array) -> tuple[Decoded, Evolving]:
        """Like `decode`, but records whose writer schema evolves the reader schema are left
        undecoded (null, without a reason) and returned apart."""
        unknown_ids: set[int] = set()  # for this batch only: the next may find them registered
        headers = pc.binary_slice(raw, 0, CONFLUENT_HEADER_SIZE)
        evolving_headers = [h for h in pc.unique(headers).to_pylist()
                            if h is not None and self._evolves(h, unknown_ids)]
        if not evolving_headers:
            return self._decode(raw, unknown_ids), {}
        deferred = pc.fill_null(pc.is_in(headers, pa.array(evolving_headers, pa.binary())), False)
        rows = pc.indices_nonzero(deferred).to_pylist()
        evolving = {row: confluent_schema_id(headers[row].as_py()) for row in rows}
        return self._decode(pc.if_else(deferred, pa.scalar(None, raw.type), raw), unknown_ids), evolving

    def _evolves(self, header: bytes, unknown_ids: set[int]) -> bool:
        """Whether records starting with this header have a writer schema that evolves the
        reader schema; records that cannot be read say why when decoded."""
        try:
            schema_id = confluent_schema_id(header)
            return self._change(schema_id, self._writer_schema(schema_id, unknown_ids)).evolves
        except (ValueError, _BadRecord):
            return False

    def _decode(self, raw: pa.Array, unknown_ids: set[int]) -> Decoded:
        def read(data: bytes) -> Any:
            try:
                schema_id = confluent_schema_id(data)
            except ValueError as e:
                raise _BadRecord(str(e)) from None
            writer = self._writer_schema(schema_id, unknown_ids)
            problem = self._change(schema_id, writer).problem
            if problem is not None:
                raise _BadRecord(f"writer schema id {schema_id} {problem}")
            try:
                return _read_avro(data, CONFLUENT_HEADER_SIZE, writer.parsed, self._reader)
            except _BadRecord as bad:
                raise _BadRecord(f"{bad.reason} (writer schema id {schema_id})") from None

        return _decode_each(raw, read, self._type)

    def _change(self, schema_id: int, writer: _WriterSchema) -> WriterSchemaChange:
        change = self._changes.get(schema_id)
        if change is None:
            change = self._changes[schema_id] = compare(self._reader_avro, writer.avro, self._reserved_names)
        return change

    def _writer_schema(self, schema_id: int, unknown_ids: set[int]) -> _WriterSchema:
        key = (self._registry.url, schema_id)
        writer = _WRITER_SCHEMAS.get(key)
        if writer is None and schema_id not in unknown_ids:
            writer = self._fetch(schema_id)
            if writer is None:
                unknown_ids.add(schema_id)
            else:
                _WRITER_SCHEMAS[key] = writer
        if writer is None:
            raise _BadRecord(f"unknown schema id {schema_id} in the schema registry")
        if isinstance(writer, str):
            raise _BadRecord(writer)
        return writer

    def _fetch(self, schema_id: int) -> _WriterSchema | str | None:
        """The writer schema, why it cannot be used, or None if the registry has no such id.
        A registry that does not answer raises SchemaRegistryError: the batch must be retried."""
        try:
            text = self._registry.schema_by_id(schema_id)
        except UnsupportedSchemaTypeError as e:
            return f"{e}: only Avro can be decoded"
        if text is None:
            return None
        try:
            return _WriterSchema(_parse_avro(text), json.loads(text))
        except (ValueError, fastavro.schema.SchemaParseException) as e:
            return f"schema id {schema_id} in the schema registry is not a valid Avro schema: {e}"
