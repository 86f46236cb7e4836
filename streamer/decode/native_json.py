"""JSON objects decoded by the native extension (``native/``, `mor_streamer_native.decode_json`):
one pass over each record's bytes straight into the struct's Arrow buffers, about three times as
fast as Arrow's JSON reader, and faster still where most of a record is members no field asks
for (Debezium's `before` and `source`).

It reads only what it is sure Arrow's JSON reader reads alike: for any other batch (a record
that is not an object, a value of another kind than its field's, a type it does not read) it
says it cannot, and the batch goes to Arrow's reader, which also names what is wrong where.
Without the extension, every batch goes there.

A struct's field may also be an `alias` of another: its member is read into the other field's
columns when that field's own is null or absent (Debezium's `before` into `after`'s), and the
alias's own column says which of the two were there. Only the native decoder reads an alias
(`NativeJsonOnly`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from streamer.decode.decoded import Decoded
from streamer.errors import StreamerError

#: The metadata key of an alias field: the name of the field it aliases.
ALIAS_OF = b"alias_of"
#: An alias's bits, by row: its own member was read (not null); the aliased field's was, and is
#: the value kept.
ALIAS_READ, TARGET_READ = 1, 2

_KINDS = {
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.string(): "utf8",
}


class NativeJson:
    """Decodes batches of JSON records into `struct`, natively where it can."""

    def __init__(self, struct: pa.StructType):
        self._type = _nullable(struct)  # as Arrow's reader types what it reads
        self._shape: Any = None
        description = _description(pa.field("record", struct))
        if description is not None:
            try:
                from mor_streamer_native import JsonShape, decode_json
            except ImportError:
                return
            self._shape, self._decode = JsonShape(description), decode_json

    @property
    def available(self) -> bool:
        return self._shape is not None

    def decode(self, raw: pa.Array, front: int = 0, back: int = 0) -> pa.Array | None:
        """The records, each without its first `front` and last `back` bytes, as a struct array
        (null where a record is null), or None when they are for Arrow's reader to decode."""
        if self._shape is None or raw.type != pa.binary():
            return None
        validity, offsets, data = raw.buffers()
        buffers = self._decode(
            self._shape,
            validity,
            offsets,
            data if data is not None else pa.py_buffer(b""),
            raw.offset,
            len(raw),
            front,
            back,
        )
        return None if buffers is None else _array(self._type, len(raw), buffers)


def alias(name: str, of: str) -> pa.Field:
    """A struct field read into its sibling `of`'s columns when `of`'s member is null or
    absent; its own column is an `int8` of `ALIAS_READ` and `TARGET_READ` bits."""
    return pa.field(name, pa.int8(), nullable=False, metadata={ALIAS_OF: of.encode()})


class NotNativeError(StreamerError):
    """The native decoder cannot decide this batch, or is not installed."""


class NativeJsonOnly:
    """`JsonDecoder`'s interface over the native decoder alone, for a struct only it reads (one
    with an alias): a batch it does not decide raises `NotNativeError`."""

    def __init__(self, struct: pa.StructType):
        self._native = NativeJson(struct)

    @property
    def available(self) -> bool:
        return self._native.available

    def decode(self, raw: pa.Array) -> Decoded:
        return self.decode_inside(raw, 0, 0)

    def decode_inside(self, raw: pa.Array, front: int, back: int) -> Decoded:
        decoded = self._native.decode(raw, front, back)
        if decoded is None:
            raise NotNativeError("the native JSON decoder does not decide this batch")
        return decoded, {}


def _description(field: pa.Field) -> tuple | None:
    """(kind, nullable, children) of a field whose type the native decoder reads; else None."""
    if field.metadata and ALIAS_OF in field.metadata:
        return ("alias", True, [(field.metadata[ALIAS_OF].decode(), None)])
    if pa.types.is_struct(field.type):
        children = [(f.name, _description(f)) for f in field.type]
        if any(child is None for _, child in children):
            return None
        return ("struct", field.nullable, children)
    kind = f"timestamp[{field.type.unit}]" if pa.types.is_timestamp(field.type) else _KINDS.get(field.type)
    return None if kind is None else (kind, field.nullable, [])


def _nullable(arrow_type: pa.DataType) -> pa.DataType:
    if not pa.types.is_struct(arrow_type):
        return arrow_type
    return pa.struct([pa.field(f.name, _nullable(f.type)) for f in arrow_type])


def _array(arrow_type: pa.DataType, length: int, buffers: tuple) -> pa.Array:
    validity, nulls, values, children = buffers
    kids = [_array(f.type, length, child) for f, child in zip(arrow_type, children)] if children else None
    return pa.Array.from_buffers(
        arrow_type,
        length,
        [None if validity is None else pa.py_buffer(validity), *map(pa.py_buffer, values)],
        null_count=nulls,
        children=kids,
    )
