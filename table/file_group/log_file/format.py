"""Hudi log files (log format version 1), as Hudi 0.14/0.15 writes and reads them.

A log file is a sequence of blocks. Each block, all integers big-endian:

    "#HUDI#" | int64 block size (bytes after this field) | int32 log format version (1)
    | int32 block type | header | int64 content length | content | footer
    | int64 reverse pointer (bytes of the block before this field, magic included)

Header and footer are `int32 count` then `count` times `int32 key, int32 length, UTF-8 value`.
Content per block type:

- Avro data block (3): int32 block version (3), int32 record count, then per record an int32
  length and the record's Avro binary encoding under the header's SCHEMA.
- Parquet data block (5): a whole Parquet file (empty when there are no records).
- Delete block (1): int32 block version (3), int32 length, then a `HoodieDeleteRecordList`
  in Avro binary; ordering values are wrapped in Hudi's `*Wrapper` records.
- Command block (0): empty; the header says which command (0 = rollback) and its target.

Reading tolerates torn writes the way Hudi's `HoodieLogFileReader` does: a block whose size
runs past the end of the file, whose reverse pointer disagrees with its size, or which is not
followed by the next magic, becomes a `CorruptBlock` spanning up to the next magic, and the scan
resumes there. Blocks that pass that check but cannot be decoded are `CorruptBlock`s too, so a
reader gets every intact block and never an exception for a damaged file.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Context, Decimal
from enum import IntEnum
from functools import lru_cache
from typing import Any, Union

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.config.choices import LogBlockFormat
from table.schema import AvroSchema, arrow_schema_from_avro
from table.storage.file_io import Storage

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
BLOCK_CONTENT_VERSION = 3
"""HoodieLogBlock.version: Avro data and delete blocks start with it; hudi-rs reads only 3."""

PARQUET_COMPRESSION = "snappy"
#: Meta columns whose value is the same in every record of a data block.
_CONSTANT_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name")

# A block without header entries, content or footer entries still has: format version, type,
# header count, content length, footer count, reverse pointer.
_MIN_BLOCK_SIZE = 4 + 4 + 4 + 8 + 4 + 8


class BlockType(IntEnum):
    """HoodieLogBlockType; the ordinal is what the file stores."""

    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    """HeaderMetadataType; the ordinal is what the file stores (footers use the same keys)."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


class CommandType(IntEnum):
    """HoodieCommandBlockTypeEnum, stored as its ordinal in the COMMAND_BLOCK_TYPE header."""

    ROLLBACK = 0


Header = dict[HeaderKey, str]

DATA_BLOCK_TYPES: dict[LogBlockFormat, BlockType] = {
    LogBlockFormat.AVRO: BlockType.AVRO_DATA,
    LogBlockFormat.PARQUET: BlockType.PARQUET_DATA,
}
"""Values of `hoodie.logfile.data.block.format` and the block type each writes."""


class _HasHeader:
    """What every block answers from its header."""

    header: Header

    @property
    def instant(self) -> str | None:
        """The instant that wrote the block (INSTANT_TIME)."""
        return self.header.get(HeaderKey.INSTANT_TIME)


@dataclass
class DataBlock(_HasHeader):
    """Records of one write (meta fields included), laid out by the header's SCHEMA."""

    records: pa.Table
    header: Header
    block_type: BlockType = BlockType.AVRO_DATA
    footer: Header = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.block_type not in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
            raise ValueError(f"a data block is Avro or Parquet, not {self.block_type!r}")

    @classmethod
    def create(cls, records: pa.Table, instant: str, schema_json: str,
               fmt: LogBlockFormat = LogBlockFormat.AVRO) -> DataBlock:
        """The block Hudi's writer makes: header INSTANT_TIME and SCHEMA (the log schema, meta
        fields first); `fmt` is a `hoodie.logfile.data.block.format` value."""
        header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema_json}
        return cls(records, header, DATA_BLOCK_TYPES[fmt])


@dataclass
class DeleteBlock(_HasHeader):
    """Keys deleted by one write (columns may be given as lists). Without ordering values every
    delete carries Hudi's default ordering value (int 0), as Hudi's own deletes do; a null
    ordering value is written as null. The Arrow type of the ordering values picks Hudi's
    wrapper: int32 -> Int, int64 -> Long, timestamp -> TimestampMicros, decimal -> Decimal..."""

    record_keys: pa.Array
    partition_paths: pa.Array
    ordering_values: pa.Array | None
    header: Header
    footer: Header = field(default_factory=dict)

    block_type = BlockType.DELETE

    def __post_init__(self) -> None:
        self.record_keys = _as_array(self.record_keys, pa.string())
        self.partition_paths = _as_array(self.partition_paths, pa.string())
        if self.ordering_values is not None:
            self.ordering_values = _as_array(self.ordering_values, None)
        lengths = {len(self.record_keys), len(self.partition_paths)}
        if self.ordering_values is not None:
            lengths.add(len(self.ordering_values))
        if len(lengths) != 1:
            raise ValueError(f"delete block columns differ in length: {sorted(lengths)}")

    @classmethod
    def create(
        cls,
        record_keys: Any,
        partition_paths: Any,
        ordering_values: Any = None,
        *,
        instant: str,
        schema_json: str | None = None,
    ) -> DeleteBlock:
        """The block Hudi's writer makes: header INSTANT_TIME, and SCHEMA when given (Hudi adds
        it; no reader needs it for deletes)."""
        header = {HeaderKey.INSTANT_TIME: instant}
        if schema_json is not None:
            header[HeaderKey.SCHEMA] = schema_json
        return cls(record_keys, partition_paths, ordering_values, header)

    @property
    def records(self) -> pa.Table:
        """record_key, partition_path, ordering_value (Hudi's default 0 when none was given)."""
        ordering = self.ordering_values
        if ordering is None:
            ordering = pa.array(np.zeros(len(self.record_keys), dtype=np.int32))
        return pa.table(
            {"record_key": self.record_keys, "partition_path": self.partition_paths, "ordering_value": ordering}
        )


@dataclass
class CommandBlock(_HasHeader):
    """A command to the log scanner; Hudi has one, rollback of the blocks of TARGET_INSTANT_TIME."""

    header: Header
    footer: Header = field(default_factory=dict)

    block_type = BlockType.COMMAND

    @classmethod
    def rollback(cls, instant: str, target_instant: str) -> CommandBlock:
        """Written by the rollback at `instant` to void the blocks of `target_instant`."""
        return cls(
            {
                HeaderKey.INSTANT_TIME: instant,
                HeaderKey.TARGET_INSTANT_TIME: target_instant,
                HeaderKey.COMMAND_BLOCK_TYPE: str(int(CommandType.ROLLBACK)),
            }
        )

    @property
    def command_type(self) -> CommandType:
        return CommandType(int(self.header[HeaderKey.COMMAND_BLOCK_TYPE]))

    @property
    def target_instant(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)


@dataclass
class CorruptBlock(_HasHeader):
    """Bytes from `offset` to the next magic (or the end) that do not form a readable block."""

    offset: int
    data: bytes
    reason: str
    header: Header = field(default_factory=dict)

    block_type = BlockType.CORRUPT


LogBlock = Union[DataBlock, DeleteBlock, CommandBlock, CorruptBlock]


# ---------------------------------------------------------------------------------------------
# Writing


def write_log_file(storage: Storage, rel_path: str, blocks: Sequence[LogBlock]) -> int:
    """Create a new log file holding `blocks`; never appends. Returns the bytes written."""
    data = b"".join(part for block in blocks for part in _block_parts(block))
    failpoints.torn_write("logfile.torn_write", data, lambda part: storage.write_new(rel_path, part))
    storage.write_new(rel_path, data)
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
        raise TypeError(f"cannot write a {type(block).__name__}")
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
        raise ValueError("a data block needs the SCHEMA header")
    schema = _log_schema(schema_json)
    table = _conform(block.records, schema.arrow)
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


def _encode_avro_records(table: pa.Table, schema: _LogSchema) -> list[_Bytes]:
    """Block version, record count, then each record's length and Avro binary encoding."""
    n = table.num_rows
    pieces: list[pa.Array] = []
    for column, avro_field in zip(table.columns, schema.avro["fields"]):
        pieces += _encode_value(column.combine_chunks(), avro_field["type"], schema.names)
    lengths = sum((np.diff(_offsets(piece)) for piece in pieces), np.zeros(n, np.int64))
    length_prefix = _fixed_pieces(lengths.astype(">i4").view(np.uint8).reshape(n, 4))
    return [struct.pack(">ii", BLOCK_CONTENT_VERSION, n), _pieces_bytes(_join([length_prefix, *pieces], n))]


# The 0.14/0.15 HoodieDeleteRecordList: the ordering value is a union of wrapper records, one
# per Java type; the branch index is what the file stores, so the order is fixed. Each wrapper
# holds one `value` field: its Avro type on the wire (Java's decimal is decimal(30, 15) on bytes,
# its time a time-micros long) and the Arrow type it reads as.
_WRAPPERS: dict[str, tuple[str, pa.DataType]] = {
    "BooleanWrapper": ("boolean", pa.bool_()),
    "IntWrapper": ("int", pa.int32()),
    "LongWrapper": ("long", pa.int64()),
    "FloatWrapper": ("float", pa.float32()),
    "DoubleWrapper": ("double", pa.float64()),
    "BytesWrapper": ("bytes", pa.binary()),
    "StringWrapper": ("string", pa.string()),
    "DateWrapper": ("int", pa.date32()),
    "DecimalWrapper": ("bytes", pa.decimal128(30, 15)),
    "TimeMicrosWrapper": ("long", pa.time64("us")),
    "TimestampMicrosWrapper": ("long", pa.timestamp("us", tz="UTC")),
}
_WRAPPER_INDEX = {name: i + 1 for i, name in enumerate(_WRAPPERS)}  # branch 0 is null
_WRAPPER_NS = "org.apache.hudi.avro.model"
_NULLABLE_STRING = ["null", "string"]
_DELETE_RECORD_LIST = fastavro.parse_schema(
    {
        "type": "record",
        "name": "HoodieDeleteRecordList",
        "namespace": _WRAPPER_NS,
        "fields": [
            {
                "name": "deleteRecordList",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieDeleteRecord",
                        "fields": [
                            {"name": "recordKey", "type": _NULLABLE_STRING, "default": None},
                            {"name": "partitionPath", "type": _NULLABLE_STRING, "default": None},
                            {
                                "name": "orderingVal",
                                "type": ["null"]
                                + [
                                    {"type": "record", "name": name, "fields": [{"name": "value", "type": avro}]}
                                    for name, (avro, _) in _WRAPPERS.items()
                                ],
                                "default": None,
                            },
                        ],
                    },
                },
            }
        ],
    }
)


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
    raise TypeError(f"Hudi has no ordering value wrapper for {t}")


def _encode_ordering_values(values: pa.Array | None, n: int) -> list[pa.Array]:
    """Pieces of the orderingVal union: branch index, then the wrapped value."""
    if values is None:
        return [_varint_pieces(np.full(n, _WRAPPER_INDEX["IntWrapper"])), _varint_pieces(np.zeros(n, np.int64))]
    name = _wrapper_for(values.type)
    avro, arrow_type = _WRAPPERS[name]
    if pa.types.is_timestamp(arrow_type):
        arrow_type = pa.timestamp("us", tz=values.type.tz)
    wire = values.cast(arrow_type)
    if pa.types.is_decimal(arrow_type):
        wire = _decimal_to_bytes(wire)
    value = _join(_encode_value(wire, avro, {}), n)
    index = _varint_pieces(np.where(_valid_mask(values), _WRAPPER_INDEX[name], 0))
    if values.null_count:
        value = pc.if_else(values.is_valid(), value, _EMPTY)
    return [index, value]


def _encode_delete_content(block: DeleteBlock) -> bytes:
    """Block version, payload length, then the HoodieDeleteRecordList datum: one array block."""
    n = len(block.record_keys)
    items = _join(
        _encode_value(block.record_keys, _NULLABLE_STRING, {})
        + _encode_value(block.partition_paths, _NULLABLE_STRING, {})
        + _encode_ordering_values(block.ordering_values, n),
        n,
    )
    # One array block: the item count, the items, then the 0 count that ends the array.
    payload = b"".join([_pieces_bytes(_varint_pieces(np.array([n]))), _pieces_bytes(items), b"\0"]) if n else b"\0"
    return struct.pack(">ii", BLOCK_CONTENT_VERSION, len(payload)) + payload


# ---------------------------------------------------------------------------------------------
# Reading


def read_log_file(storage: Storage, rel_path: str) -> list[LogBlock]:
    """Every block of a log file, damaged stretches as `CorruptBlock`s; never raises for them."""
    return list(parse_log_bytes(storage.read_bytes(rel_path)))


def parse_log_bytes(data: bytes) -> Iterator[LogBlock]:
    """The blocks in the bytes of a log file, resyncing at the next magic after damage."""
    pos, size = 0, len(data)
    while pos < size:
        if data.startswith(MAGIC, pos):
            end = _checked_block_end(data, pos)
            if end is not None:
                try:
                    block: LogBlock = _decode_block(memoryview(data)[pos + len(MAGIC) + 8 : end])
                except Exception as e:  # noqa: BLE001 - any undecodable block is a corrupt block
                    block = CorruptBlock(pos, data[pos:end], f"undecodable block: {type(e).__name__}: {e}")
                yield block
                pos = end
                continue
            reason = "block size disagrees with the file (torn write?)"
        else:
            reason = "no magic where a block starts"
        next_magic = data.find(MAGIC, pos + 1)
        end = size if next_magic < 0 else next_magic
        yield CorruptBlock(pos, data[pos:end], reason)
        pos = end


def _checked_block_end(data: bytes, pos: int) -> int | None:
    """End of the block at `pos` if its framing is intact (HoodieLogFileReader#isBlockCorrupted):
    the size stays inside the file, the reverse pointer agrees with it, and the next magic (or
    the end of the file) follows."""
    size_at = pos + len(MAGIC)
    if size_at + 8 > len(data):
        return None
    (block_size,) = struct.unpack_from(">q", data, size_at)
    end = size_at + 8 + block_size
    if block_size < _MIN_BLOCK_SIZE or end > len(data):
        return None
    (reverse_pointer,) = struct.unpack_from(">q", data, end - 8)
    if reverse_pointer != len(MAGIC) + block_size:
        return None
    if len(data) - end >= len(MAGIC) and not data.startswith(MAGIC, end):
        return None
    return end


class _Cursor:
    """Bounds-checked reads from a block's bytes."""

    def __init__(self, data: memoryview):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"needs {n} bytes at {self.pos}, block has {len(self.data)}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def metadata(self) -> Header:
        entries = {}
        for _ in range(self.int32()):
            key = HeaderKey(self.int32())
            entries[key] = str(self.take(self.int32()), "utf-8")
        return entries


def _decode_block(body: memoryview) -> LogBlock:
    """A block from its bytes after the size field; raises when they do not decode."""
    cur = _Cursor(body)
    version = cur.int32()
    if version != LOG_FORMAT_VERSION:
        raise ValueError(f"log format version {version} is not supported")
    block_type = BlockType(cur.int32())
    header = cur.metadata()
    content = cur.take(cur.int64())
    footer = cur.metadata()
    cur.int64()  # reverse pointer, checked with the framing
    if cur.pos != len(body):
        raise ValueError(f"{len(body) - cur.pos} stray bytes after the block")
    if block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
        return DataBlock(_decode_data_content(content, header, block_type), header, block_type, footer)
    if block_type == BlockType.DELETE:
        keys, paths, ordering = _decode_delete_content(content)
        return DeleteBlock(keys, paths, ordering, header, footer)
    if block_type == BlockType.COMMAND:
        block = CommandBlock(header, footer)
        block.command_type  # noqa: B018 - fails for a command Hudi does not know
        return block
    raise ValueError(f"{block_type.name} blocks are not supported")


def _decode_data_content(content: memoryview, header: Header, block_type: BlockType) -> pa.Table:
    schema = _log_schema(header[HeaderKey.SCHEMA])
    if block_type == BlockType.PARQUET_DATA:
        if len(content) == 0:
            return schema.arrow.empty_table()
        table = pq.read_table(pa.BufferReader(pa.py_buffer(content)))
        return _conform(table.replace_schema_metadata(None), schema.arrow)
    return _decode_avro_records(content, schema)


def _decode_avro_records(content: memoryview, schema: _LogSchema) -> pa.Table:
    cur = _Cursor(content)
    version = cur.int32()
    if version not in (2, BLOCK_CONTENT_VERSION):  # versions with a record count
        raise ValueError(f"Avro data block version {version} is not supported")
    count = cur.int32()
    lengths = []
    length_at = struct.Struct(">i").unpack_from
    pos = cur.pos
    for _ in range(count):  # each record's place follows from the lengths before it
        (length,) = length_at(content, pos)
        lengths.append(length)
        pos += 4 + length
    if pos != len(content):
        raise ValueError(f"records end at {pos}, content at {len(content)}")
    sizes = np.array(lengths, dtype=np.int64) + 4
    ends = cur.pos + np.cumsum(sizes)
    positions = ends - sizes + 4
    reader = _AvroColumnReader(content, schema.names)
    columns = []
    for avro_field, arrow_field in zip(schema.avro["fields"], schema.arrow):
        column, positions = reader.value(positions, avro_field["type"], arrow_field.type)
        columns.append(column)
    if not np.array_equal(positions, ends):
        raise ValueError("records do not decode to their stated lengths")
    return pa.Table.from_arrays(columns, schema=schema.arrow)


def _decode_delete_content(content: memoryview) -> tuple[pa.Array, pa.Array, pa.Array]:
    cur = _Cursor(content)
    version = cur.int32()
    if version != BLOCK_CONTENT_VERSION:
        raise ValueError(f"delete block version {version} is not supported (Java-serialized)")
    body = io.BytesIO(cur.take(cur.int32()))
    records = fastavro.schemaless_reader(body, _DELETE_RECORD_LIST, None, return_record_name=True)
    records = records["deleteRecordList"]
    kinds = {r["orderingVal"][0].rsplit(".", 1)[-1] for r in records if r["orderingVal"] is not None}
    ordering_type = _common_ordering_type([_WRAPPERS[k][1] for k in kinds])
    values = [None if r["orderingVal"] is None else r["orderingVal"][1]["value"] for r in records]
    if pa.types.is_decimal(ordering_type):
        ordering = _bytes_to_decimal(pa.array(values, pa.binary()), ordering_type)
    elif pa.types.is_temporal(ordering_type):
        storage = pa.int32() if pa.types.is_date32(ordering_type) else pa.int64()
        ordering = pa.array(values, storage).cast(ordering_type)
    else:
        ordering = pa.array(values, ordering_type)
    return (
        pa.array([r["recordKey"] for r in records], pa.string()),
        pa.array([r["partitionPath"] for r in records], pa.string()),
        ordering,
    )


def _common_ordering_type(types: list[pa.DataType]) -> pa.DataType:
    """One Arrow type for a block's ordering values (Hudi writes one Java type per block, but
    default int 0 may sit beside the ordering field's type)."""
    distinct = set(types)
    if not distinct:
        return pa.int32()
    if len(distinct) == 1:
        return distinct.pop()
    if distinct <= {pa.int32(), pa.int64()}:
        return pa.int64()
    if distinct <= {pa.int32(), pa.float32(), pa.float64()}:
        return pa.float64()
    raise ValueError(f"delete block mixes ordering value types {sorted(map(str, distinct))}")


# ---------------------------------------------------------------------------------------------
# Avro binary, a column at a time
#
# fastavro costs tens of microseconds per record and a block holds up to a million records, so
# records are encoded and decoded column-wise with numpy and Arrow. Encoding turns each Avro
# value of n rows into n byte strings ("pieces", a binary array); a record is its fields' pieces
# joined. Decoding walks the schema with one read position per row.


@dataclass(frozen=True)
class _LogSchema:
    """A block's SCHEMA, parsed once: the Avro record, its named types and its Arrow schema."""

    avro: AvroSchema
    names: dict[str, Any]
    arrow: pa.Schema


@lru_cache(maxsize=64)
def _log_schema(schema_json: str) -> _LogSchema:
    avro = json.loads(schema_json)
    names: dict[str, Any] = {}
    _collect_names(avro, names)
    return _LogSchema(avro, names, arrow_schema_from_avro(avro))


def _collect_names(avro: Any, names: dict[str, Any]) -> None:
    """Named types (record, enum, fixed) by full and short name, to resolve references."""
    if isinstance(avro, list):
        for branch in avro:
            _collect_names(branch, names)
    elif isinstance(avro, dict):
        if avro.get("type") in ("record", "enum", "fixed"):
            names[avro["name"]] = avro
            names[avro["name"].rsplit(".", 1)[-1]] = avro
            if "namespace" in avro and "." not in avro["name"]:
                names[f"{avro['namespace']}.{avro['name']}"] = avro
        for f in avro.get("fields", ()):
            _collect_names(f["type"], names)
        for key in ("items", "values"):
            if key in avro:
                _collect_names(avro[key], names)


def _resolve(avro: Any, names: dict[str, Any]) -> Any:
    if isinstance(avro, str) and avro not in _AVRO_PRIMITIVES:
        return names.get(avro) or names[avro.rsplit(".", 1)[-1]]
    return avro


_AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_EMPTY = pa.scalar(b"", pa.binary())


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The columns of `schema`, in its order and types (extra columns are dropped)."""
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise ValueError(f"records lack columns of the block schema: {missing}")
    columns = [table.column(f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _offsets(pieces: pa.Array) -> np.ndarray:
    return np.frombuffer(pieces.buffers()[1], dtype=np.int32)[pieces.offset : pieces.offset + len(pieces) + 1]


def _pieces_bytes(pieces: pa.Array) -> _Bytes:
    """All pieces back to back (no copy)."""
    if len(pieces) == 0:
        return b""
    offsets = _offsets(pieces)
    return pieces.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def _pieces(data: np.ndarray | pa.Buffer, offsets: np.ndarray) -> pa.Array:
    data_buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(np.ascontiguousarray(data))
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, pa.py_buffer(offsets.astype(np.int32)), data_buffer])


def _fixed_pieces(matrix: np.ndarray) -> pa.Array:
    n, width = matrix.shape
    return _pieces(matrix, np.arange(n + 1, dtype=np.int64) * width)


def _masked_pieces(matrix: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Row i is the first lengths[i] bytes of matrix row i."""
    keep = np.arange(matrix.shape[1]) < lengths[:, None]
    return _pieces(matrix[keep], np.concatenate([[0], np.cumsum(lengths)]))


def _join(pieces: list[pa.Array], n: int) -> pa.Array:
    if not pieces:
        return _pieces(np.empty(0, np.uint8), np.zeros(n + 1, np.int64))
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, _EMPTY)


_SEVEN_BITS = np.arange(10, dtype=np.uint64) * np.uint64(7)


def _varint_pieces(values: np.ndarray) -> pa.Array:
    """Avro's zig-zag varints of int64 values."""
    v = values.astype(np.int64)
    zigzag = ((v << 1) ^ (v >> 63)).view(np.uint64)
    if len(v) == 0 or zigzag.max() < 0x80:  # one byte each: union branches, small counts
        return _fixed_pieces(zigzag.astype(np.uint8)[:, None])
    lengths = np.ones(len(v), np.int64)
    for k in range(1, 10):
        lengths += zigzag >= np.uint64(1) << np.uint64(7 * k)
    width = int(lengths.max())
    groups = ((zigzag[:, None] >> _SEVEN_BITS[:width]) & np.uint64(0x7F)).astype(np.uint8)
    groups |= (np.arange(width) < (lengths - 1)[:, None]).astype(np.uint8) << 7
    return _masked_pieces(groups, lengths)


def _valid_mask(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))


def _encode_value(arr: pa.Array, avro: Any, names: dict[str, Any]) -> list[pa.Array]:
    """Pieces that, joined, are the Avro encoding of each row of `arr` (nulls only in unions)."""
    avro = _resolve(avro, names)
    n = len(arr)
    if isinstance(avro, list):
        return _encode_union(arr, avro, names)
    kind = avro if isinstance(avro, str) else avro["type"]
    logical = None if isinstance(avro, str) else avro.get("logicalType")
    if kind == "null":
        return []
    if kind == "boolean":
        return [_fixed_pieces(arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)[:, None])]
    if kind in ("int", "long"):
        if pa.types.is_date32(arr.type) or pa.types.is_time32(arr.type):
            arr = arr.cast(pa.int32())  # Arrow casts these only to their own storage width
        return [_varint_pieces(arr.cast(pa.int64()).fill_null(0).to_numpy())]
    if kind in ("float", "double"):
        width = 4 if kind == "float" else 8
        values = arr.cast(pa.float32() if kind == "float" else pa.float64()).fill_null(0)
        return [_fixed_pieces(values.to_numpy().astype(f"<f{width}").view(np.uint8).reshape(n, width))]
    if kind in ("string", "bytes"):
        if logical == "decimal":
            arr = _decimal_to_bytes(arr)
        values = arr.cast(pa.binary()).fill_null(b"")
        return [_varint_pieces(np.diff(_offsets(values))), values]
    if kind == "fixed":
        if logical == "decimal":
            arr = _decimal_to_fixed(arr, avro["size"])
        width = avro["size"]
        data = arr.buffers()[1].slice(arr.offset * width, n * width)
        return [_pieces(data, np.arange(n + 1, dtype=np.int64) * width)]
    if kind == "enum":
        index = pc.index_in(arr, value_set=pa.array(avro["symbols"]))
        if index.null_count > arr.null_count:
            raise ValueError(f"values outside enum {avro['name']}")
        return [_varint_pieces(index.fill_null(0).to_numpy())]
    if kind == "record":
        pieces = []
        for i, f in enumerate(avro["fields"]):
            pieces += _encode_value(arr.field(i), f["type"], names)
        return pieces
    if kind == "array":
        return _encode_blocks(arr, _encode_value(arr.values, avro["items"], names))
    if kind == "map":
        entries = arr.values
        keys = _encode_value(entries.field(0), "string", names)
        return _encode_blocks(arr, keys + _encode_value(entries.field(1), avro["values"], names))
    raise ValueError(f"unsupported Avro type {avro!r}")


def _encode_union(arr: pa.Array, branches: list[Any], names: dict[str, Any]) -> list[pa.Array]:
    """Branch index, then the value; only [null, T] unions, the kind Hudi table schemas use."""
    values = [i for i, b in enumerate(branches) if b != "null"]
    if len(values) != 1:
        raise ValueError(f"only unions of null and one type are supported, not {branches}")
    value = _join(_encode_value(arr, branches[values[0]], names), len(arr))
    if arr.null_count == 0:
        return [_varint_pieces(np.full(len(arr), values[0])), value]
    if "null" not in branches:
        raise ValueError(f"null values for non-nullable {branches}")
    index = np.where(_valid_mask(arr), values[0], branches.index("null"))
    return [_varint_pieces(index), pc.if_else(arr.is_valid(), value, _EMPTY)]


def _encode_blocks(arr: pa.Array, item_pieces: list[pa.Array]) -> list[pa.Array]:
    """An array or map value: one block of all items (count, items), then the 0 end marker."""
    items = _join(item_pieces, len(arr.values))
    list_offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    counts = np.diff(list_offsets)
    rows = _pieces(items.buffers()[2] or pa.py_buffer(b""), _offsets(items)[list_offsets])
    end_marker = _masked_pieces(np.zeros((len(arr), 1), np.uint8), (counts > 0).astype(np.int64))
    return [_varint_pieces(counts), rows, end_marker]


class _AvroColumnReader:
    """Reads Avro values for many rows at once from one block's content, one position per row."""

    def __init__(self, content: memoryview, names: dict[str, Any]):
        self.content = pa.py_buffer(content)
        self.buf = np.frombuffer(content, dtype=np.uint8)
        self.names = names

    def varints(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Zig-zag varints at `pos`: (values, positions after them). Byte k is read only for the
        rows whose varint goes on that far, so short varints (the usual case) cost one pass."""
        current = self.buf[pos]
        zigzag = (current & 0x7F).astype(np.uint64)
        lengths = np.ones(len(pos), np.int64)
        rows = np.flatnonzero(current & 0x80)
        for k in range(1, 10):
            if not len(rows):
                break
            current = self.buf[pos[rows] + k]
            zigzag[rows] |= (current & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            lengths[rows] += 1
            rows = rows[(current & 0x80) != 0]
        if len(rows):
            raise ValueError("varint longer than 10 bytes")
        values = (zigzag >> np.uint64(1)).astype(np.int64) ^ -(zigzag & np.uint64(1)).astype(np.int64)
        return values, pos + lengths

    def fixed(self, pos: np.ndarray, width: int) -> np.ndarray:
        """`width` bytes at each position, one row each."""
        return self.buf[pos[:, None] + np.arange(width)]

    def byte_strings(self, pos: np.ndarray, lengths: np.ndarray) -> pa.Array:
        """Byte strings at `pos` as a binary view array over the content (no copy): each 16-byte
        view holds the length and either the bytes (up to 12) or a prefix and an offset."""
        if (lengths < 0).any() or (pos + lengths > len(self.buf)).any():
            raise ValueError("byte string runs past the block")
        n = len(pos)
        views = np.zeros((n, 4), np.int32)
        views[:, 0] = lengths
        raw = views.view(np.uint8)
        short = np.flatnonzero(lengths <= 12)
        inline = np.arange(12) < lengths[short, None]
        raw[short, 4:] = self.buf[np.where(inline, pos[short, None] + np.arange(12), 0)] * inline
        long = np.flatnonzero(lengths > 12)
        raw[long, 4:8] = self.fixed(pos[long], 4)
        views[long, 3] = pos[long]
        return pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), self.content])

    def value(self, pos: np.ndarray, avro: Any, arrow_type: pa.DataType) -> tuple[pa.Array, np.ndarray]:
        """Values of Avro type `avro` at `pos` as `arrow_type`, and the positions after them."""
        avro = _resolve(avro, self.names)
        n = len(pos)
        if isinstance(avro, list):
            return self.union(pos, avro, arrow_type)
        kind = avro if isinstance(avro, str) else avro["type"]
        logical = None if isinstance(avro, str) else avro.get("logicalType")
        if kind == "null":
            return pa.nulls(n, arrow_type), pos
        if kind == "boolean":
            raw = self.buf[pos]
            if (raw > 1).any():
                raise ValueError("boolean byte is neither 0 nor 1")
            return pa.array(raw.astype(bool)), pos + 1
        if kind in ("int", "long"):
            values, pos = self.varints(pos)
            return pa.array(values).cast(pa.int32() if kind == "int" else pa.int64()).cast(arrow_type), pos
        if kind in ("float", "double"):
            width = 4 if kind == "float" else 8
            values = self.fixed(pos, width).view("<f4" if width == 4 else "<f8")[:, 0]
            return pa.array(values).cast(arrow_type), pos + width
        if kind in ("string", "bytes"):
            lengths, pos = self.varints(pos)
            values = self.byte_strings(pos, lengths)
            if logical == "decimal":
                return _bytes_to_decimal(values.cast(pa.binary()), arrow_type), pos + lengths
            return values.cast(arrow_type), pos + lengths
        if kind == "fixed":
            width = avro["size"]
            data = pa.py_buffer(self.fixed(pos, width).tobytes())
            values = pa.Array.from_buffers(pa.binary(width), n, [None, data])
            return (_fixed_to_decimal(values, arrow_type) if logical == "decimal" else values), pos + width
        if kind == "enum":
            index, pos = self.varints(pos)
            if ((index < 0) | (index >= len(avro["symbols"]))).any():
                raise ValueError(f"enum index outside {avro['name']}")
            return pa.array(avro["symbols"]).take(pa.array(index)), pos
        if kind == "record":
            children = []
            for f, arrow_field in zip(avro["fields"], arrow_type):
                child, pos = self.value(pos, f["type"], arrow_field.type)
                children.append(child)
            return pa.StructArray.from_arrays(children, fields=list(arrow_type)), pos
        if kind == "array":
            item_type = arrow_type.value_type
            offsets, items, pos = self.blocks(pos, lambda p: self.value(p, avro["items"], item_type), item_type)
            return pa.ListArray.from_arrays(offsets, items, type=arrow_type), pos
        if kind == "map":
            entry_type = pa.struct([pa.field("key", pa.string(), False), arrow_type.item_field])

            def entry(p: np.ndarray) -> tuple[pa.Array, np.ndarray]:
                key, p = self.value(p, "string", pa.string())
                value, p = self.value(p, avro["values"], arrow_type.item_type)
                return pa.StructArray.from_arrays([key, value], fields=list(entry_type)), p

            offsets, entries, pos = self.blocks(pos, entry, entry_type)
            return pa.MapArray.from_arrays(offsets, entries.field(0), entries.field(1), type=arrow_type), pos
        raise ValueError(f"unsupported Avro type {avro!r}")

    def union(self, pos: np.ndarray, branches: list[Any], arrow_type: pa.DataType) -> tuple[pa.Array, np.ndarray]:
        values = [i for i, b in enumerate(branches) if b != "null"]
        if len(values) != 1:
            raise ValueError(f"only unions of null and one type are supported, not {branches}")
        index, pos = self.varints(pos)
        is_value = index == values[0]
        null_index = branches.index("null") if "null" in branches else -1
        if not (is_value | (index == null_index)).all():
            raise ValueError(f"union index outside {branches}")
        rows = np.flatnonzero(is_value)
        decoded, pos[rows] = self.value(pos[rows], branches[values[0]], arrow_type)
        if len(rows) == len(pos):
            return decoded, pos
        return decoded.take(pa.array(np.cumsum(is_value) - 1, mask=~is_value)), pos

    def blocks(
        self, pos: np.ndarray, read_item: Any, item_type: pa.DataType
    ) -> tuple[pa.Array, pa.Array, np.ndarray]:
        """Array or map items: blocks of (count, items) up to a 0 count; a negative count is
        followed by the block's byte size. Item k of every row is read at once."""
        pos = pos.copy()
        chunks: list[pa.Array] = []
        owners: list[np.ndarray] = []
        active = np.arange(len(pos))
        while len(active):
            counts, pos[active] = self.varints(pos[active])
            sized = counts < 0
            if sized.any():
                _, pos[active[sized]] = self.varints(pos[active[sized]])
                counts = np.abs(counts)
            if (counts > len(self.buf)).any():
                raise ValueError("item count larger than the block")
            active, left = active[counts > 0], counts[counts > 0]
            rows = active
            while len(rows):
                item, pos[rows] = read_item(pos[rows])
                chunks.append(item)
                owners.append(rows)
                left = left - 1
                rows, left = rows[left > 0], left[left > 0]
        if not chunks:
            return pa.array(np.zeros(len(pos) + 1, np.int32)), pa.array([], item_type), pos
        owner = np.concatenate(owners)
        items = pa.concat_arrays(chunks).take(pa.array(np.argsort(owner, kind="stable")))
        offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(pos)))]).astype(np.int32)
        return pa.array(offsets), items, pos


# Decimals: Avro stores the unscaled value big-endian in two's complement; Arrow little-endian.


def _decimal_to_fixed(arr: pa.Array, size: int) -> pa.Array:
    """The unscaled values in `size` bytes, column-wise."""
    width = arr.type.byte_width
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * width : (arr.offset + len(arr)) * width]
    big_endian = raw.reshape(len(arr), width)[:, ::-1]
    return pa.Array.from_buffers(pa.binary(size), len(arr), [None, pa.py_buffer(_resize_signed(big_endian, size).tobytes())])


def _fixed_to_decimal(arr: pa.Array, decimal_type: pa.DataType) -> pa.Array:
    size = arr.type.byte_width
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * size : (arr.offset + len(arr)) * size]
    padded = _resize_signed(raw.reshape(len(arr), size), decimal_type.byte_width)
    data = pa.py_buffer(np.ascontiguousarray(padded[:, ::-1]).tobytes())
    return pa.Array.from_buffers(decimal_type, len(arr), [None, data])


def _resize_signed(big_endian: np.ndarray, size: int) -> np.ndarray:
    """Big-endian two's complement rows cut or sign-extended to `size` bytes."""
    width = big_endian.shape[1]
    if size <= width:
        return np.ascontiguousarray(big_endian[:, width - size :])
    sign = np.where(big_endian[:, :1] >= 0x80, 0xFF, 0).astype(np.uint8)
    return np.hstack([np.repeat(sign, size - width, axis=1), big_endian])


_EXACT = Context(prec=80)  # more digits than decimal256 has, so scaling never rounds


def _decimal_to_bytes(arr: pa.Array) -> pa.Array:
    """Minimal two's complement of the unscaled values, as Java's BigInteger#toByteArray."""
    scale = arr.type.scale
    out = []
    for d in arr.to_pylist():
        unscaled = None if d is None else int(d.scaleb(scale, _EXACT))
        out.append(None if unscaled is None else unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True))
    return pa.array(out, pa.binary())


def _bytes_to_decimal(arr: pa.Array, decimal_type: pa.DataType) -> pa.Array:
    values = [
        None if b is None else Decimal(int.from_bytes(b, "big", signed=True)).scaleb(-decimal_type.scale, _EXACT)
        for b in arr.to_pylist()
    ]
    return pa.array(values, decimal_type)


def _as_array(values: Any, type_: pa.DataType | None) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    return pa.array(values, type_)
