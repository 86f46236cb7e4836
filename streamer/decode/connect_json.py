"""JSON as Kafka Connect's `JsonConverter` writes it: `{"schema": ..., "payload": ...}` with
`schemas.enable`, the payload alone without. Both read alike, vectorised: the payload's members
mapped to the struct's fields by name.

With `schemas.enable` every record also says what its row looks like: Connect's schema of one
struct field of the payload (Debezium's `after`). `ConnectJsonDecoder.decode_deferring_evolving`
reads each record's field names and types (a signature, vectorised) and compares each new
signature once with the reader schema (`streamer.decode.value_schema`): records whose row fits
decode; records whose row evolves it (a column added), or that the table cannot take (a type
narrowed, a NOT NULL column added), are left undecoded and returned apart with an id, for the
sink to evolve the table's schema or to stop it (`streamer.decode.evolution`). Their writer
schemas, as Avro, are kept by id (`writer_schemas`) for the driver.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.decode.decoded import Decoded, scatter
from streamer.decode.json import JsonDecoder
from streamer.decode.value_schema import WriterSchemaChange, compare

PAYLOAD = "payload"
SCHEMA = "schema"
_WRAPPED_START = b'{"schema"'
_FIELD_SCHEMA = pa.struct([("field", pa.string()), ("type", pa.string()), ("optional", pa.bool_())])
#: The part of Connect's schema the signature needs: the fields of each top-level struct field.
SCHEMA_OUTLINE = pa.struct([("fields", pa.list_(pa.struct([("field", pa.string()),
                                                             ("fields", pa.list_(_FIELD_SCHEMA))])))])
#: Connect's primitive types as Avro types.
_CONNECT_AVRO = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float": "float",
                 "double": "double", "boolean": "boolean", "string": "string", "bytes": "bytes"}

Evolving = dict[int, int]


class ConnectJsonDecoder:
    """Connect's JSON, with or without its schemas, to records of `struct`. With `row_field` and
    the row's Avro `reader_schema`, records whose Connect schema of `row_field` changes the
    reader schema can be deferred (`decode_deferring_evolving`).

    `JsonConverter` writes `{"schema":...,"payload":...}` in that order and without spaces, so
    records that start so are parsed as payload and schema, the others as the payload itself:
    each with the parse schema of its own shape, which keeps the vectorised parse as fast as for
    one shape (declaring both shapes at once makes it about three times slower)."""

    def __init__(self, struct: pa.StructType, row_field: str | None = None, reader_schema: str | None = None,
                 reserved_names: tuple[str, ...] = ()):
        self._type = struct
        self._row_field = row_field
        self._reader = json.loads(reader_schema) if reader_schema else None
        self._reserved = reserved_names
        wrapped = [pa.field(PAYLOAD, struct)]
        if row_field is not None:
            wrapped.append(pa.field(SCHEMA, SCHEMA_OUTLINE))
        self._bare = JsonDecoder(struct)
        self._wrapped = JsonDecoder(pa.struct(wrapped))
        self._changes: dict[str, tuple[int, WriterSchemaChange]] = {}  # signature -> (id, change)
        self.writer_schemas: dict[int, str] = {}  # id -> the row's writer schema, Avro JSON

    def decode(self, raw: pa.Array) -> Decoded:
        value, _, errors = self._parse(raw)
        return value, errors

    def decode_deferring_evolving(self, raw: pa.Array) -> tuple[Decoded, Evolving]:
        value, outline, errors = self._parse(raw)
        if self._row_field is None or self._reader is None or outline is None:
            return (value, errors), {}
        signatures = self._signatures(outline)
        evolving: Evolving = {}
        for signature in pc.unique(signatures.drop_null()).to_pylist():
            rows = np.flatnonzero(np.asarray(pc.fill_null(pc.equal(signatures, signature), False)))
            change = self._change(signature, raw[int(rows[0])].as_py())
            if change is not None:
                evolving.update(dict.fromkeys(rows.tolist(), change))
        if evolving:
            deferred = np.zeros(len(raw), dtype=bool)
            deferred[list(evolving)] = True
            value = pc.if_else(pa.array(deferred), pa.scalar(None, value.type), value)
        return (value, errors), evolving

    def _parse(self, raw: pa.Array) -> tuple[pa.Array, pa.Array | None, dict[int, str]]:
        """The payloads, the schema outlines (None when no record has one) and the reasons of
        the bad records."""
        wrapped = np.asarray(pc.fill_null(pc.equal(pc.binary_slice(raw, 0, len(_WRAPPED_START)), _WRAPPED_START),
                                          False), dtype=bool)
        if not wrapped.any():
            value, errors = self._bare.decode(raw)
            return value, None, errors
        if wrapped.all():
            parsed, errors = self._wrapped.decode(raw)
            return pc.struct_field(parsed, PAYLOAD), self._outline(parsed), errors
        rows, others = np.flatnonzero(wrapped), np.flatnonzero(~wrapped)
        parsed, errors = self._wrapped.decode(raw.take(pa.array(rows)))
        bare, bare_errors = self._bare.decode(raw.take(pa.array(others)))
        length = len(raw)
        value = pc.coalesce(scatter(pc.struct_field(parsed, PAYLOAD), rows, length), scatter(bare, others, length))
        outline = self._outline(parsed)
        errors = {int(rows[row]): reason for row, reason in errors.items()}
        errors.update({int(others[row]): reason for row, reason in bare_errors.items()})
        return value, None if outline is None else scatter(outline, rows, length), errors

    def _outline(self, parsed: pa.StructArray) -> pa.Array | None:
        return pc.struct_field(parsed, SCHEMA) if self._row_field is not None else None

    def _signatures(self, outline: pa.Array) -> pa.Array:
        """Per record, its row's fields as `name:type?` (optional) or `name:type!`, joined; null
        for records without Connect's schema."""
        fields = pc.struct_field(outline, "fields")
        flat = pc.list_flatten(fields)
        owners = pc.list_parent_indices(fields)
        is_row = pc.fill_null(pc.equal(pc.struct_field(flat, "field"), self._row_field), False)
        row_fields, rows = pc.struct_field(flat, "fields").filter(is_row), owners.filter(is_row)
        items = pc.list_flatten(row_fields)
        mark = pc.if_else(pc.fill_null(pc.struct_field(items, "optional"), False), "?", "!")
        texts = pc.binary_join_element_wise(pc.struct_field(items, "field"), ":", pc.struct_field(items, "type"), mark, "")
        lengths = np.asarray(pc.fill_null(pc.list_value_length(row_fields), 0), dtype=np.int32)
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        joined = pc.binary_join(pa.ListArray.from_arrays(offsets, texts), ",")
        return scatter(joined, np.asarray(rows, dtype=np.int64), len(outline))

    def _change(self, signature: str, record: bytes) -> int | None:
        """The id of the record's row schema when it changes the reader schema; None when it fits."""
        known = self._changes.get(signature)
        if known is None:
            writer = row_writer_schema(json.loads(record)[SCHEMA], self._row_field)
            change = compare(self._reader, writer, self._reserved, additions_nullable=True)
            text = json.dumps(writer, separators=(",", ":"), sort_keys=True)
            schema_id = zlib.crc32(text.encode()) & 0x7FFFFFFF
            self.writer_schemas[schema_id] = text
            known = self._changes[signature] = (schema_id, change)
        schema_id, change = known
        return schema_id if change.evolves or change.problem is not None else None


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
