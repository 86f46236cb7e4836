"""JSON as Kafka Connect's `JsonConverter` writes it: `{"schema":...,"payload":...}` with
`schemas.enable`, the payload alone without. Both read alike, vectorised: the payload's members
mapped to the struct's fields by name.

`JsonConverter` writes the schema first, then `,"payload":`, then the payload and the closing
brace, without spaces. So a record that starts with `{"schema"` is cut there, a whole batch at a
time with Arrow's string kernels: the first record of each distinct schema text is searched for
`,"payload":`, and every other record is matched against that text as a prefix at once. The
payload is parsed as a record without schema; the schema is never copied or parsed but for one
record of each distinct text. That keeps a record with its schema (several times the payload's
bytes) about as cheap as one without. A record that does not cut so (a `,"payload":` inside the
schema, spaces) is parsed whole.

With the schema, each record also says what its row looks like: Connect's schema of one struct
field of the payload (Debezium's `after`). `ConnectJsonDecoder.decode_deferring_evolving`
compares each distinct schema once with the reader schema (`streamer.decode.value_schema`):
records whose row fits decode; records whose row evolves it (a column added), or that the table
cannot take (a type changed, a NOT NULL column added), are left undecoded and returned apart
with an id, for the sink to evolve the table's schema or to stop it
(`streamer.decode.evolution`). Their writer schemas, as Avro, are kept by id (`writer_schemas`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.decode.decoded import Decoded, gather, scatter
from streamer.decode.json import JsonDecoder
from streamer.decode.native_json import NativeJsonOnly, NotNativeError
from streamer.decode.value_schema import WriterSchemaChange, compare

PAYLOAD = "payload"
SCHEMA = "schema"
_WRAPPED_START = b'{"schema":'
_PAYLOAD_MARK = b',"payload":'
#: Distinct schema texts looked for in one batch before its other records are parsed whole.
_MAX_SCHEMAS = 16
#: Connect's primitive types as Avro types.
_CONNECT_AVRO = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}

Evolving = dict[int, int]
#: The records of each distinct schema text: (the text, their rows).
SchemaRows = list[tuple[bytes, np.ndarray]]


class ConnectJsonDecoder:
    """Connect's JSON, with or without its schemas, to records of `struct`. With `row_field` and
    the row's Avro `reader_schema`, records whose Connect schema of `row_field` changes the
    reader schema can be deferred (`decode_deferring_evolving`). With `common`, records are
    parsed into its narrower struct, and only those it names parsed again into the whole one:
    Debezium's change events, most of which need little of their envelope. With `in_place`,
    a batch is first read natively into its struct (one only the native decoder reads) and
    returned so when none of its records needs the whole struct."""

    def __init__(
        self,
        struct: pa.StructType,
        row_field: str | None = None,
        reader_schema: str | None = None,
        reserved_names: tuple[str, ...] = (),
        common: CommonFields | None = None,
        in_place: CommonFields | None = None,
    ):
        self._type = struct
        self._row_field = row_field
        self._reader = json.loads(reader_schema) if reader_schema else None
        self._reserved = reserved_names
        self._common = common
        self._shapes = _Shapes(struct if common is None else common.struct)
        self._whole_shapes = None if common is None else _Shapes(struct)
        self._in_place = None  # what it needs whole and its shapes, where the extension reads it
        if in_place is not None and NativeJsonOnly(in_place.struct).available:
            self._in_place = (in_place.needs_whole, _Shapes(in_place.struct, NativeJsonOnly))
        self._changes: dict[bytes, tuple[int, WriterSchemaChange]] = {}  # schema text -> (id, change)
        self.writer_schemas: dict[int, str] = {}  # id -> the row's writer schema, Avro JSON

    def decode(self, raw: pa.Array) -> Decoded:
        value, _, errors = self._parse(raw)
        return value, errors

    def decode_deferring_evolving(self, raw: pa.Array) -> tuple[Decoded, Evolving]:
        value, schemas, errors = self._parse(raw)
        row_field, reader = self._row_field, self._reader
        if row_field is None or reader is None:
            return (value, errors), {}
        evolving: Evolving = {}
        for text, rows in schemas:
            schema_id = self._change(text, row_field, reader)
            if schema_id is not None:
                evolving.update(dict.fromkeys(rows.tolist(), schema_id))
        if evolving:
            deferred = np.zeros(len(raw), dtype=bool)
            deferred[list(evolving)] = True
            value = pc.if_else(pa.array(deferred), pa.scalar(None, value.type), value)
        return (value, errors), evolving

    def _parse(self, raw: pa.Array) -> tuple[pa.Array, SchemaRows, dict[int, str]]:
        """The payloads, the records of each schema text and the reasons of the bad records."""
        if self._in_place is not None:
            in_place_needs_whole, in_place_shapes = self._in_place
            try:
                value, schemas, errors = in_place_shapes.parse(raw)
            except NotNativeError:
                pass
            else:
                if not in_place_needs_whole(value).any():
                    return value, schemas, errors
        value, schemas, errors = self._shapes.parse(raw)
        if self._common is None or self._whole_shapes is None:
            return value, schemas, errors
        needed = np.flatnonzero(self._common.needs_whole(value))
        whole = None
        if len(needed):
            whole, _, whole_errors = self._whole_shapes.parse(raw.take(pa.array(needed)))
            for row, reason in whole_errors.items():
                errors.setdefault(int(needed[row]), reason)
        return _merged(self._type, value, whole, needed, len(raw)), schemas, errors

    def _change(self, schema_text: bytes, row_field: str, reader: dict) -> int | None:
        """The id of a schema's row when it changes the `reader` schema; None when it fits."""
        known = self._changes.get(schema_text)
        if known is None:
            try:
                connect_schema = json.loads(schema_text)
            except ValueError:  # not cut where the payload starts: the payload's parse says so
                return None
            writer = row_writer_schema(connect_schema, row_field)
            change = compare(reader, writer, self._reserved, additions_nullable=True)
            text = json.dumps(writer, separators=(",", ":"), sort_keys=True)
            schema_id = zlib.crc32(text.encode()) & 0x7FFFFFFF
            self.writer_schemas[schema_id] = text
            known = self._changes[schema_text] = (schema_id, change)
        schema_id, change = known
        return schema_id if change.evolves or change.problem is not None else None


@dataclass(frozen=True)
class CommonFields:
    """What most records need of a struct, read into `struct`: as `common`, some of its fields,
    each whole or a narrower struct of it; as `in_place`, a struct only the native decoder reads.
    `needs_whole` says, from what they read to, which records need the whole struct: they are
    parsed again."""

    struct: pa.StructType
    needs_whole: Callable[[pa.StructArray], np.ndarray]


def _merged(
    whole_type: pa.DataType, common: pa.Array | None, whole: pa.Array | None, needed: np.ndarray, length: int
) -> pa.Array:
    """Records of the whole struct's type (or a field's). What the common parse read is kept, as
    the whole parse read the same texts into the same types; what it did not ask for is the
    whole parse's in the records that `needed` it, and null in the others."""
    if common is None:
        return pa.nulls(length, whole_type) if whole is None else scatter(whole, needed, length)
    if common.type == whole_type:
        return common
    children = [
        _merged(
            f.type,
            pc.struct_field(common, f.name) if common.type.get_field_index(f.name) >= 0 else None,
            None if whole is None else pc.struct_field(whole, f.name),
            needed,
            length,
        )
        for f in whole_type
    ]
    return pa.StructArray.from_arrays(children, fields=list(whole_type), mask=common.is_null())


class _Shapes:
    """Parses a batch of records of both shapes into `struct` with `reader`, keeping the schema
    texts."""

    def __init__(self, struct: pa.StructType, reader: type[JsonDecoder | NativeJsonOnly] = JsonDecoder):
        self._type = struct
        self._bare = reader(struct)
        self._whole = reader(pa.struct([pa.field(PAYLOAD, struct)]))

    def parse(self, raw: pa.Array) -> tuple[pa.Array, SchemaRows, dict[int, str]]:
        length = len(raw)
        starts = pc.binary_slice(raw, 0, len(_WRAPPED_START))
        wrapped = np.asarray(pc.fill_null(pc.equal(starts, _WRAPPED_START), False), dtype=bool)
        if not wrapped.any():
            value, errors = self._bare.decode(raw)
            return value, [], errors
        schemas = _cut_schemas(raw, wrapped)
        errors = {}
        parts: list[tuple[np.ndarray, pa.Array]] = []
        cut = np.zeros(length, dtype=bool)
        for text, rows in schemas:
            cut[rows] = True
            value, part_errors = self._bare.decode_inside(
                raw.take(pa.array(rows)) if len(rows) < length else raw,
                len(_WRAPPED_START) + len(text) + len(_PAYLOAD_MARK),
                1,  # the wrapper's closing brace
            )
            parts.append((rows, value))
            errors.update({int(rows[row]): reason for row, reason in part_errors.items()})
        rest = np.flatnonzero(~cut)
        if len(rest):
            bare = rest[~wrapped[rest]]
            whole = rest[wrapped[rest]]
            if len(bare):
                value, part_errors = self._bare.decode(raw.take(pa.array(bare)))
                parts.append((bare, value))
                errors.update({int(bare[row]): reason for row, reason in part_errors.items()})
            if len(whole):
                records = raw.take(pa.array(whole))
                value, part_errors = self._whole.decode(records)
                parts.append((whole, pc.struct_field(value, PAYLOAD)))
                schemas = schemas + _whole_schemas(records, whole)
                errors.update({int(whole[row]): reason for row, reason in part_errors.items()})
        return gather(parts, length), schemas, errors


def _cut_schemas(raw: pa.Array, wrapped: np.ndarray) -> SchemaRows:
    """The wrapped records that cut where their `,"payload":` starts, by schema text: each text
    is found in the first record left, and matched against all the others at once as the prefix
    it makes, since a schema is the same text in most records."""
    ends = np.asarray(pc.fill_null(pc.equal(pc.binary_slice(raw, -1), b"}"), False), dtype=bool)
    remaining = wrapped & ends
    schemas: SchemaRows = []
    for _ in range(_MAX_SCHEMAS):
        candidates = np.flatnonzero(remaining)
        if not len(candidates):
            break
        first = raw[int(candidates[0])].as_py()
        offset = first.find(_PAYLOAD_MARK)
        if offset < 0:
            remaining[candidates[0]] = False
            continue
        prefix = first[: offset + len(_PAYLOAD_MARK)]
        found = remaining & np.asarray(pc.fill_null(pc.starts_with(raw, pattern=prefix), False), dtype=bool)
        schemas.append((first[len(_WRAPPED_START) : offset], np.flatnonzero(found)))
        remaining &= ~found
    return schemas


def _whole_schemas(records: pa.Array, rows: np.ndarray) -> SchemaRows:
    """The schema texts of records that did not cut, one by one, as they are rare."""
    by_text: dict[bytes, list[int]] = {}
    for row, record in zip(rows.tolist(), records.to_pylist(), strict=True):
        try:
            text = json.dumps(json.loads(record)[SCHEMA], separators=(",", ":")).encode()
        except (ValueError, KeyError, TypeError):
            continue
        by_text.setdefault(text, []).append(row)
    return [(text, np.array(found, dtype=np.int64)) for text, found in by_text.items()]


def row_writer_schema(connect_schema: dict, row_field: str) -> dict:
    """The Avro record of a Connect struct field (Debezium's `after`): its fields, nullable where
    Connect says optional. A type without a primitive Avro equivalent (a struct, an array, a map)
    is named `connect.<type>`, which no table column can take: the comparison says so."""
    row = next((f for f in connect_schema.get("fields", ()) if f.get("field") == row_field), None)
    if row is None:
        return {"type": "record", "name": "row", "fields": []}
    fields = []
    for field in row.get("fields", ()):
        avro: Any = _CONNECT_AVRO.get(field["type"], f"connect.{field['type']}")
        if field.get("optional", False):
            fields.append({"name": field["field"], "type": ["null", avro], "default": None})
        else:
            fields.append({"name": field["field"], "type": avro})
    return {"type": "record", "name": row.get("name", "row").replace(".", "_"), "fields": fields}
