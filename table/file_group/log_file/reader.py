"""Reading Hudi log files: the blocks of a file, decoded.

Reading tolerates torn writes the way Hudi's `HoodieLogFileReader` does: a block whose size
runs past the end of the file, whose reverse pointer disagrees with its size, or which is not
followed by the next magic, becomes a `CorruptBlock` spanning up to the next magic, and the scan
resumes there. Blocks that pass that check but cannot be decoded are `CorruptBlock`s too, so a
reader gets every intact block and never an exception for a damaged file.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from table.errors import FormatError
from table.file_group.log_file.avro_binary import (
    LogSchema,
    bytes_to_decimal,
    conform,
    log_schema,
    read_avro_records,
)
from table.file_group.log_file.block import (
    BLOCK_CONTENT_VERSION,
    DELETE_RECORD_LIST,
    LOG_FORMAT_VERSION,
    MAGIC,
    ORDERING_WRAPPERS,
    BlockType,
    CommandBlock,
    CorruptBlock,
    DataBlock,
    DeleteBlock,
    Header,
    HeaderKey,
    LogBlock,
)
from table.file_group.parquet_options import read_parquet
from table.storage.file_io import Storage

# A block without header entries, content or footer entries still has: format version, type,
# header count, content length, footer count, reverse pointer.
_MIN_BLOCK_SIZE = 4 + 4 + 4 + 8 + 4 + 8


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
            raise FormatError(f"needs {n} bytes at {self.pos}, block has {len(self.data)}")
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
        raise FormatError(f"log format version {version} is not supported")
    block_type = BlockType(cur.int32())
    header = cur.metadata()
    content = cur.take(cur.int64())
    footer = cur.metadata()
    cur.int64()  # reverse pointer, checked with the framing
    if cur.pos != len(body):
        raise FormatError(f"{len(body) - cur.pos} stray bytes after the block")
    if block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
        return DataBlock(_decode_data_content(content, header, block_type), header, block_type, footer)
    if block_type == BlockType.DELETE:
        keys, paths, ordering = _decode_delete_content(content)
        return DeleteBlock(keys, paths, ordering, header, footer)
    if block_type == BlockType.COMMAND:
        block = CommandBlock(header, footer)
        block.command_type  # noqa: B018 - fails for a command Hudi does not know
        return block
    raise FormatError(f"{block_type.name} blocks are not supported")


def _decode_data_content(content: memoryview, header: Header, block_type: BlockType) -> pa.Table:
    schema = log_schema(header[HeaderKey.SCHEMA])
    if block_type == BlockType.PARQUET_DATA:
        if len(content) == 0:
            return schema.arrow.empty_table()
        table = read_parquet(pa.py_buffer(content))
        return conform(table.replace_schema_metadata(None), schema.arrow)
    return _decode_avro_records(content, schema)


def _decode_avro_records(content: memoryview, schema: LogSchema) -> pa.Table:
    cur = _Cursor(content)
    version = cur.int32()
    if version not in (2, BLOCK_CONTENT_VERSION):  # versions with a record count
        raise FormatError(f"Avro data block version {version} is not supported")
    count = cur.int32()
    lengths = []
    length_at = struct.Struct(">i").unpack_from
    pos = cur.pos
    for _ in range(count):  # each record's place follows from the lengths before it
        (length,) = length_at(content, pos)
        lengths.append(length)
        pos += 4 + length
    if pos != len(content):
        raise FormatError(f"records end at {pos}, content at {len(content)}")
    sizes = np.array(lengths, dtype=np.int64) + 4
    ends = cur.pos + np.cumsum(sizes)
    positions = ends - sizes + 4
    records, positions = read_avro_records(content, positions, schema)
    if not np.array_equal(positions, ends):
        raise FormatError("records do not decode to their stated lengths")
    return records


def _decode_delete_content(content: memoryview) -> tuple[pa.Array, pa.Array, pa.Array]:
    cur = _Cursor(content)
    version = cur.int32()
    if version != BLOCK_CONTENT_VERSION:
        raise FormatError(f"delete block version {version} is not supported (Java-serialized)")
    body = io.BytesIO(cur.take(cur.int32()))
    record: Any = fastavro.schemaless_reader(body, DELETE_RECORD_LIST, None, return_record_name=True)
    records = record["deleteRecordList"]
    kinds = {r["orderingVal"][0].rsplit(".", 1)[-1] for r in records if r["orderingVal"] is not None}
    ordering_type = _common_ordering_type([ORDERING_WRAPPERS[k][1] for k in kinds])
    values = [None if r["orderingVal"] is None else r["orderingVal"][1]["value"] for r in records]
    if pa.types.is_decimal(ordering_type):
        ordering = bytes_to_decimal(pa.array(values, pa.binary()), ordering_type)
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
    raise FormatError(f"delete block mixes ordering value types {sorted(map(str, distinct))}")
