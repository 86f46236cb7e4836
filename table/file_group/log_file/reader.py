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
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

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
    return parse_log_bytes(storage.read_bytes(rel_path))


def read_log_files(storage: Storage, rel_paths: Sequence[str]) -> list[list[LogBlock]]:
    """The blocks of each log file, as `read_log_file` gives them. The Avro data blocks of all the
    files are decoded together, one pass per schema, and the columns of their delete blocks are
    built together: each costs a fixed amount per block (and column), which a table of many small
    blocks (many partitions, frequent commits) would otherwise pay again for every block."""
    return _decoded([list(_framed_blocks(storage.read_bytes(p))) for p in rel_paths])


def parse_log_bytes(data: bytes) -> list[LogBlock]:
    """The blocks in the bytes of a log file, resyncing at the next magic after damage."""
    return _decoded([list(_framed_blocks(data))])[0]


def _decoded(files: list[list[LogBlock | _Framed]]) -> list[list[LogBlock]]:
    """The framed blocks of each file, their Avro data blocks and delete blocks finished together."""
    framed = [b for blocks in files for b in blocks]
    avro = iter(_finished_in_groups([b for b in framed if isinstance(b, _AvroBlock)], _schema_of, _avro_data_blocks))
    deletes = iter(_finished_in_groups([b for b in framed if isinstance(b, _DeleteRecords)], _kinds_of, _delete_blocks))

    def finished(block: LogBlock | _Framed) -> LogBlock:
        if isinstance(block, _AvroBlock):
            return next(avro)
        return next(deletes) if isinstance(block, _DeleteRecords) else block

    return [[finished(b) for b in blocks] for blocks in files]


@dataclass
class _FramedBlock:
    """A block whose framing and header have been checked, its contents not yet finished."""

    data: bytes  # the whole file's, for the `CorruptBlock` the block becomes if it does not finish
    offset: int
    end: int
    header: Header
    footer: Header

    def corrupt(self, error: Exception) -> CorruptBlock:
        return CorruptBlock(self.offset, self.data[self.offset : self.end], _undecodable(error))


@dataclass
class _AvroBlock(_FramedBlock):
    """An Avro data block with its record lengths checked, its records not yet decoded."""

    content: memoryview
    positions: np.ndarray  # where each record starts in `content`
    ends: np.ndarray  # and where it ends, by the lengths before it


@dataclass
class _DeleteRecords(_FramedBlock):
    """A delete block's record list read, its columns not yet built."""

    records: list[dict[str, Any]]
    ordering_kinds: frozenset[str]  # the names of the wrappers its ordering values come in


_Framed = _AvroBlock | _DeleteRecords


def _framed_blocks(data: bytes) -> Iterator[LogBlock | _Framed]:
    """The blocks in the bytes of a log file, Avro data blocks still to decode."""
    pos, size = 0, len(data)
    while pos < size:
        if data.startswith(MAGIC, pos):
            end = _checked_block_end(data, pos)
            if end is not None:
                try:
                    block: LogBlock | _Framed = _decode_block(data, pos, end)
                except Exception as e:  # noqa: BLE001 - any undecodable block is a corrupt block
                    block = CorruptBlock(pos, data[pos:end], _undecodable(e))
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


def _undecodable(error: Exception) -> str:
    return f"undecodable block: {type(error).__name__}: {error}"


_Block = TypeVar("_Block", bound="_FramedBlock")


def _finished_in_groups(
    blocks: list[_Block], key: Callable[[_Block], Hashable], finish: Callable[[list[_Block]], Sequence[LogBlock]]
) -> list[LogBlock]:
    """The blocks finished, in their order: those of one `key` together, since finishing costs a
    fixed amount per call. When a group fails, each of its blocks is finished alone, so that only
    a block that cannot be finished becomes a `CorruptBlock`."""
    groups: dict[Hashable, list[int]] = {}
    for i, block in enumerate(blocks):
        groups.setdefault(key(block), []).append(i)
    finished: dict[int, LogBlock] = {}
    for indices in groups.values():
        group = [blocks[i] for i in indices]
        try:
            done = finish(group)
        except Exception:  # noqa: BLE001 - told apart below, one block at a time
            done = [_finished_alone(block, finish) for block in group]
        finished.update(zip(indices, done))
    return [finished[i] for i in range(len(blocks))]


def _finished_alone(block: _Block, finish: Callable[[list[_Block]], Sequence[LogBlock]]) -> LogBlock:
    try:
        return finish([block])[0]
    except Exception as e:  # noqa: BLE001 - any block that cannot be finished is a corrupt block
        return block.corrupt(e)


def _schema_of(block: _AvroBlock) -> str:
    return block.header[HeaderKey.SCHEMA]


def _avro_data_blocks(blocks: list[_AvroBlock]) -> list[DataBlock]:
    """Blocks of one schema decoded in one pass over all their records."""
    records = _read_avro_blocks(blocks, log_schema(_schema_of(blocks[0])))
    return [DataBlock(rows, b.header, BlockType.AVRO_DATA, b.footer) for b, rows in zip(blocks, records)]


def _read_avro_blocks(blocks: list[_AvroBlock], schema: LogSchema) -> list[pa.Table]:
    """The records of blocks of one schema, read as one run of content."""
    if len(blocks) == 1:
        content: memoryview | bytes = blocks[0].content
        starts = np.zeros(1, np.int64)
    else:
        content = b"".join(b.content for b in blocks)
        starts = np.cumsum([0, *(len(b.content) for b in blocks[:-1])], dtype=np.int64)
    positions = np.concatenate([b.positions + s for b, s in zip(blocks, starts)])
    ends = np.concatenate([b.ends + s for b, s in zip(blocks, starts)])
    records, after = read_avro_records(content, positions, schema)
    if not np.array_equal(after, ends):
        raise FormatError("records do not decode to their stated lengths")
    counts = [len(b.positions) for b in blocks]
    firsts = np.cumsum([0, *counts[:-1]])
    return [records.slice(first, count) for first, count in zip(firsts, counts)]


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


def _decode_block(data: bytes, pos: int, end: int) -> LogBlock | _Framed:
    """The block framed at `data[pos:end]`, an Avro data or delete block still to finish;
    raises when it does not decode."""
    cur = _Cursor(memoryview(data)[pos + len(MAGIC) + 8 : end])
    version = cur.int32()
    if version != LOG_FORMAT_VERSION:
        raise FormatError(f"log format version {version} is not supported")
    block_type = BlockType(cur.int32())
    header = cur.metadata()
    content = cur.take(cur.int64())
    footer = cur.metadata()
    cur.int64()  # reverse pointer, checked with the framing
    if cur.pos != len(cur.data):
        raise FormatError(f"{len(cur.data) - cur.pos} stray bytes after the block")
    if block_type == BlockType.AVRO_DATA:
        log_schema(header[HeaderKey.SCHEMA])  # a schema that does not parse fails here
        positions, ends = _record_positions(content)
        return _AvroBlock(data, pos, end, header, footer, content, positions, ends)
    if block_type == BlockType.PARQUET_DATA:
        return DataBlock(_decode_parquet_content(content, header), header, block_type, footer)
    if block_type == BlockType.DELETE:
        records = _delete_records(content)
        kinds = frozenset(r["orderingVal"][0].rsplit(".", 1)[-1] for r in records if r["orderingVal"] is not None)
        return _DeleteRecords(data, pos, end, header, footer, records, kinds)
    if block_type == BlockType.COMMAND:
        block = CommandBlock(header, footer)
        block.command_type  # noqa: B018 - fails for a command Hudi does not know
        return block
    raise FormatError(f"{block_type.name} blocks are not supported")


def _decode_parquet_content(content: memoryview, header: Header) -> pa.Table:
    schema = log_schema(header[HeaderKey.SCHEMA])
    if len(content) == 0:
        return schema.arrow.empty_table()
    table = read_parquet(pa.py_buffer(content))
    return conform(table.replace_schema_metadata(None), schema.arrow)


def _record_positions(content: memoryview) -> tuple[np.ndarray, np.ndarray]:
    """Where each record of an Avro data block's content starts, and where it ends."""
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
    return ends - sizes + 4, ends


def _delete_records(content: memoryview) -> list[dict[str, Any]]:
    cur = _Cursor(content)
    version = cur.int32()
    if version != BLOCK_CONTENT_VERSION:
        raise FormatError(f"delete block version {version} is not supported (Java-serialized)")
    body = io.BytesIO(cur.take(cur.int32()))
    record: Any = fastavro.schemaless_reader(body, DELETE_RECORD_LIST, None, return_record_name=True)
    return record["deleteRecordList"]


def _kinds_of(block: _DeleteRecords) -> frozenset[str]:
    return block.ordering_kinds


def _delete_blocks(blocks: list[_DeleteRecords]) -> list[DeleteBlock]:
    """Blocks whose ordering values come in the same wrappers, their columns built as one set of
    which each block gets its slice."""
    records = [r for block in blocks for r in block.records]
    ordering_type = _common_ordering_type([ORDERING_WRAPPERS[k][1] for k in blocks[0].ordering_kinds])
    values = [None if r["orderingVal"] is None else r["orderingVal"][1]["value"] for r in records]
    if pa.types.is_decimal(ordering_type):
        ordering = bytes_to_decimal(pa.array(values, pa.binary()), ordering_type)
    elif pa.types.is_temporal(ordering_type):
        storage = pa.int32() if pa.types.is_date32(ordering_type) else pa.int64()
        ordering = pa.array(values, storage).cast(ordering_type)
    else:
        ordering = pa.array(values, ordering_type)
    keys = pa.array([r["recordKey"] for r in records], pa.string())
    paths = pa.array([r["partitionPath"] for r in records], pa.string())
    counts = [len(block.records) for block in blocks]
    firsts = np.cumsum([0, *counts[:-1]])
    return [
        DeleteBlock(keys.slice(first, n), paths.slice(first, n), ordering.slice(first, n), b.header, b.footer)
        for b, first, n in zip(blocks, firsts, counts)
    ]


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
