"""The `avro` format: Avro binary without framing, and the reading of one Avro record that
`streamer.decode.confluent` shares.

Avro is read record by record with fastavro and converted to Arrow in one go.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pyarrow as pa
from fastavro.types import Schema as ParsedSchema

from streamer.decode.decoded import Decoded, UndecodableRecordError, decode_each


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


class AvroDecoder:
    """Avro binary without framing, all records written with one writer schema."""

    def __init__(self, writer_schema: str, struct: pa.StructType):
        self._writer = parse_avro(writer_schema)
        self._type = struct

    def decode(self, raw: pa.Array) -> Decoded:
        return decode_each(raw, lambda data: read_avro(data, 0, self._writer, None), self._type)
