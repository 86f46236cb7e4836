"""Inside an encoded Avro data block of a Hudi log file."""

from __future__ import annotations

import struct


def avro_records_in(block_bytes: bytes) -> list[bytes]:
    """The per-record Avro bodies of an encoded Avro data block."""
    (count,) = struct.unpack_from(">i", block_bytes, 22)
    pos = 26
    for _ in range(count):
        (length,) = struct.unpack_from(">i", block_bytes, pos + 4)
        pos += 8 + length
    content_at = pos + 8
    (n_records,) = struct.unpack_from(">i", block_bytes, content_at + 4)
    records, pos = [], content_at + 8
    for _ in range(n_records):
        (length,) = struct.unpack_from(">i", block_bytes, pos)
        records.append(block_bytes[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return records
