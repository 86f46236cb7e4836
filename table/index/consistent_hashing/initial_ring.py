"""The ring Hudi creates for a new partition: the hash space cut into equal ranges."""

from __future__ import annotations

from table.errors import HashingMetadataError
from table.index.consistent_hashing.file_ids import initial_file_id_prefix, new_file_id_prefix
from table.index.consistent_hashing.model import (
    HASH_VALUE_MASK,
    INIT_INSTANT_TS,
    METADATA_VERSION,
    HashingMetadata,
    HashingNode,
    NodeTag,
)


def default_node_values(num_buckets: int) -> list[int]:
    """Hudi's equal division: step = ceil(0x7FFFFFFF / n), node i (1-based) = min(step * i, mask)."""
    if num_buckets < 1:
        raise HashingMetadataError(f"a partition needs at least one bucket, got {num_buckets}")
    step = (HASH_VALUE_MASK + num_buckets - 1) // num_buckets
    return [min(step * i, HASH_VALUE_MASK) for i in range(1, num_buckets + 1)]


def initial_metadata(partition_path: str, num_buckets: int, deterministic: bool = True) -> HashingMetadata:
    """The metadata Hudi creates for a new partition: instant 00000000000000, version 0, seqNo 0.

    With `deterministic` (Hudi 0.15) the prefixes are name-based UUIDs of the partition and the
    bucket's range, so two writers creating the same partition write the same file; without it
    they are random (Hudi 0.14.0). Both are what Hudi writes.
    """
    nodes = []
    start = 0
    for end in default_node_values(num_buckets):
        prefix = initial_file_id_prefix(partition_path, start, end) if deterministic else new_file_id_prefix()
        nodes.append(HashingNode(end, prefix, NodeTag.NORMAL))
        start = end
    return HashingMetadata(METADATA_VERSION, partition_path, INIT_INSTANT_TS, num_buckets, 0, tuple(nodes))
