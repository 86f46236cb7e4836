"""A record's hash as Hudi's consistent-hashing index takes it: xxHash32 (seed 0) of the hash keys
the record key gives (`BucketIdentifier.getHashKeys`), masked with 0x7FFFFFFF; one key at a time,
or a whole Arrow array vectorised."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from table.errors import HashingMetadataError
from table.index.consistent_hashing.model import HASH_VALUE_MASK
from table.index.xxh32 import xxh32

#: Record keys as the index takes them: an Arrow string array (chunked or not), or strings.
RecordKeys: TypeAlias = "pa.Array | pa.ChunkedArray | Sequence[str]"

HASH_SEED = 0
NULL_RECORDKEY_PLACEHOLDER = "__null__"
EMPTY_RECORDKEY_PLACEHOLDER = "__empty__"
COLUMN_SEP = ":"
PARTS_SEP = ","


def hash_keys(record_key: str, index_key_fields: Sequence[str] | None = None) -> list[str | None]:
    """Hudi 0.14/0.15 `BucketIdentifier.getHashKeys(recordKey, indexKeyFields)`.

    `index_key_fields` is Hudi's `hoodie.bucket.index.hash.field`, which defaults to the record
    key fields; None or empty keeps every part. Note Hudi's quirk, kept for compatibility: a
    single-field key containing ':' (a timestamp, say) keeps no part when the text before its
    first ':' is not an index key field, so all such keys hash alike.
    """
    if COLUMN_SEP not in record_key:
        return [record_key]
    fields = list(index_key_fields) if index_key_fields else []
    out: list[str | None] = []
    for kv in _java_split(record_key, PARTS_SEP):
        parts = kv.split(COLUMN_SEP, 1)
        if len(parts) == 1:
            out.append(parts[0])
        elif not fields or parts[0] in fields:
            value = parts[1]
            out.append(
                None if value == NULL_RECORDKEY_PLACEHOLDER else "" if value == EMPTY_RECORDKEY_PLACEHOLDER else value
            )
    return out


def hash_key_string(record_key: str, index_key_fields: Sequence[str] | None = None) -> str:
    """The string Hudi hashes: `String.join("", hashKeys)`, a null part joining as "null"."""
    return "".join("null" if k is None else k for k in hash_keys(record_key, index_key_fields))


def hash_value(record_key: str, index_key_fields: Sequence[str] | None = None) -> int:
    """`HashID.getXXHash32(joined, 0) & 0x7FFFFFFF`."""
    return (
        xxhash.xxh32_intdigest(hash_key_string(record_key, index_key_fields).encode("utf-8"), HASH_SEED)
        & HASH_VALUE_MASK
    )


def hash_values(record_keys: RecordKeys, index_key_fields: Sequence[str] | None = None) -> np.ndarray:
    """The masked hash of each record key (a pyarrow string array or a sequence of str), int64."""
    array = _key_array(record_keys)
    if len(array) and bool(pc.any(pc.match_substring(array, COLUMN_SEP)).as_py()):
        fields = list(index_key_fields) if index_key_fields else None
        joined = _joined_plain_complex_keys(array, fields)
        plain = pc.invert(pc.match_substring(array, COLUMN_SEP))
        strings = pc.if_else(plain, array, joined) if joined is not None else pc.if_else(plain, array, None)
        slow = np.flatnonzero(np.asarray(strings.is_null()))
        if len(slow):  # keys of other shapes: Hudi's split rules, one by one
            keys = array.take(pa.array(slow)).to_pylist()
            strings = pc.replace_with_mask(
                strings, strings.is_null(), pa.array([hash_key_string(k, fields) for k in keys], pa.string())
            )
        hashed = xxh32(strings, HASH_SEED)
    else:
        hashed = xxh32(array, HASH_SEED)
    return hashed.astype(np.int64) & HASH_VALUE_MASK


def _joined_plain_complex_keys(keys: pa.Array, fields: list[str] | None) -> pa.Array | None:
    """Vectorized hash strings of the keys of the form `f1:v1,...,fn:vn` (exactly the index key
    fields, in order, values without ',' or ':'); null for every other key (slow path)."""
    if not fields or any(COLUMN_SEP in f or PARTS_SEP in f for f in fields):
        return None
    pattern = "^" + PARTS_SEP.join(f"{re.escape(f)}{COLUMN_SEP}(?P<g{i}>[^,:]*)" for i, f in enumerate(fields)) + "$"
    groups = pc.extract_regex(keys, pattern)  # null where the key does not match
    values = []
    for i in range(len(fields)):
        g = pc.struct_field(groups, f"g{i}")
        g = pc.if_else(
            pc.equal(g, NULL_RECORDKEY_PLACEHOLDER), "null", pc.if_else(pc.equal(g, EMPTY_RECORDKEY_PLACEHOLDER), "", g)
        )
        values.append(g)
    joined = values[0] if len(values) == 1 else pc.binary_join_element_wise(*values, "")
    return pc.if_else(pc.is_valid(groups), joined, pa.scalar(None, pa.string()))


def _key_array(record_keys: RecordKeys) -> pa.Array:
    if isinstance(record_keys, pa.ChunkedArray):
        record_keys = record_keys.combine_chunks() if record_keys.num_chunks != 1 else record_keys.chunk(0)
    if not isinstance(record_keys, pa.Array):
        record_keys = pa.array(list(record_keys), pa.string())
    if record_keys.null_count:
        raise HashingMetadataError(f"{record_keys.null_count} record key(s) are null; they cannot be routed")
    if not pa.types.is_string(record_keys.type):
        record_keys = record_keys.cast(pa.string())
    return record_keys


def _java_split(text: str, sep: str) -> list[str]:
    """Java's `String.split(sep)` for a one-character literal: trailing empty strings dropped."""
    if sep not in text:
        return [text]
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts
