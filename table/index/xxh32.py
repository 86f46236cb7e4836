"""xxHash32 of every string of an Arrow array at once, with numpy.

The bucket index hashes each record key with xxHash32 (seed 0), as Hudi's `HashID.getXXHash32`
does. Hashing key by key in Python costs about a microsecond a key, which a micro-batch of
100,000 records feels; here the keys are grouped by byte length and each group is hashed as a
matrix, one xxHash32 step for all of its keys at a time. uint32 arithmetic wraps as xxHash's
does, so the result is the same 32-bit value the reference implementation gives.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from table.errors import InvalidRequestError, UnsupportedTypeError

_P1 = np.uint32(2654435761)
_P2 = np.uint32(2246822519)
_P3 = np.uint32(3266489917)
_P4 = np.uint32(668265263)
_P5 = np.uint32(374761393)
_STRIPE = 16


def xxh32(values: pa.Array, seed: int = 0) -> np.ndarray:
    """The xxHash32 of the UTF-8 (or binary) bytes of each value, as uint32. No nulls allowed."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        raise InvalidRequestError(f"{values.null_count} value(s) are null; they cannot be hashed")
    offsets_type: type[np.signedinteger[Any]]
    if pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type):
        offsets_type = np.int64
    elif pa.types.is_string(values.type) or pa.types.is_binary(values.type):
        offsets_type = np.int32
    else:
        raise UnsupportedTypeError(f"cannot hash values of type {values.type}")
    n = len(values)
    out = np.empty(n, dtype=np.uint32)
    if n == 0:
        return out
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offsets_type)[values.offset : values.offset + n + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    if (lengths == lengths[0]).all():  # keys of one length lie in the buffer as a matrix already
        length = int(lengths[0])
        matrix = data[starts[0] : starts[0] + n * length].reshape(n, length)
        return _hash_equal_lengths(matrix, np.uint32(seed & 0xFFFFFFFF))
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = lengths[order]
    bounds = np.flatnonzero(np.diff(sorted_lengths)) + 1
    for rows in np.split(order, bounds):
        length = int(lengths[rows[0]])
        matrix = data[starts[rows][:, None] + np.arange(length)] if length else np.empty((len(rows), 0), np.uint8)
        out[rows] = _hash_equal_lengths(matrix, np.uint32(seed & 0xFFFFFFFF))
    return out


def _hash_equal_lengths(matrix: np.ndarray, seed: np.uint32) -> np.ndarray:
    """xxHash32 of each row of a (keys, bytes) uint8 matrix."""
    n, length = matrix.shape
    words = np.ascontiguousarray(matrix[:, : length - length % 4]).view("<u4").astype(np.uint32, copy=False)
    with np.errstate(over="ignore"):
        pos = 0
        if length >= _STRIPE:
            v = [
                np.full(n, seed + _P1 + _P2, np.uint32),
                np.full(n, seed + _P2, np.uint32),
                np.full(n, seed, np.uint32),
                np.full(n, seed - _P1, np.uint32),
            ]
            while pos + _STRIPE <= length:
                for lane in range(4):
                    v[lane] = _rotl(v[lane] + words[:, pos // 4 + lane] * _P2, 13) * _P1
                pos += _STRIPE
            h = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
        else:
            h = np.full(n, seed + _P5, np.uint32)
        h = h + np.uint32(length)
        while pos + 4 <= length:
            h = _rotl(h + words[:, pos // 4] * _P3, 17) * _P4
            pos += 4
        while pos < length:
            h = _rotl(h + matrix[:, pos].astype(np.uint32) * _P5, 11) * _P1
            pos += 1
        h ^= h >> np.uint32(15)
        h *= _P2
        h ^= h >> np.uint32(13)
        h *= _P3
        h ^= h >> np.uint32(16)
    return h


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))
