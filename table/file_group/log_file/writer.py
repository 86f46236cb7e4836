"""Writing Hudi log files: each block encoded exactly as Hudi's `HoodieLogFormatWriter` lays it out."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.errors import InvalidRequestError, UnsupportedTypeError
from table.file_group.log_file.avro_binary import (
    LogSchema,
    conform,
    decimal_to_bytes,
    empty_piece,
    encode_value,
    fixed_pieces,
    join_pieces,
    log_schema,
    piece_offsets,
    pieces_bytes,
    valid_mask,
    varint,
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
    CorruptBlock,
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
    `durable` False the caller syncs it (`Storage.syncs`), with the other files it writes."""
    return write_log_bytes(storage, rel_path, b"".join(encode_blocks(blocks)), durable)


def write_log_bytes(storage: Storage, rel_path: str, data: bytes, durable: bool = True) -> int:
    """Create a new log file of blocks already encoded (`encode_blocks`); returns its size."""
    failpoints.torn_write("logfile.torn_write", data, lambda part: storage.write_new(rel_path, part))
    storage.write_new(rel_path, data, durable=durable)
    return len(data)


def encode_blocks(blocks: Sequence[LogBlock]) -> list[bytes]:
    """Each block's bytes, magic to reverse pointer. The contents of like blocks (one write's
    delete blocks of many file groups, its Avro data blocks) are encoded together, a column at a
    time over all their records, so that a block costs what its records cost, not a round of
    encoding calls of its own; a Parquet block is a whole file in itself, encoded alone."""
    writable = [_writable(block) for block in blocks]
    contents = _encode_contents(writable)
    return [
        b"".join(
            _block_parts(
                block.block_type, _encode_metadata(block.header), _encode_metadata(block.footer), contents[id(block)]
            )
        )
        for block in writable
    ]


def encode_avro_runs(records: pa.Table, runs: Sequence[tuple[int, int]], instant: str, schema_json: str) -> list[bytes]:
    """Avro data blocks of one write (header INSTANT_TIME and SCHEMA, as `DataBlock.create`
    makes them), one for each (start, count) run of `records`, in order. The runs are taken
    from `records` at once and encoded in one pass: a write to many small file groups hands
    over its rows whole, where a block of each group's slice would be copied back together
    with the others a column at a time (`encode_blocks`)."""
    schema = log_schema(schema_json)
    rows = _runs_of(conform(records, schema.arrow), runs)
    header = _encode_metadata({HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema_json})
    footer = _encode_metadata({})
    counts = [count for _, count in runs]
    return [
        b"".join(_block_parts(BlockType.AVRO_DATA, header, footer, content))
        for content in _avro_contents(rows, counts, schema)
    ]


def _runs_of(records: pa.Table, runs: Sequence[tuple[int, int]]) -> pa.Table:
    """The rows of the runs, back to back: the table itself when the runs are all of it."""
    starts = np.array([start for start, _ in runs], np.int64)
    counts = np.array([count for _, count in runs], np.int64)
    ends = starts + counts
    if len(runs) and starts[0] == 0 and ends[-1] == records.num_rows and np.array_equal(starts[1:], ends[:-1]):
        return records
    firsts = np.cumsum(counts) - counts  # where each run starts among the rows taken
    return records.take(pa.array(np.repeat(starts - firsts, counts) + np.arange(int(counts.sum()))))


def encode_block(block: LogBlock) -> bytes:
    """One block, magic to reverse pointer, exactly as HoodieLogFormatWriter lays it out."""
    return encode_blocks([block])[0]


_Bytes: TypeAlias = "bytes | pa.Buffer"
_WritableBlock: TypeAlias = DataBlock | DeleteBlock | CommandBlock


def _writable(block: LogBlock) -> _WritableBlock:
    """The block, if it is one a log file holds (a corrupt block is only ever read)."""
    if isinstance(block, CorruptBlock):
        raise UnsupportedTypeError(f"cannot write a {type(block).__name__}")
    return block


def _encode_contents(blocks: Sequence[_WritableBlock]) -> dict[int, list[_Bytes]]:
    """Each block's content (by the block's id), the records of like blocks encoded together."""
    contents: dict[int, list[_Bytes]] = {}
    alike_deletes: dict[pa.DataType | None, list[DeleteBlock]] = {}  # by the ordering values' type
    alike_avro: dict[str, list[DataBlock]] = {}  # by the data schema
    for block in blocks:
        if isinstance(block, DeleteBlock):
            ordering = block.ordering_values.type if block.ordering_values is not None else None
            alike_deletes.setdefault(ordering, []).append(block)
        elif isinstance(block, DataBlock) and block.block_type == BlockType.AVRO_DATA:
            alike_avro.setdefault(_data_schema(block), []).append(block)
        elif isinstance(block, DataBlock):
            contents[id(block)] = _encode_parquet_content(block)
        else:
            contents[id(block)] = []  # a command block has no content
    for deletes in alike_deletes.values():
        contents.update((id(block), content) for block, content in zip(deletes, _encode_delete_contents(deletes)))
    for data in alike_avro.values():
        contents.update((id(block), content) for block, content in zip(data, _encode_avro_contents(data)))
    return contents


def _block_parts(block_type: BlockType, header: bytes, footer: bytes, content: list[_Bytes]) -> list[_Bytes]:
    """A block's bytes in pieces (its header and footer encoded), so large contents are copied
    once, into the file."""
    content_length = sum(len(part) for part in content)
    size = 4 + 4 + len(header) + 8 + content_length + len(footer) + 8
    return [
        MAGIC,
        struct.pack(">qii", size, LOG_FORMAT_VERSION, int(block_type)),
        header,
        struct.pack(">q", content_length),
        *content,
        footer,
        struct.pack(">q", len(MAGIC) + size),
    ]


def _encode_metadata(metadata: Header) -> bytes:
    """A header or footer: the entry count, then each key's ordinal, its value's length and value.
    The blocks of one write share their headers (instant, schema): encoded once."""
    return _encode_metadata_items(tuple(metadata.items()))


@lru_cache(maxsize=64)
def _encode_metadata_items(items: tuple[tuple[HeaderKey, str], ...]) -> bytes:
    metadata = dict(items)
    parts = [struct.pack(">i", len(metadata))]
    for key, value in metadata.items():
        raw = value.encode("utf-8")
        parts.append(struct.pack(">ii", int(key), len(raw)))
        parts.append(raw)
    return b"".join(parts)


def _data_schema(block: DataBlock) -> str:
    schema_json = block.header.get(HeaderKey.SCHEMA)
    if schema_json is None:
        raise InvalidRequestError("a data block needs the SCHEMA header")
    return schema_json


def _encode_parquet_content(block: DataBlock) -> list[_Bytes]:
    schema_json = _data_schema(block)
    return [_encode_parquet(conform(block.records, log_schema(schema_json).arrow), schema_json)]


def _encode_parquet(table: pa.Table, schema_json: str) -> _Bytes:
    """A standalone Parquet file; its footer carries the Avro schema like parquet-avro's."""
    if table.num_rows == 0:
        return b""
    table = table.replace_schema_metadata({"parquet.avro.schema": schema_json, "writer.model.name": "avro"})
    sink = pa.BufferOutputStream()
    # Readers take a block whole, so statistics would only cost time; the meta columns that are
    # the same in every row of a block are the ones a dictionary surely pays for. Readers take the
    # block's schema from its header (or parquet-avro's key), so the Arrow schema, which would
    # carry that Avro schema a second time, is left out: a few KiB a block, a block a file group.
    constant = [c for c in _CONSTANT_META_COLUMNS if c in table.column_names]
    pq.write_table(
        table,
        sink,
        compression=PARQUET_COMPRESSION,
        write_statistics=False,
        use_dictionary=constant,
        store_schema=False,
    )
    return sink.getvalue()


def _encode_avro_contents(blocks: Sequence[DataBlock]) -> list[list[_Bytes]]:
    """Avro data blocks of one schema: block version, record count, then each record's length
    and Avro binary encoding; every block's records encoded in one pass."""
    schema = log_schema(_data_schema(blocks[0]))
    tables = [conform(block.records, schema.arrow) for block in blocks]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return _avro_contents(table, [t.num_rows for t in tables], schema)


def _avro_contents(table: pa.Table, counts: list[int], schema: LogSchema) -> list[list[_Bytes]]:
    """The contents of the Avro data blocks of consecutive runs of `counts` of the table's rows."""
    n = table.num_rows
    pieces: list[pa.Array] = []
    for column, avro_field in zip(table.columns, schema.avro["fields"]):
        pieces += encode_value(column.combine_chunks(), avro_field["type"], schema.names)
    lengths = sum((np.diff(piece_offsets(piece)) for piece in pieces), np.zeros(n, np.int64))
    length_prefix = fixed_pieces(lengths.astype(">i4").view(np.uint8).reshape(n, 4))
    records = join_pieces([length_prefix, *pieces], n)
    return [
        [struct.pack(">ii", BLOCK_CONTENT_VERSION, count), records_bytes]
        for count, records_bytes in zip(counts, _split(records, counts))
    ]


def _split(pieces: pa.Array, counts: list[int]) -> list[bytes | pa.Buffer]:
    """The pieces of consecutive runs of `counts` rows, each run's bytes back to back (no copy)."""
    runs, start = [], 0
    for count in counts:
        runs.append(pieces_bytes(pieces.slice(start, count)))
        start += count
    return runs


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
        value = pc.if_else(values.is_valid(), value, empty_piece())
    return [index, value]


def _encode_delete_contents(blocks: Sequence[DeleteBlock]) -> list[list[_Bytes]]:
    """Delete blocks whose ordering values have one type: block version, payload length, then
    the HoodieDeleteRecordList datum, one array block; every block's items encoded in one pass."""
    counts = [len(block.record_keys) for block in blocks]
    n = sum(counts)
    ordering = [block.ordering_values for block in blocks]
    items = join_pieces(
        encode_value(pa.concat_arrays([b.record_keys for b in blocks]), NULLABLE_STRING, {})
        + encode_value(pa.concat_arrays([b.partition_paths for b in blocks]), NULLABLE_STRING, {})
        + _encode_ordering_values(None if ordering[0] is None else pa.concat_arrays(ordering), n),
        n,
    )
    contents = []
    for count, run in zip(counts, _split(items, counts)):
        # One array block: the item count, the items, then the 0 count that ends the array.
        payload = b"".join([varint(count), run, b"\0"]) if count else b"\0"
        contents.append([struct.pack(">ii", BLOCK_CONTENT_VERSION, len(payload)) + payload])
    return contents
