"""The blocks of Hudi log files (log format version 1), as Hudi 0.14/0.15 writes and reads them.

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

`writer` lays blocks out in a file, `reader` reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from table.config.choices import LogBlockFormat
from table.errors import InvalidRequestError

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
BLOCK_CONTENT_VERSION = 3
"""HoodieLogBlock.version: Avro data and delete blocks start with it; hudi-rs reads only 3."""


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
            raise InvalidRequestError(f"a data block is Avro or Parquet, not {self.block_type!r}")

    @classmethod
    def create(
        cls, records: pa.Table, instant: str, schema_json: str, fmt: LogBlockFormat = LogBlockFormat.AVRO
    ) -> DataBlock:
        """The block Hudi's writer makes: header INSTANT_TIME and SCHEMA (the log schema, meta
        fields first); `fmt` is a `hoodie.logfile.data.block.format` value, or `auto` (by the
        records' count, `LogBlockFormat.for_block`)."""
        header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema_json}
        return cls(records, header, DATA_BLOCK_TYPES[LogBlockFormat(fmt).for_block(records.num_rows)])


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
            raise InvalidRequestError(f"delete block columns differ in length: {sorted(lengths)}")

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
    def ordering(self) -> pa.Array:
        """The ordering values, Hudi's default 0 when none was given."""
        if self.ordering_values is None:
            return pa.array(np.zeros(len(self.record_keys), dtype=np.int32))
        return self.ordering_values

    @property
    def records(self) -> pa.Table:
        """record_key, partition_path, ordering_value."""
        return pa.table(
            {"record_key": self.record_keys, "partition_path": self.partition_paths, "ordering_value": self.ordering}
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


LogBlock = DataBlock | DeleteBlock | CommandBlock | CorruptBlock


# The 0.14/0.15 HoodieDeleteRecordList: the ordering value is a union of wrapper records, one
# per Java type; the branch index is what the file stores, so the order is fixed. Each wrapper
# holds one `value` field: its Avro type on the wire (Java's decimal is decimal(30, 15) on bytes,
# its time a time-micros long) and the Arrow type it reads as.
ORDERING_WRAPPERS: dict[str, tuple[str, pa.DataType]] = {
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
_WRAPPER_NS = "org.apache.hudi.avro.model"
NULLABLE_STRING = ["null", "string"]
DELETE_RECORD_LIST = fastavro.parse_schema(
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
                            {"name": "recordKey", "type": NULLABLE_STRING, "default": None},
                            {"name": "partitionPath", "type": NULLABLE_STRING, "default": None},
                            {
                                "name": "orderingVal",
                                "type": ["null"]
                                + [
                                    {"type": "record", "name": name, "fields": [{"name": "value", "type": avro}]}
                                    for name, (avro, _) in ORDERING_WRAPPERS.items()
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


def _as_array(values: Any, type_: pa.DataType | None) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    return pa.array(values, type_)
