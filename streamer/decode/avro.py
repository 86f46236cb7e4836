"""The `avro` format: Avro binary without framing, and the reading of Avro records that
`streamer.decode.confluent` shares.

Records of one writer schema are read a column at a time (`read_columns`) when their fields
are the Arrow types the table wants; otherwise, and to find the bad ones among them, record by
record with fastavro, converted to Arrow in one go.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastavro.types import Schema as ParsedSchema

from streamer.decode.decoded import Decoded, UndecodableRecordError, decode_each, scatter
from table import FormatError, log_schema, read_avro_records

#: Arrow types a field may be read as and still give the table the type it wants, exactly.
_WIDENINGS = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}


def parse_avro(schema_json: str) -> ParsedSchema:
    """fastavro's parsed schema, with uuid strings kept as strings (their Arrow type)."""
    return fastavro.parse_schema(json.loads(schema_json, object_hook=_without_uuid_logical_type))


def _without_uuid_logical_type(node: dict) -> dict:
    return {k: v for k, v in node.items() if k != "logicalType"} if node.get("logicalType") == "uuid" else node


def read_avro(data: bytes, start: int, writer: ParsedSchema, reader: ParsedSchema | None) -> Any:
    """The Avro record in `data` from `start`, which must use exactly the bytes to the end."""
    buffer = io.BytesIO(data)
    buffer.seek(start)
    try:
        record = fastavro.schemaless_reader(buffer, writer, reader)
    except EOFError:
        raise UndecodableRecordError(
            f"invalid Avro: the record runs past the end of its {len(data) - start} bytes"
        ) from None
    except Exception as e:  # noqa: BLE001 - malformed bytes surface as whatever fastavro's reading code hit
        raise UndecodableRecordError(f"invalid Avro: {type(e).__name__}: {e}") from None
    if buffer.tell() != len(data):
        raise UndecodableRecordError(f"invalid Avro: {len(data) - buffer.tell()} bytes left after the record")
    return record


def read_columns(
    raw: pa.Array, rows: np.ndarray, start: int, writer_schema: str, struct: pa.StructType
) -> pa.Array | None:
    """The records of `rows` (values that are not null), each from byte `start` of its value to
    its end, written with the record schema `writer_schema`, read a column at a time as `struct`:
    None when they cannot be, for the caller to read them one by one. Fields are matched by name,
    as when the records read by fastavro convert to Arrow: a field the writer lacks is null, one
    `struct` lacks is left out, stepped over unread (so bytes there that fastavro would reject,
    a string that is not UTF-8, do not make its record bad unless a neighbour sends the records
    one by one). A field is read only as the type the table wants, or one that widens to it
    exactly: any other type (or a value the type rejects) and the records are read one by one,
    where each conversion has its own rules and reasons."""
    if raw.type != pa.binary():  # Kafka's values; the offsets below are 32-bit
        return None
    try:
        schema = log_schema(writer_schema)
        offsets = np.frombuffer(raw.buffers()[1], np.int32)[raw.offset : raw.offset + len(raw) + 1]
        content = raw.buffers()[2] or pa.py_buffer(b"")
        records, ends = read_avro_records(content, offsets[rows].astype(np.int64) + start, schema, struct)
    except (FormatError, ValueError, pa.ArrowException):  # not records of that schema, or one we cannot read
        return None
    if not np.array_equal(ends, offsets[rows + 1]):
        return None
    read = pa.StructArray.from_arrays([column.chunk(0) for column in records.columns], fields=list(records.schema))
    return _conformed(read, struct)


def _conformed(values: pa.Array, arrow_type: pa.DataType) -> pa.Array | None:
    """`values` as `arrow_type`, when that changes no value: structs field by field, by name."""
    if values.type == arrow_type:
        return values
    if (values.type, arrow_type) in _WIDENINGS:
        return values.cast(arrow_type)
    if pa.types.is_struct(values.type) and pa.types.is_struct(arrow_type):
        names = [f.name for f in values.type]
        children = []
        for field in arrow_type:
            if field.name not in names:
                children.append(pa.nulls(len(values), field.type))
                continue
            child = _conformed(pc.struct_field(values, names.index(field.name)), field.type)
            if child is None:
                return None
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=values.is_null())
    return None


class AvroDecoder:
    """Avro binary without framing, all records written with one writer schema."""

    def __init__(self, writer_schema: str, struct: pa.StructType):
        self._writer_text = writer_schema
        self._writer = parse_avro(writer_schema)
        self._type = struct

    def decode(self, raw: pa.Array) -> Decoded:
        rows = np.flatnonzero(np.asarray(raw.is_valid()))
        columns = read_columns(raw, rows, 0, self._writer_text, self._type)
        if columns is not None:
            return scatter(columns, rows, len(raw)), {}
        return decode_each(raw, lambda data: read_avro(data, 0, self._writer, None), self._type)
