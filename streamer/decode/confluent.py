"""The `confluent-avro` format: Confluent's wire format (magic byte, writer schema id, Avro binary),
the writer schemas fetched from the schema registry and cached for the life of the process.

Records are resolved to the reader schema, the value's contract (`streamer.decode.value_schema`).
A record whose writer schema does not fit it is a bad record whose reason names the field; records
whose writer schema evolves it can be left undecoded and returned apart with their schema id, for
the sink to decode once the table's schema has evolved (`streamer.decode.evolution`). A registry
that does not answer raises: that says nothing about the record, so the batch is retried.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.decode.avro import ParsedSchema, parse_avro, read_avro, read_columns
from streamer.decode.debezium import envelope_row
from streamer.decode.decoded import Decoded, UndecodableRecordError, decode_each, gather
from streamer.decode.registry import CONFLUENT_HEADER_SIZE, SchemaRegistryClient, confluent_schema_id
from streamer.decode.value_schema import WriterSchemaChange, compare
from streamer.errors import UnsupportedSchemaTypeError

Evolving = dict[int, int]
"""The rows whose writer schema evolves the reader schema, with its schema id."""


@dataclass(frozen=True)
class _WriterSchema:
    parsed: ParsedSchema  # as fastavro reads with it
    avro: dict  # as registered, to compare with the reader schema
    text: str  # as registered, to read its records a column at a time


_WRITER_SCHEMAS: dict[tuple[str, int], _WriterSchema | str] = {}
"""Writer schemas by (registry URL, schema id) for the life of the process, since an id's
schema never changes: parsed, or why the id cannot be decoded (not Avro, not a valid schema)."""


class ConfluentAvroDecoder:
    """Confluent's wire format: the writer schema's id, then Avro binary, resolved to the reader
    schema (so records written with older or newer compatible schemas read alike). A record whose
    writer schema does not fit the reader schema (`streamer.decode.value_schema`) is a bad record."""

    def __init__(
        self,
        reader_schema: str,
        struct: pa.StructType,
        registry: SchemaRegistryClient,
        reserved_names: tuple[str, ...],
        envelope: bool = False,
    ):
        self._reader = parse_avro(reader_schema)
        self._reader_avro = json.loads(reader_schema)
        self._type = struct
        self._registry = registry
        self._reserved_names = reserved_names
        self._envelope = envelope
        self._changes: dict[int, WriterSchemaChange] = {}
        self.writer_schemas: dict[int, str] = {}  # id -> the writer schema (its row, with an envelope)

    def decode(self, raw: pa.Array) -> Decoded:
        return self._decode(raw, set())

    def decode_deferring_evolving(self, raw: pa.Array) -> tuple[Decoded, Evolving]:
        """Like `decode`, but records whose writer schema evolves the reader schema are left
        undecoded (null, without a reason) and returned apart."""
        unknown_ids: set[int] = set()  # for this batch only: the next may find them registered
        headers = pc.binary_slice(raw, 0, CONFLUENT_HEADER_SIZE)
        evolving_headers = [
            h for h in pc.unique(headers).to_pylist() if h is not None and self._evolves(h, unknown_ids)
        ]
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
            change = self._change(schema_id, self._writer_schema(schema_id, unknown_ids))
            return change.evolves or (self._envelope and change.problem is not None)
        except ValueError:  # an UndecodableRecordError among them
            return False

    def _decode(self, raw: pa.Array, unknown_ids: set[int]) -> Decoded:
        """The records of each writer schema a column at a time where they read so, the others
        (and the records of a batch that reads so only in part) one by one."""
        headers = pc.binary_slice(raw, 0, CONFLUENT_HEADER_SIZE)
        parts = []
        left = np.ones(len(raw), dtype=bool)
        for header in pc.unique(headers).to_pylist():
            rows = np.flatnonzero(np.asarray(pc.fill_null(pc.equal(headers, header), False)))
            columns = self._read_columns(raw, rows, header, unknown_ids) if header is not None else None
            if columns is not None:
                parts.append((rows, columns))
                left[rows] = False
        if not parts:
            return self._decode_each(raw, unknown_ids)
        errors: dict[int, str] = {}
        if left.any():
            rest, errors = self._decode_each(pc.if_else(pa.array(left), raw, pa.scalar(None, raw.type)), unknown_ids)
            rows = np.flatnonzero(left)
            parts.append((rows, rest.take(pa.array(rows))))
        return gather(parts, len(raw)), errors

    def _read_columns(self, raw: pa.Array, rows: np.ndarray, header: bytes, unknown_ids: set[int]) -> pa.Array | None:
        """The records of `rows`, which start with `header`, read a column at a time; None when
        they are to be read one by one: their writer schema unknown, not fitting the reader
        schema or, without an envelope, not the reader schema itself (records are then resolved
        to it, with its defaults)."""
        try:
            schema_id = confluent_schema_id(header)
            writer = self._writer_schema(schema_id, unknown_ids)
        except ValueError:  # an UndecodableRecordError: each record tells it
            return None
        if self._change(schema_id, writer).problem is not None:
            return None
        if not self._envelope and writer.avro != self._reader_avro:
            return None
        return read_columns(raw, rows, CONFLUENT_HEADER_SIZE, writer.text, self._type)

    def _decode_each(self, raw: pa.Array, unknown_ids: set[int]) -> Decoded:
        def read(data: bytes) -> Any:
            schema_id = confluent_schema_id(data)
            writer = self._writer_schema(schema_id, unknown_ids)
            problem = self._change(schema_id, writer).problem
            if problem is not None:
                raise UndecodableRecordError(f"writer schema id {schema_id} {problem}")
            try:
                return read_avro(data, CONFLUENT_HEADER_SIZE, writer.parsed, None if self._envelope else self._reader)
            except UndecodableRecordError as bad:
                raise UndecodableRecordError(f"{bad.reason} (writer schema id {schema_id})") from None

        return decode_each(raw, read, self._type)

    def _change(self, schema_id: int, writer: _WriterSchema) -> WriterSchemaChange:
        change = self._changes.get(schema_id)
        if change is None:
            row = envelope_row(writer.avro) if self._envelope else writer.avro
            if row is None:  # not a change event (a heartbeat): nothing of the row to compare
                change = WriterSchemaChange()
            else:
                change = compare(self._reader_avro, row, self._reserved_names, additions_nullable=self._envelope)
                self.writer_schemas[schema_id] = json.dumps(row, separators=(",", ":"))
            self._changes[schema_id] = change
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
            raise UndecodableRecordError(f"unknown schema id {schema_id} in the schema registry")
        if isinstance(writer, str):
            raise UndecodableRecordError(writer)
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
            return _WriterSchema(parse_avro(text), json.loads(text), text)
        except (ValueError, fastavro.schema.SchemaParseException) as e:
            return f"schema id {schema_id} in the schema registry is not a valid Avro schema: {e}"
