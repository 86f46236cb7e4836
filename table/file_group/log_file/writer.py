"""Writing Hudi log files: each block encoded exactly as Hudi's `HoodieLogFormatWriter` lays it out."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.errors import InvalidRequestError, UnsupportedTypeError
from table.file_group.log_file.avro_binary import (
    EMPTY_PIECE,
    LogSchema,
    conform,
    decimal_to_bytes,
    encode_value,
    fixed_pieces,
    join_pieces,
    log_schema,
    piece_offsets,
    pieces_bytes,
    valid_mask,
    varint_pieces,
)
from table.file_group.log_file.block import (
    BLOCK_CONTENT_VERSION,
    LOG_FORMAT_VERSION,
    MAGIC,
    NULLABLE_STRING,
    ORDERING_WRAPPERS,
    BlockType,
    CommandBlock,
    DataBlock,
    DeleteBlock,
    Header,
    HeaderKey,
    LogBlock,
)
from table.storage.file_io import Storage

PARQUET_COMPRESSION = "snappy"
#: Meta columns whose value is the same in every record of a data block.
_CONSTANT_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name")


def write_log_file(storage: Storage, rel_path: str, blocks: Sequence[LogBlock], durable: bool = True) -> int:
    """Create a new log file holding `blocks`; never appends. Returns the bytes written. With
    `durable` False the caller syncs it (`Storage.sync_files`), with the other files it writes."""
    data = b"".join(part for block in blocks for part in _block_parts(block))
    failpoints.torn_write("logfile.torn_write", data, lambda part: storage.write_new(rel_path, part))
    storage.write_new(rel_path, data, durable=durable)
    return len(data)


def encode_block(block: LogBlock) -> bytes:
    """One block, magic to reverse pointer, exactly as HoodieLogFormatWriter lays it out."""
    return b"".join(_block_parts(block))


_Bytes = Union[bytes, pa.Buffer]


def _block_parts(block: LogBlock) -> list[_Bytes]:
    """The block's bytes in pieces, so large contents are copied once, into the file."""
    if isinstance(block, DataBlock):
        content = _encode_data_content(block)
    elif isinstance(block, DeleteBlock):
        content = [_encode_delete_content(block)]
    elif isinstance(block, CommandBlock):
        content = []
    else:
        raise UnsupportedTypeError(f"cannot write a {type(block).__name__}")
    header = _encode_metadata(block.header)
    footer = _encode_metadata(block.footer)
    content_length = sum(len(part) for part in content)
    size = 4 + 4 + len(header) + 8 + content_length + len(footer) + 8
    return [
        MAGIC,
        struct.pack(">qii", size, LOG_FORMAT_VERSION, int(block.block_type)),
        header,
        struct.pack(">q", content_length),
        *content,
        footer,
        struct.pack(">q", len(MAGIC) + size),
    ]


def _encode_metadata(metadata: Header) -> bytes:
    parts = [struct.pack(">i", len(metadata))]
    for key, value in metadata.items():
        raw = value.encode("utf-8")
        parts.append(struct.pack(">ii", int(key), len(raw)))
        parts.append(raw)
    return b"".join(parts)


def _encode_data_content(block: DataBlock) -> list[_Bytes]:
    schema_json = block.header.get(HeaderKey.SCHEMA)
    if schema_json is None:
        raise InvalidRequestError("a data block needs the SCHEMA header")
    schema = log_schema(schema_json)
    table = conform(block.records, schema.arrow)
    if block.block_type == BlockType.PARQUET_DATA:
        return [_encode_parquet(table, schema_json)]
    return _encode_avro_records(table, schema)


def _encode_parquet(table: pa.Table, schema_json: str) -> _Bytes:
    """A standalone Parquet file; its footer carries the Avro schema like parquet-avro's."""
    if table.num_rows == 0:
        return b""
    table = table.replace_schema_metadata({"parquet.avro.schema": schema_json, "writer.model.name": "avro"})
    sink = pa.BufferOutputStream()
    # Readers take a block whole, so statistics would only cost time; the meta columns that are
    # the same in every row of a block are the ones a dictionary surely pays for.
    constant = [c for c in _CONSTANT_META_COLUMNS if c in table.column_names]
    pq.write_table(table, sink, compression=PARQUET_COMPRESSION, write_statistics=False, use_dictionary=constant)
    return sink.getvalue()


def _encode_avro_records(table: pa.Table, schema: LogSchema) -> list[_Bytes]:
    """Block version, record count, then each record's length and Avro binary encoding."""
    n = table.num_rows
    pieces: list[pa.Array] = []
    for column, avro_field in zip(table.columns, schema.avro["fields"]):
        pieces += encode_value(column.combine_chunks(), avro_field["type"], schema.names)
    lengths = sum((np.diff(piece_offsets(piece)) for piece in pieces), np.zeros(n, np.int64))
    length_prefix = fixed_pieces(lengths.astype(">i4").view(np.uint8).reshape(n, 4))
    return [struct.pack(">ii", BLOCK_CONTENT_VERSION, n), pieces_bytes(join_pieces([length_prefix, *pieces], n))]


_WRAPPER_INDEX = {name: i + 1 for i, name in enumerate(ORDERING_WRAPPERS)}  # branch 0 is null


def _wrapper_for(t: pa.DataType) -> str:
    """The wrapper Hudi's `wrapValueIntoAvro` picks for the Java type this Arrow type reads as."""
    if pa.types.is_boolean(t):
        return "BooleanWrapper"
    if t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16()):
        return "IntWrapper"
    if t in (pa.int64(), pa.uint32()):
        return "LongWrapper"
    if pa.types.is_floating(t):
        return "DoubleWrapper" if t == pa.float64() else "FloatWrapper"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BytesWrapper"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "StringWrapper"
    if pa.types.is_date(t):
        return "DateWrapper"
    if pa.types.is_decimal(t):
        return "DecimalWrapper"
    if pa.types.is_time(t):
        return "TimeMicrosWrapper"
    if pa.types.is_timestamp(t):
        return "TimestampMicrosWrapper"
    raise UnsupportedTypeError(f"Hudi has no ordering value wrapper for {t}")


def _encode_ordering_values(values: pa.Array | None, n: int) -> list[pa.Array]:
    """Pieces of the orderingVal union: branch index, then the wrapped value."""
    if values is None:
        return [varint_pieces(np.full(n, _WRAPPER_INDEX["IntWrapper"])), varint_pieces(np.zeros(n, np.int64))]
    name = _wrapper_for(values.type)
    avro, arrow_type = ORDERING_WRAPPERS[name]
    if pa.types.is_timestamp(arrow_type):
        arrow_type = pa.timestamp("us", tz=values.type.tz)
    wire = values.cast(arrow_type)
    if pa.types.is_decimal(arrow_type):
        wire = decimal_to_bytes(wire)
    value = join_pieces(encode_value(wire, avro, {}), n)
    index = varint_pieces(np.where(valid_mask(values), _WRAPPER_INDEX[name], 0))
    if values.null_count:
        value = pc.if_else(values.is_valid(), value, EMPTY_PIECE)
    return [index, value]


def _encode_delete_content(block: DeleteBlock) -> bytes:
    """Block version, payload length, then the HoodieDeleteRecordList datum: one array block."""
    n = len(block.record_keys)
    items = join_pieces(
        encode_value(block.record_keys, NULLABLE_STRING, {})
        + encode_value(block.partition_paths, NULLABLE_STRING, {})
        + _encode_ordering_values(block.ordering_values, n),
        n,
    )
    # One array block: the item count, the items, then the 0 count that ends the array.
    payload = b"".join([pieces_bytes(varint_pieces(np.array([n]))), pieces_bytes(items), b"\0"]) if n else b"\0"
    return struct.pack(">ii", BLOCK_CONTENT_VERSION, len(payload)) + payload
