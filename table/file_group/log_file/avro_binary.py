"""Avro binary, a column at a time: log block records to bytes and back, and the block schema both follow.

fastavro costs tens of microseconds per record and a block holds up to a million records, so
records are encoded and decoded column-wise with numpy and Arrow. Encoding turns each Avro
value of n rows into n byte strings ("pieces", a binary array); a record is its fields' pieces
joined. Decoding walks the schema with one read position per row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Context, Decimal
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from table.errors import FormatError, InvalidRequestError
from table.schema import AvroSchema, arrow_schema_from_avro


@dataclass(frozen=True)
class LogSchema:
    """A block's SCHEMA, parsed once: the Avro record, its named types and its Arrow schema."""

    avro: AvroSchema
    names: dict[str, Any]
    arrow: pa.Schema


@lru_cache(maxsize=64)
def log_schema(schema_json: str) -> LogSchema:
    avro = json.loads(schema_json)
    names: dict[str, Any] = {}
    _collect_names(avro, names)
    return LogSchema(avro, names, arrow_schema_from_avro(avro))


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


#: Bytes of the Avro types whose values all have one size.
_WIDTHS = {"boolean": 1, "float": 4, "double": 8}
#: `_LOW_BYTES[k]` keeps the low k bytes of a little-endian word.
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
#: The top bit of every byte of a word: a varint's byte has it when another byte follows.
_CONTINUATION_BITS = np.uint64(0x8080808080808080)
#: The 7 low bits of every byte: a varint's groups.
_VARINT_GROUPS = np.uint64(0x7F7F7F7F7F7F7F7F)
#: How three steps pack a word's 7-bit groups: pairs of them into 14 bits, pairs of those into
#: 28, and those into 56 (the bits kept in place, those moved down, by how many).
_VARINT_PACKING = tuple(
    (np.uint64(kept), np.uint64(moved), np.uint64(shift))
    for kept, moved, shift in (
        (0x007F007F007F007F, 0x7F007F007F007F00, 1),
        (0x00003FFF00003FFF, 0x3FFF00003FFF0000, 2),
        (0x000000000FFFFFFF, 0x0FFFFFFF00000000, 4),
    )
)
#: Why records whose last value would need bytes past their content are not read.
_PAST_THE_END = "a record runs past the end of its content"
_AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


@lru_cache(maxsize=1)
def empty_piece() -> pa.Scalar:
    """The empty binary value, made on first use: making an Arrow value from a Python one loads
    pandas (pyarrow's check for its objects), which the processes that only plan a Spark read of
    the source or the table, and import this package to do it, need not hold."""
    return pa.scalar(b"", pa.binary())


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The columns of `schema`, in its order and types (extra columns are dropped)."""
    if table.schema.equals(schema):
        return table
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise InvalidRequestError(f"records lack columns of the block schema: {missing}")
    columns = [table.column(f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def piece_offsets(pieces: pa.Array) -> np.ndarray:
    return np.frombuffer(pieces.buffers()[1], dtype=np.int32)[pieces.offset : pieces.offset + len(pieces) + 1]


def pieces_bytes(pieces: pa.Array) -> bytes | pa.Buffer:
    """All pieces back to back (no copy)."""
    if len(pieces) == 0:
        return b""
    offsets = piece_offsets(pieces)
    return pieces.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def _pieces(data: np.ndarray | pa.Buffer, offsets: np.ndarray) -> pa.Array:
    data_buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(np.ascontiguousarray(data))
    offsets_buffer = pa.py_buffer(offsets.astype(np.int32))
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, offsets_buffer, data_buffer])


def fixed_pieces(matrix: np.ndarray) -> pa.Array:
    n, width = matrix.shape
    return _pieces(matrix, np.arange(n + 1, dtype=np.int64) * width)


def _masked_pieces(matrix: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Row i is the first lengths[i] bytes of matrix row i."""
    keep = np.arange(matrix.shape[1]) < lengths[:, None]
    return _pieces(matrix[keep], np.concatenate([[0], np.cumsum(lengths)]))


def join_pieces(pieces: list[pa.Array], n: int) -> pa.Array:
    """Each row's pieces back to back. A join row by row costs per piece and row, so runs of
    pieces of one width in every row (union branches, short lengths, values of one size) are
    first laid side by side in one matrix, and the join takes few pieces."""
    if not pieces:
        return _pieces(np.empty(0, np.uint8), np.zeros(n + 1, np.int64))
    joined: list[pa.Array] = []
    run: list[tuple[pa.Array, np.ndarray]] = []
    for piece in pieces:
        matrix = _fixed_width(piece)
        if matrix is None:
            joined += [_side_by_side(run)] if run else []
            joined.append(piece)
            run = []
        else:
            run.append((piece, matrix))
    joined += [_side_by_side(run)] if run else []
    if len(joined) == 1:
        return joined[0]
    return pc.binary_join_element_wise(*joined, empty_piece())


def _fixed_width(pieces: pa.Array) -> np.ndarray | None:
    """The pieces as a rows x width matrix of bytes (no copy), when every row's is `width` bytes."""
    offsets = piece_offsets(pieces)
    lengths = np.diff(offsets)
    if pieces.null_count or (len(lengths) and lengths.min() != lengths.max()):
        return None
    width = int(lengths[0]) if len(lengths) else 0
    data = pieces.buffers()[2]
    if width == 0 or data is None:
        return np.empty((len(lengths), 0), np.uint8)
    return np.frombuffer(data, np.uint8, count=len(lengths) * width, offset=int(offsets[0])).reshape(-1, width)


def _side_by_side(run: list[tuple[pa.Array, np.ndarray]]) -> pa.Array:
    """Fixed-width pieces joined, as one piece: each one's bytes are a column range of a matrix."""
    if len(run) == 1:
        return run[0][0]
    matrices = [matrix for _, matrix in run]
    out = np.empty((len(matrices[0]), sum(m.shape[1] for m in matrices)), np.uint8)
    column = 0
    for matrix in matrices:
        out[:, column : column + matrix.shape[1]] = matrix
        column += matrix.shape[1]
    return fixed_pieces(out)


_SEVEN_BITS = np.arange(10, dtype=np.uint64) * np.uint64(7)


def varint_pieces(values: np.ndarray) -> pa.Array:
    """Avro's zig-zag varints of int64 values."""
    v = values.astype(np.int64)
    zigzag = ((v << 1) ^ (v >> 63)).view(np.uint64)
    if len(v) == 0 or zigzag.max() < 0x80:  # one byte each: union branches, small counts
        return fixed_pieces(zigzag.astype(np.uint8)[:, None])
    lengths = np.ones(len(v), np.int64)
    for k in range(1, 10):
        lengths += zigzag >= np.uint64(1) << np.uint64(7 * k)
    width = int(lengths.max())
    groups = ((zigzag[:, None] >> _SEVEN_BITS[:width]) & np.uint64(0x7F)).astype(np.uint8)
    groups |= (np.arange(width) < (lengths - 1)[:, None]).astype(np.uint8) << 7
    return _masked_pieces(groups, lengths)


def varint(value: int) -> bytes:
    """One int64 as Avro's zig-zag varint: what a block's header or count costs, without arrays."""
    zigzag = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def valid_mask(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))


def encode_value(arr: pa.Array, avro: Any, names: dict[str, Any]) -> list[pa.Array]:
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
        return [fixed_pieces(arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)[:, None])]
    if kind in ("int", "long"):
        if pa.types.is_date32(arr.type) or pa.types.is_time32(arr.type):
            arr = arr.cast(pa.int32())  # Arrow casts these only to their own storage width
        return [varint_pieces(arr.cast(pa.int64()).fill_null(0).to_numpy())]
    if kind in ("float", "double"):
        width = 4 if kind == "float" else 8
        values = arr.cast(pa.float32() if kind == "float" else pa.float64()).fill_null(0)
        return [fixed_pieces(values.to_numpy().astype(f"<f{width}").view(np.uint8).reshape(n, width))]
    if kind in ("string", "bytes"):
        if logical == "decimal":
            arr = decimal_to_bytes(arr)
        values = arr.cast(pa.binary()).fill_null(b"")
        return [varint_pieces(np.diff(piece_offsets(values))), values]
    if kind == "fixed":
        if logical == "decimal":
            arr = _decimal_to_fixed(arr, avro["size"])
        width = avro["size"]
        data = arr.buffers()[1].slice(arr.offset * width, n * width)
        return [_pieces(data, np.arange(n + 1, dtype=np.int64) * width)]
    if kind == "enum":
        index = pc.index_in(arr, value_set=pa.array(avro["symbols"]))
        if index.null_count > arr.null_count:
            raise InvalidRequestError(f"values outside enum {avro['name']}")
        return [varint_pieces(index.fill_null(0).to_numpy())]
    if kind == "record":
        pieces = []
        for i, f in enumerate(avro["fields"]):
            pieces += encode_value(arr.field(i), f["type"], names)
        return pieces
    if kind == "array":
        return _encode_blocks(arr, encode_value(arr.values, avro["items"], names))
    if kind == "map":
        entries = arr.values
        keys = encode_value(entries.field(0), "string", names)
        return _encode_blocks(arr, keys + encode_value(entries.field(1), avro["values"], names))
    raise FormatError(f"unsupported Avro type {avro!r}")


def _encode_union(arr: pa.Array, branches: list[Any], names: dict[str, Any]) -> list[pa.Array]:
    """Branch index, then the value; only [null, T] unions, the kind Hudi table schemas use."""
    values = [i for i, b in enumerate(branches) if b != "null"]
    if len(values) != 1:
        raise FormatError(f"only unions of null and one type are supported, not {branches}")
    value = encode_value(arr, branches[values[0]], names)
    if arr.null_count == 0:
        return [varint_pieces(np.full(len(arr), values[0])), *value]
    if "null" not in branches:
        raise InvalidRequestError(f"null values for non-nullable {branches}")
    index = np.where(valid_mask(arr), values[0], branches.index("null"))
    valid = arr.is_valid()
    return [varint_pieces(index), *(pc.if_else(valid, piece, empty_piece()) for piece in value)]


def _encode_blocks(arr: pa.Array, item_pieces: list[pa.Array]) -> list[pa.Array]:
    """An array or map value: one block of all items (count, items), then the 0 end marker."""
    items = join_pieces(item_pieces, len(arr.values))
    list_offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    counts = np.diff(list_offsets)
    rows = _pieces(items.buffers()[2] or pa.py_buffer(b""), piece_offsets(items)[list_offsets])
    end_marker = _masked_pieces(np.zeros((len(arr), 1), np.uint8), (counts > 0).astype(np.int64))
    return [varint_pieces(counts), rows, end_marker]


def read_avro_records(
    content: memoryview | pa.Buffer, positions: np.ndarray, schema: LogSchema, wanted: pa.StructType | None = None
) -> tuple[pa.Table, np.ndarray]:
    """The records of `schema` that start at `positions` in `content`, read a column at a time,
    and the position after each; FormatError when the bytes are not such records. With `wanted`,
    only the fields it names (by name, in nested records too) are read; the others are stepped
    over without making or checking their values (a string's UTF-8, an enum's index), so a
    reader that wants a few fields of a wide record pays little for the rest."""
    arrow = pa.struct(list(schema.arrow))
    if wanted is not None:
        arrow = _projected(arrow, wanted)
    reader = AvroColumnReader(memoryview(content), schema.names)
    try:
        records, positions = reader.value(positions, schema.avro, arrow)
    except IndexError:  # a position past the content's end
        raise FormatError(_PAST_THE_END) from None
    columns = pa.schema(list(arrow), metadata=schema.arrow.metadata)
    return pa.Table.from_arrays(records.flatten(), schema=columns), positions


def _projected(arrow_type: pa.DataType, wanted: pa.DataType) -> pa.DataType:
    """`arrow_type` cut to the fields `wanted` names, through nested structs."""
    if not (pa.types.is_struct(arrow_type) and pa.types.is_struct(wanted)):
        return arrow_type
    kept = {f.name: f.type for f in wanted}
    return pa.struct([f.with_type(_projected(f.type, kept[f.name])) for f in arrow_type if f.name in kept])


class AvroColumnReader:
    """Reads Avro values for many rows at once from one block's content, one position per row."""

    def __init__(self, content: memoryview, names: dict[str, Any]):
        self.content = pa.py_buffer(content)
        self.buf = np.frombuffer(content, dtype=np.uint8)
        self.names = names
        # The content as overlapping little-endian words, one starting at each byte: a value of
        # up to eight bytes is one gather, not one per byte. Content shorter than a word is
        # padded (a copy of under eight bytes).
        wide = self.buf if len(self.buf) >= 8 else np.concatenate([self.buf, np.zeros(8, np.uint8)])
        self._words = np.ndarray((len(wide) - 7,), "<u8", wide, strides=(1,))

    def words(self, pos: np.ndarray) -> np.ndarray:
        """The eight bytes at each position as a little-endian word; bytes past the content's
        end read as zeros (a word shifted by 64 bits or more is zero)."""
        last = len(self._words) - 1
        if not len(pos) or pos.max() <= last:
            return self._words[pos]
        clamped = np.minimum(pos, last)
        return self._words[clamped] >> (np.minimum(pos - clamped, 8) * 8).astype(np.uint64)

    def varints(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Zig-zag varints at `pos`: (values, positions after them). One byte is read for each;
        only the rows whose varint goes on are read further, so short varints (the usual case)
        cost one pass."""
        first = self.buf[pos]
        if not len(first) or first.max() < 0x80:  # one byte each
            small = first.astype(np.int64)
            return (small >> 1) ^ -(small & 1), pos + 1
        zigzag = (first & 0x7F).astype(np.uint64)
        lengths = np.ones(len(pos), np.int64)
        rows = np.flatnonzero(first & 0x80)
        zigzag[rows], lengths[rows] = self._longer_varints(pos[rows])
        values = (zigzag >> np.uint64(1)).astype(np.int64) ^ -(zigzag & np.uint64(1)).astype(np.int64)
        return values, pos + lengths

    def varint_ends(self, pos: np.ndarray) -> np.ndarray:
        """The positions after varints at `pos`, their values not made."""
        first = self.buf[pos]
        if not len(first) or first.max() < 0x80:
            return pos + 1
        return self.varints(pos)[1]

    def _longer_varints(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Varints of more than one byte at `pos`, still zig-zag encoded, and their lengths. One
        of up to eight bytes (a value under 2**55 in magnitude) comes from the word at its
        position: its length from the first byte without the continuation bit, its 7-bit groups
        packed together by three shifts. Longer ones are read a byte at a time."""
        words = self.words(pos)
        ends = ~words & _CONTINUATION_BITS  # the top bit of each byte that ends a varint
        first_end = ends & (~ends + np.uint64(1))  # the lowest of them, or none
        lengths = (np.log2(np.maximum(first_end, np.uint64(1)).astype(np.float64)).astype(np.int64) + 1) // 8
        zigzag = words & _LOW_BYTES[lengths] & _VARINT_GROUPS
        for kept, moved, shift in _VARINT_PACKING:
            zigzag = (zigzag & kept) | ((zigzag & moved) >> shift)
        if (pos + lengths > len(self.buf)).any():  # ended by the zeros read past the end
            raise FormatError(_PAST_THE_END)
        long = np.flatnonzero(first_end == 0)  # nine or ten bytes: values of 2**55 and more
        if len(long):
            zigzag[long], lengths[long] = self._varint_bytes(pos[long])
        return zigzag, lengths

    def _varint_bytes(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Varints at `pos`, still zig-zag encoded, and their lengths, read a byte at a time:
        byte k only for the rows whose varint goes on that far."""
        zigzag = np.zeros(len(pos), np.uint64)
        lengths = np.zeros(len(pos), np.int64)
        rows = np.arange(len(pos))
        for k in range(10):
            current = self.buf[pos[rows] + k]
            zigzag[rows] |= (current & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            lengths[rows] += 1
            rows = rows[(current & 0x80) != 0]
            if not len(rows):
                return zigzag, lengths
        raise FormatError("varint longer than 10 bytes")

    def fixed(self, pos: np.ndarray, width: int) -> np.ndarray:
        """`width` bytes at each position, one row each."""
        return self.buf[pos[:, None] + np.arange(width)]

    def byte_strings(self, pos: np.ndarray, lengths: np.ndarray) -> pa.Array:
        """Byte strings at `pos` as a binary view array over the content (no copy): each 16-byte
        view is two words, the length and a 4-byte prefix, then the next 8 bytes (strings of up
        to 12 bytes, inline) or the string's offset in the content (longer ones)."""
        if (lengths < 0).any() or (pos + lengths > len(self.buf)).any():
            raise FormatError("byte string runs past the block")
        prefix = self.words(pos) & _LOW_BYTES[np.minimum(lengths, 4)]
        inline = self.words(pos + 4) & _LOW_BYTES[np.clip(lengths - 4, 0, 8)]
        views = np.empty((len(pos), 2), np.uint64)
        views[:, 0] = lengths.astype(np.uint64) | (prefix << np.uint64(32))
        views[:, 1] = np.where(lengths <= 12, inline, pos.astype(np.uint64) << np.uint64(32))  # buffer 0
        return pa.Array.from_buffers(pa.binary_view(), len(pos), [None, pa.py_buffer(views), self.content])

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
                raise FormatError("boolean byte is neither 0 nor 1")
            return pa.array(raw.astype(bool)), pos + 1
        if kind in ("int", "long"):
            values, pos = self.varints(pos)
            return pa.array(values).cast(pa.int32() if kind == "int" else pa.int64()).cast(arrow_type), pos
        if kind in ("float", "double"):
            width = _WIDTHS[kind]
            if len(pos) and pos.max() + width > len(self.buf):
                raise FormatError(_PAST_THE_END)
            words = self.words(pos)
            values = words.view("<f8") if width == 8 else words.astype(np.uint32).view("<f4")
            return pa.array(values).cast(arrow_type), pos + width
        if kind in ("string", "bytes"):
            lengths, pos = self.varints(pos)
            values = self.byte_strings(pos, lengths)
            if logical == "decimal":
                return bytes_to_decimal(values.cast(pa.binary()), arrow_type), pos + lengths
            return values.cast(arrow_type), pos + lengths
        if kind == "fixed":
            width = avro["size"]
            data = pa.py_buffer(self.fixed(pos, width).tobytes())
            values = pa.Array.from_buffers(pa.binary(width), n, [None, data])
            return (_fixed_to_decimal(values, arrow_type) if logical == "decimal" else values), pos + width
        if kind == "enum":
            index, pos = self.varints(pos)
            if ((index < 0) | (index >= len(avro["symbols"]))).any():
                raise FormatError(f"enum index outside {avro['name']}")
            return pa.array(avro["symbols"]).take(pa.array(index)), pos
        if kind == "record":  # the fields `arrow_type` names are read, the others stepped over
            children = []
            for f in avro["fields"]:
                index = arrow_type.get_field_index(f["name"])
                if index < 0:
                    pos = self.skip(pos, f["type"])
                    continue
                child, pos = self.value(pos, f["type"], arrow_type.field(index).type)
                children.append(child)
            if not children:  # every field stepped over: records of no fields
                return pa.StructArray.from_buffers(arrow_type, n, [None]), pos
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
        raise FormatError(f"unsupported Avro type {avro!r}")

    def union(self, pos: np.ndarray, branches: list[Any], arrow_type: pa.DataType) -> tuple[pa.Array, np.ndarray]:
        values = [i for i, b in enumerate(branches) if b != "null"]
        if len(values) != 1:
            raise FormatError(f"only unions of null and one type are supported, not {branches}")
        index, pos = self.varints(pos)
        is_value = index == values[0]
        null_index = branches.index("null") if "null" in branches else -1
        if not (is_value | (index == null_index)).all():
            raise FormatError(f"union index outside {branches}")
        if is_value.all():  # no row to pick out, nor a null to put back
            return self.value(pos, branches[values[0]], arrow_type)
        rows = np.flatnonzero(is_value)
        decoded, pos[rows] = self.value(pos[rows], branches[values[0]], arrow_type)
        return decoded.take(pa.array(np.cumsum(is_value) - 1, mask=~is_value)), pos

    def skip(self, pos: np.ndarray, avro: Any) -> np.ndarray:
        """The positions after values of Avro type `avro` at `pos`, found without making them."""
        avro = _resolve(avro, self.names)
        if isinstance(avro, list):
            index, pos = self.varints(pos)
            if ((index < 0) | (index >= len(avro))).any():
                raise FormatError(f"union index outside {avro}")
            for i, branch in enumerate(avro):
                if branch == "null":
                    continue
                taken = index == i
                if taken.all():
                    return self.skip(pos, branch)
                rows = np.flatnonzero(taken)
                if len(rows):
                    pos[rows] = self.skip(pos[rows], branch)
            return pos
        kind = avro if isinstance(avro, str) else avro["type"]
        if kind == "null":
            return pos
        if kind in _WIDTHS:
            return pos + _WIDTHS[kind]
        if kind == "fixed":
            return pos + avro["size"]
        if kind in ("int", "long", "enum"):
            return self.varint_ends(pos)
        if kind in ("string", "bytes"):
            lengths, pos = self.varints(pos)
            if (lengths < 0).any() or (pos + lengths > len(self.buf)).any():
                raise FormatError("byte string runs past the block")
            return pos + lengths
        if kind == "record":
            for f in avro["fields"]:
                pos = self.skip(pos, f["type"])
            return pos
        if kind == "array":
            return self.skip_blocks(pos, lambda p: self.skip(p, avro["items"]))
        if kind == "map":
            return self.skip_blocks(pos, lambda p: self.skip(self.skip(p, "string"), avro["values"]))
        raise FormatError(f"unsupported Avro type {avro!r}")

    def skip_blocks(self, pos: np.ndarray, skip_item: Any) -> np.ndarray:
        """The positions after array or map values: a block with its byte size is stepped over
        whole, the others item by item."""
        pos = pos.copy()
        for rows in self._block_items(pos, step_over_sized=True):
            pos[rows] = skip_item(pos[rows])
        return pos

    def blocks(self, pos: np.ndarray, read_item: Any, item_type: pa.DataType) -> tuple[pa.Array, pa.Array, np.ndarray]:
        """Array or map items: blocks of (count, items) up to a 0 count; a negative count is
        followed by the block's byte size. Item k of every row is read at once."""
        pos = pos.copy()
        chunks: list[pa.Array] = []
        owners: list[np.ndarray] = []
        for rows in self._block_items(pos, step_over_sized=False):
            item, pos[rows] = read_item(pos[rows])
            chunks.append(item)
            owners.append(rows)
        if not chunks:
            return pa.array(np.zeros(len(pos) + 1, np.int32)), pa.array([], item_type), pos
        owner = np.concatenate(owners)
        items = pa.concat_arrays(chunks).take(pa.array(np.argsort(owner, kind="stable")))
        offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(pos)))]).astype(np.int32)
        return pa.array(offsets), items, pos

    def _block_items(self, pos: np.ndarray, step_over_sized: bool) -> Iterator[np.ndarray]:
        """Walks array or map values at `pos`, which it moves along in place: blocks of (count,
        items) up to a 0 count, a negative count followed by the block's byte size. For item k
        of every block it yields the rows that have one; the caller reads or steps over it at
        `pos[rows]` and moves `pos[rows]` past it. With `step_over_sized`, a block with its byte
        size is stepped over whole instead."""
        active = np.arange(len(pos))
        while len(active):
            counts, pos[active] = self.varints(pos[active])
            if (np.abs(counts) > len(self.buf)).any():
                raise FormatError("item count larger than the block")
            sized = counts < 0
            if sized.any():
                sizes, pos[active[sized]] = self.varints(pos[active[sized]])
                if step_over_sized:
                    if (sizes < 0).any():
                        raise FormatError("negative block size")
                    pos[active[sized]] += sizes
            items = np.where(sized & step_over_sized, 0, np.abs(counts))
            rows, left = active[items > 0], items[items > 0]
            while len(rows):
                yield rows
                left = left - 1
                rows, left = rows[left > 0], left[left > 0]
            active = active[counts != 0]


# Decimals: Avro stores the unscaled value big-endian in two's complement; Arrow little-endian.


def _decimal_to_fixed(arr: pa.Array, size: int) -> pa.Array:
    """The unscaled values in `size` bytes, column-wise."""
    width = arr.type.byte_width
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * width : (arr.offset + len(arr)) * width]
    big_endian = raw.reshape(len(arr), width)[:, ::-1]
    data = pa.py_buffer(_resize_signed(big_endian, size).tobytes())
    return pa.Array.from_buffers(pa.binary(size), len(arr), [None, data])


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


def decimal_to_bytes(arr: pa.Array) -> pa.Array:
    """Minimal two's complement of the unscaled values, as Java's BigInteger#toByteArray."""
    scale = arr.type.scale
    out = []
    for d in arr.to_pylist():
        unscaled = None if d is None else int(d.scaleb(scale, _EXACT))
        out.append(None if unscaled is None else unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True))
    return pa.array(out, pa.binary())


def bytes_to_decimal(arr: pa.Array, decimal_type: pa.DataType) -> pa.Array:
    values = [
        None if b is None else Decimal(int.from_bytes(b, "big", signed=True)).scaleb(-decimal_type.scale, _EXACT)
        for b in arr.to_pylist()
    ]
    return pa.array(values, decimal_type)
