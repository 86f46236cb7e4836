"""Consistent-hashing bucket index (Hudi RFC-42), as Hudi 0.14/0.15 writes and reads it.

The hash space [0, 0x7FFFFFFF] of each partition is cut into ranges by the ring's nodes: a node
owns the hashes greater than its predecessor's value up to and including its own value (the
first node also owns everything above the last node's value). Each node is one bucket, and each
bucket one file group, `<fileIdPrefix>-0`.

A record's hash is xxHash32 (seed 0) of its hash keys joined with "" and masked with 0x7FFFFFFF;
the hash keys come from the record key as Hudi 0.14/0.15's `BucketIdentifier.getHashKeys` takes
them: a key without ':' is its own hash key; otherwise the key is split on ',' and each part on its
first ':', and the parts whose field is one of the index key fields (or that have no ':') give
their values, `__null__` standing for null ("null" once joined) and `__empty__` for "".

On storage each partition has `.hoodie/.bucket_index/consistent_hashing_metadata/<partition>/`
holding `<instant>.hashing_meta` (JSON, laid out byte for byte as Hudi's Jackson pretty printer
writes `HoodieConsistentHashingMetadata`) and, once the resize that wrote it is committed, an
empty `<instant>.commit` marker. The initial metadata has instant `00000000000000`, version 0,
seqNo 0 and counts as committed without a marker.

One concept per module: `model` (the metadata and its nodes), `file_ids`, `initial_ring`,
`hashing`, `router`, `resizing` (children and the next version), `storage` (the files and which
version is committed). This front door is what the rest of the engine uses.
"""

from table.index.consistent_hashing.file_ids import (
    file_id_for,
    file_id_prefix_of,
    initial_file_id_prefix,
    new_file_id_prefix,
)
from table.index.consistent_hashing.hashing import HASH_SEED, hash_key_string, hash_keys, hash_value, hash_values
from table.index.consistent_hashing.initial_ring import default_node_values, initial_metadata
from table.index.consistent_hashing.model import (
    HASH_VALUE_MASK,
    INIT_INSTANT_TS,
    METADATA_VERSION,
    HashingMetadata,
    HashingNode,
    NodeTag,
)
from table.index.consistent_hashing.resizing import (
    apply_children,
    children_from_json,
    children_to_json,
    default_split_value,
    merge_nodes,
    split_node,
)
from table.index.consistent_hashing.router import PartitionRouters, Router, ring_nodes
from table.index.consistent_hashing.storage import (
    commit_marker_path,
    create_initial,
    list_versions,
    load_file,
    load_latest,
    load_or_create,
    metadata_dir,
    metadata_path,
    partitions,
    save,
    write_commit_marker,
)

__all__ = [
    "HASH_SEED",
    "HASH_VALUE_MASK",
    "INIT_INSTANT_TS",
    "METADATA_VERSION",
    "HashingMetadata",
    "HashingNode",
    "NodeTag",
    "PartitionRouters",
    "Router",
    "apply_children",
    "children_from_json",
    "children_to_json",
    "commit_marker_path",
    "create_initial",
    "default_node_values",
    "default_split_value",
    "file_id_for",
    "file_id_prefix_of",
    "hash_key_string",
    "hash_keys",
    "hash_value",
    "hash_values",
    "initial_file_id_prefix",
    "initial_metadata",
    "list_versions",
    "load_file",
    "load_latest",
    "load_or_create",
    "merge_nodes",
    "metadata_dir",
    "metadata_path",
    "new_file_id_prefix",
    "partitions",
    "ring_nodes",
    "save",
    "split_node",
    "write_commit_marker",
]
