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
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import itertools
import json
import logging
import re
import struct
import uuid
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from table.errors import HashingMetadataError
from table.index.xxh32 import xxh32
from table.jackson import jackson_dumps
from table.storage.file_io import Storage
from table.storage.layout import HASHING_METADATA_DIR

log = logging.getLogger(__name__)

HASH_VALUE_MASK = 0x7FFFFFFF
HASH_SEED = 0
INIT_INSTANT_TS = "00000000000000"
METADATA_VERSION = 0
HASHING_METADATA_FILE_SUFFIX = ".hashing_meta"
HASHING_METADATA_COMMIT_FILE_SUFFIX = ".commit"
NULL_RECORDKEY_PLACEHOLDER = "__null__"
EMPTY_RECORDKEY_PLACEHOLDER = "__empty__"
#: Record keys as the router takes them: a pyarrow string array or a sequence of str.
RecordKeys: TypeAlias = "pa.Array | pa.ChunkedArray | Sequence[str]"
COLUMN_SEP = ":"
PARTS_SEP = ","


class NodeTag(enum.StrEnum):
    """Hudi's `ConsistentHashingNode.NodeTag`.

    NORMAL: a node of the ring. REPLACE (children only): takes the place of the ring's node with
    the same value, or is added when there is none. DELETE (children only): removes the ring's
    node with the same value.
    """

    NORMAL = "NORMAL"
    REPLACE = "REPLACE"
    DELETE = "DELETE"


@dataclass(frozen=True)
class HashingNode:
    """One node of the ring: the end (inclusive) of its hash range and its file group prefix."""

    value: int
    file_id_prefix: str | None
    tag: NodeTag = NodeTag.NORMAL

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or not 0 <= self.value <= HASH_VALUE_MASK:
            raise HashingMetadataError(f"node value {self.value!r} is outside [0, {HASH_VALUE_MASK}]")
        object.__setattr__(self, "tag", NodeTag(self.tag))

    @property
    def file_id(self) -> str:
        return file_id_for(self)

    def to_json_dict(self) -> dict[str, Any]:
        return {"value": self.value, "fileIdPrefix": self.file_id_prefix, "tag": self.tag.value}

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> HashingNode:
        # "fileIdPfx" is the field's name in metadata written before Hudi 0.13
        prefix = d["fileIdPrefix"] if "fileIdPrefix" in d else d.get("fileIdPfx")
        return cls(int(d["value"]), prefix, NodeTag(d.get("tag") or NodeTag.NORMAL))


@dataclass(frozen=True)
class HashingMetadata:
    """Hudi's `HoodieConsistentHashingMetadata` of one partition.

    `children_nodes` is not persisted (Hudi's field is @JsonIgnore): it carries a pending
    resize's children so that a `Router` can route to them (dual writes).
    """

    version: int
    partition_path: str
    instant: str
    num_buckets: int
    seq_no: int
    nodes: tuple[HashingNode, ...]
    children_nodes: tuple[HashingNode, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "children_nodes", tuple(self.children_nodes))

    @property
    def filename(self) -> str:
        return self.instant + HASHING_METADATA_FILE_SUFFIX

    @property
    def file_ids(self) -> list[str]:
        return [file_id_for(n) for n in self.nodes]

    def with_children(self, children: Iterable[HashingNode]) -> HashingMetadata:
        return replace(self, children_nodes=tuple(children))

    # ---- JSON, as Hudi's Jackson writes it ----------------------------------------------

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "partitionPath": self.partition_path,
            "instant": self.instant,
            "numBuckets": self.num_buckets,
            "seqNo": self.seq_no,
            "nodes": [n.to_json_dict() for n in self.nodes],
        }

    def to_json(self) -> str:
        """Jackson's `writerWithDefaultPrettyPrinter()` output: 2-space indents, `" : "`, arrays inline."""
        return jackson_dumps(self.to_json_dict())

    def to_bytes(self) -> bytes:
        return self.to_json().encode("utf-8")

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> HashingMetadata:
        return cls(
            version=int(d.get("version") or 0),
            partition_path=d.get("partitionPath") or "",
            instant=d["instant"],
            num_buckets=int(d["numBuckets"]),
            seq_no=int(d.get("seqNo") or 0),
            nodes=tuple(HashingNode.from_json_dict(n) for n in d.get("nodes") or ()),
        )

    @classmethod
    def from_bytes(cls, data: bytes | str) -> HashingMetadata:
        """Parse a `.hashing_meta` file (bytes or text)."""
        try:
            text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
            return cls.from_json_dict(json.loads(text))
        except (ValueError, KeyError, TypeError) as e:
            raise HashingMetadataError(f"unable to read hashing metadata: {e}") from e

    from_json = from_bytes


# ---- file ids --------------------------------------------------------------------------------


def file_id_for(node_or_prefix: HashingNode | str) -> str:
    """The file group of a bucket: Hudi's `FSUtils.createNewFileId(prefix, 0)` = `<prefix>-0`."""
    prefix = node_or_prefix.file_id_prefix if isinstance(node_or_prefix, HashingNode) else node_or_prefix
    if not prefix:
        raise HashingMetadataError(f"node {node_or_prefix!r} has no file id prefix")
    return f"{prefix}-0"


def file_id_prefix_of(file_id: str) -> str:
    """Hudi's `FSUtils.getFileIdPfxFromFileId`: the file id up to its last '-'."""
    return file_id[: file_id.rindex("-")]


def new_file_id_prefix() -> str:
    """A fresh random prefix (`FSUtils.createNewFileIdPfx`), as Hudi gives children of a resize."""
    return str(uuid.uuid4())


def initial_file_id_prefix(partition_path: str, bucket_start: int, bucket_end: int) -> str:
    """Hudi 0.15's prefix of an initial bucket: `UUID.nameUUIDFromBytes(start ‖ end ‖ partition)`
    (two big-endian longs, then the partition path in UTF-8), so concurrent creators agree."""
    data = struct.pack(">qq", bucket_start, bucket_end) + partition_path.encode("utf-8")
    digest = bytearray(hashlib.md5(data).digest())
    digest[6] = (digest[6] & 0x0F) | 0x30  # version 3 (name-based, MD5)
    digest[8] = (digest[8] & 0x3F) | 0x80  # IETF variant
    return str(uuid.UUID(bytes=bytes(digest)))


# ---- the initial ring ------------------------------------------------------------------------


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


# ---- hashing ---------------------------------------------------------------------------------


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


# ---- routing ---------------------------------------------------------------------------------


class Router:
    """The ring of one partition (Hudi's `ConsistentBucketIdentifier`), vectorized.

    Nodes are kept sorted by value; a hash goes to the first node whose value is >= the hash,
    wrapping to the first node. With `include_children` a pending resize's children replace or
    delete the ring's nodes first, as Hudi's identifier does for writers during a resize.
    Without it, a router whose metadata carries children also knows the ring they make, for the
    dual writes of `file_ids_with_children`. Picklable (Spark broadcasts it).
    """

    def __init__(
        self, metadata: HashingMetadata, index_key_fields: Sequence[str] | None = None, include_children: bool = False
    ):
        self.metadata = metadata
        self.index_key_fields = tuple(index_key_fields) if index_key_fields else None
        nodes = ring_nodes(metadata, include_children=include_children)
        if not nodes:
            raise HashingMetadataError(f"hashing metadata of partition '{metadata.partition_path}' has no nodes")
        self.nodes: tuple[HashingNode, ...] = tuple(nodes)
        self.values = np.array([n.value for n in self.nodes], dtype=np.int64)
        self.node_file_ids: list[str | None] = [file_id_for(n) if n.file_id_prefix else None for n in self.nodes]
        self._by_file_id = {f: i for i, f in enumerate(self.node_file_ids) if f}
        self.child_ring: Router | None = None
        if metadata.children_nodes and not include_children:
            self.child_ring = Router(metadata, index_key_fields, include_children=True)

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def num_buckets(self) -> int:
        return len(self.nodes)

    def indices_for_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """Index into `nodes` of the bucket of each (masked) hash."""
        idx = np.searchsorted(self.values, np.asarray(hashes, dtype=np.int64), side="left")
        idx[idx == len(self.values)] = 0
        return idx

    def route(self, record_keys: RecordKeys) -> np.ndarray:
        """Index into `nodes` of each record key's bucket."""
        return self.indices_for_hashes(hash_values(record_keys, self.index_key_fields))

    def file_ids(self, record_keys: RecordKeys) -> pa.Array:
        """The file group id of each record key's bucket, a string array."""
        return self._file_ids_of_hashes(hash_values(record_keys, self.index_key_fields))

    def file_ids_with_children(self, record_keys: RecordKeys) -> tuple[pa.Array, pa.Array | None]:
        """Each key's file group and, where a pending resize replaces its bucket, the child's
        file group the record is also written to (null elsewhere); None without a pending resize."""
        hashes = hash_values(record_keys, self.index_key_fields)
        file_ids = self._file_ids_of_hashes(hashes)
        if self.child_ring is None:
            return file_ids, None
        child_ids = self.child_ring._file_ids_of_hashes(hashes)
        return file_ids, pc.if_else(pc.equal(file_ids, child_ids), pa.scalar(None, pa.string()), child_ids)

    def _file_ids_of_hashes(self, hashes: np.ndarray) -> pa.Array:
        idx = self.indices_for_hashes(hashes)
        missing = [i for i in np.unique(idx).tolist() if self.node_file_ids[i] is None]
        if missing:
            raise HashingMetadataError(
                f"hashing node(s) {[self.nodes[i] for i in missing]} of partition "
                f"'{self.metadata.partition_path}' have no file group"
            )
        return pc.take(pa.array(self.node_file_ids, pa.string()), pa.array(idx, pa.int64()))

    def node_for_key(self, record_key: str) -> HashingNode:
        return self.nodes[int(self.route([record_key])[0])]

    def node_for_hash(self, hash_value_: int) -> HashingNode:
        return self.nodes[int(self.indices_for_hashes(np.array([hash_value_]))[0])]

    def node_by_file_id(self, file_id: str) -> HashingNode | None:
        i = self._by_file_id.get(file_id)
        return None if i is None else self.nodes[i]

    def index_of(self, node: HashingNode | str) -> int:
        """Position of a node (given as a node or a file id) in the ring."""
        if isinstance(node, str):
            i = self._by_file_id.get(node)
        else:
            pos = int(np.searchsorted(self.values, node.value))
            i = pos if pos < len(self.nodes) and self.nodes[pos].value == node.value else None
            if i is not None and node.file_id_prefix and self.nodes[i].file_id_prefix != node.file_id_prefix:
                i = None
        if i is None:
            raise HashingMetadataError(
                f"{node!r} is not a node of the ring of partition '{self.metadata.partition_path}'"
            )
        return i

    def former(self, node: HashingNode | str) -> HashingNode:
        """The node before (wrapping from the first to the last)."""
        return self.nodes[self.index_of(node) - 1]

    def latter(self, node: HashingNode | str) -> HashingNode:
        """The node after (wrapping from the last to the first)."""
        return self.nodes[(self.index_of(node) + 1) % len(self.nodes)]

    def range_of(self, node: HashingNode | str) -> tuple[int, int]:
        """(former's value, node's value): the node owns hashes in (start, end], wrapping."""
        i = self.index_of(node)
        return self.nodes[i - 1].value, self.nodes[i].value


class PartitionRouters:
    """The rings of many partitions applied at once: a batch that touches hundreds of partitions
    is routed by one search over all their nodes (keyed by partition, then value), not by a
    search per partition. Routes as each partition's `Router` does, dual writes included."""

    def __init__(self, routers: Sequence[Router]):
        self._primary = _NodeSearch([r.nodes for r in routers], [r.node_file_ids for r in routers])
        resizing = [r.child_ring for r in routers]
        self._children = None
        if any(c is not None for c in resizing):
            self._children = _NodeSearch(
                [c.nodes if c else () for c in resizing], [c.node_file_ids if c else [] for c in resizing]
            )
        self._names = [r.metadata.partition_path for r in routers]

    def file_ids_with_children(
        self, partition_codes: np.ndarray, hashes: np.ndarray
    ) -> tuple[pa.Array, pa.Array | None]:
        """For rows of partition `routers[code]` with these masked hashes: each row's file group
        and, where a pending resize replaces its bucket, the child's (null elsewhere); None
        without a pending resize in any of the partitions."""
        file_ids = self._primary.file_ids(partition_codes, hashes, self._names)
        if self._children is None:
            return file_ids, None
        child_ids = self._children.file_ids(partition_codes, hashes, self._names)
        return file_ids, pc.if_else(pc.equal(file_ids, child_ids), pa.scalar(None, pa.string()), child_ids)


class _NodeSearch:
    """The nodes of several rings as one sorted array of `partition index << 32 | value`."""

    def __init__(self, nodes: Sequence[Sequence[HashingNode]], file_ids: Sequence[Sequence[str | None]]):
        sizes = np.array([len(n) for n in nodes], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)])
        self.keys = np.concatenate(
            [(i << 32) + np.array([n.value for n in ring], dtype=np.int64) for i, ring in enumerate(nodes)]
            or [np.zeros(0, np.int64)]
        )
        self.node_file_ids = pa.array([f for ids in file_ids for f in ids], pa.string())
        self.sizes = sizes

    def file_ids(self, codes: np.ndarray, hashes: np.ndarray, names: list[str]) -> pa.Array:
        """Each row's node: the first of its partition's nodes whose value is >= the hash,
        wrapping to the partition's first; null for a row of a partition without this ring."""
        codes = np.asarray(codes, dtype=np.int64)
        found = np.searchsorted(self.keys, (codes << 32) + np.asarray(hashes, dtype=np.int64), side="left")
        found = np.where(found >= self.starts[codes + 1], self.starts[codes], found)
        has_ring = self.sizes[codes] > 0
        ids = (
            pc.take(self.node_file_ids, pa.array(np.where(has_ring, found, 0), mask=~has_ring))
            if len(self.node_file_ids)
            else pa.nulls(len(codes), pa.string())
        )
        missing = pc.and_(pc.is_null(ids), pa.array(has_ring))
        if pc.any(missing).as_py():
            node = int(found[np.flatnonzero(np.asarray(missing))[0]])
            code = int(np.searchsorted(self.starts, node, side="right") - 1)
            raise HashingMetadataError(f"a hashing node of partition '{names[code]}' has no file group")
        return ids


def ring_nodes(metadata: HashingMetadata, include_children: bool = False) -> list[HashingNode]:
    """The ring's nodes sorted by value, children applied first when asked (a value seen twice:
    the later node wins, as in Hudi's TreeMap)."""
    ring: dict[int, HashingNode] = {}
    for n in metadata.nodes:
        ring[n.value] = n
    if include_children:
        for c in metadata.children_nodes:
            if c.tag == NodeTag.REPLACE:
                ring[c.value] = c
            elif c.tag == NodeTag.DELETE:
                if c.value not in ring:
                    raise HashingMetadataError(f"child {c!r} deletes a node the ring does not have")
                del ring[c.value]
            else:
                raise HashingMetadataError(f"child node is tagged NORMAL or unknown: {c!r}")
    return [ring[v] for v in sorted(ring)]


# ---- resizing: children and the next metadata version ------------------------------------------


def default_split_value(metadata: HashingMetadata, node: HashingNode | str) -> int | None:
    """Hudi's split point: the middle of the node's range (wrapping); None when it is too small."""
    former, end = Router(metadata).range_of(node)
    mid = former + end + (0 if former < end else HASH_VALUE_MASK + 1)
    mid = (mid >> 1) & HASH_VALUE_MASK
    return None if mid in (former, end) else mid


def split_node(
    metadata: HashingMetadata,
    node: HashingNode | str,
    split_value: int | None = None,
    new_prefix: Callable[[], str] = new_file_id_prefix,
) -> tuple[HashingNode, HashingNode] | None:
    """The two children of a bucket split at `split_value` (default: Hudi's middle), as Hudi's
    plan records them: (split_value, new prefix, REPLACE) and (node's value, new prefix, REPLACE).
    None when the range is too small to split at its middle."""
    router = Router(metadata)
    start, end = router.range_of(node)
    if split_value is None:
        split_value = default_split_value(metadata, node)
        if split_value is None:
            return None
    elif not _strictly_inside(split_value, start, end):
        raise HashingMetadataError(
            f"split value {split_value} is not strictly inside the node's range ({start}, {end}]"
        )
    return (HashingNode(split_value, new_prefix(), NodeTag.REPLACE), HashingNode(end, new_prefix(), NodeTag.REPLACE))


def _strictly_inside(value: int, start: int, end: int) -> bool:
    if not 0 <= value <= HASH_VALUE_MASK:
        return False
    if start < end:
        return start < value < end
    return value > start or value < end  # the range wraps past the top of the hash space


def merge_nodes(
    metadata: HashingMetadata,
    adjacent_nodes: Sequence[HashingNode | str],
    new_prefix: Callable[[], str] = new_file_id_prefix,
) -> list[HashingNode]:
    """Children merging adjacent buckets (in ring order) into one, as Hudi's plan records them:
    DELETE (no prefix) for every node but the last, the last REPLACEd with a new prefix."""
    if len(adjacent_nodes) < 2:
        raise HashingMetadataError("at least two buckets are needed for a merge")
    router = Router(metadata)
    nodes = [router.nodes[router.index_of(n)] for n in adjacent_nodes]
    for a, b in itertools.pairwise(nodes):
        if router.former(b).value != a.value:
            raise HashingMetadataError(f"cannot merge discontinuous hash ranges: {a!r} does not precede {b!r}")
    if len({n.value for n in nodes}) != len(nodes):
        raise HashingMetadataError("a merge names a bucket twice")
    children = [HashingNode(n.value, None, NodeTag.DELETE) for n in nodes[:-1]]
    children.append(HashingNode(nodes[-1].value, new_prefix(), NodeTag.REPLACE))
    return children


def apply_children(metadata: HashingMetadata, children: Iterable[HashingNode], instant: str) -> HashingMetadata:
    """The metadata a completed resize at `instant` writes: the ring with the children applied,
    every node NORMAL, seqNo + 1; version and numBuckets (the initial count) carried over as Hudi does."""
    nodes = ring_nodes(metadata.with_children(children), include_children=True)
    if not nodes:
        raise HashingMetadataError("applying the children leaves the ring empty")
    for n in nodes:
        if not n.file_id_prefix:
            raise HashingMetadataError(f"node {n!r} has no file id prefix after applying the children")
    return HashingMetadata(
        version=metadata.version,
        partition_path=metadata.partition_path,
        instant=instant,
        num_buckets=metadata.num_buckets,
        seq_no=metadata.seq_no + 1,
        nodes=tuple(HashingNode(n.value, n.file_id_prefix, NodeTag.NORMAL) for n in nodes),
    )


def children_to_json(children: Iterable[HashingNode]) -> str:
    """Children as Hudi's `ConsistentHashingNode.toJsonString` writes them into a clustering plan."""
    return jackson_dumps([c.to_json_dict() for c in children])


def children_from_json(text: str | None) -> list[HashingNode]:
    if not text:
        return []
    return [HashingNode.from_json_dict(d) for d in json.loads(text)]


# ---- storage ---------------------------------------------------------------------------------


def metadata_dir(partition_path: str) -> str:
    partition_path = partition_path.strip("/")
    return f"{HASHING_METADATA_DIR}/{partition_path}" if partition_path else HASHING_METADATA_DIR


def metadata_path(partition_path: str, instant: str) -> str:
    return f"{metadata_dir(partition_path)}/{instant}{HASHING_METADATA_FILE_SUFFIX}"


def commit_marker_path(partition_path: str, instant: str) -> str:
    return f"{metadata_dir(partition_path)}/{instant}{HASHING_METADATA_COMMIT_FILE_SUFFIX}"


def save(storage: Storage, metadata: HashingMetadata) -> None:
    """Write `<instant>.hashing_meta`, replacing an earlier attempt (a resize may be re-run)."""
    storage.write_bytes(metadata_path(metadata.partition_path, metadata.instant), metadata.to_bytes())


def write_commit_marker(storage: Storage, partition_path: str, instant: str) -> None:
    """Create the empty `<instant>.commit` marker in the partition's metadata directory; once
    there, readers take the metadata of `instant` as committed. Idempotent."""
    with contextlib.suppress(FileExistsError):
        storage.create(commit_marker_path(partition_path, instant), b"")


def load_file(storage: Storage, partition_path: str, instant: str) -> HashingMetadata:
    path = metadata_path(partition_path, instant)
    try:
        return HashingMetadata.from_bytes(storage.read_bytes(path))
    except HashingMetadataError as e:
        raise HashingMetadataError(f"{path}: {e}") from e


def create_initial(storage: Storage, partition_path: str, num_buckets: int) -> HashingMetadata:
    """Create the partition's initial metadata; when it already exists (another writer was first,
    or this one crashed after creating it), return what is there instead."""
    metadata = initial_metadata(partition_path, num_buckets)
    try:
        storage.create(metadata_path(partition_path, INIT_INSTANT_TS), metadata.to_bytes())
        return metadata
    except FileExistsError:
        return load_file(storage, partition_path, INIT_INSTANT_TS)


def list_versions(storage: Storage, partition_path: str) -> tuple[list[str], set[str]]:
    """(instants of the metadata files, ascending; instants that have a commit marker)."""
    versions: set[str] = set()
    markers: set[str] = set()
    for entry in storage.list_dir(metadata_dir(partition_path)):
        name = entry.name
        if entry.is_dir or name.startswith("."):
            continue  # sub-partitions, our own temporary files
        instant = name.split(".")[0]
        if name.endswith(HASHING_METADATA_FILE_SUFFIX):
            versions.add(instant)
        elif name.endswith(HASHING_METADATA_COMMIT_FILE_SUFFIX):
            markers.add(instant)
    return sorted(versions), markers


def partitions(storage: Storage) -> list[str]:
    """The partitions that have hashing metadata ('' for a non-partitioned table)."""
    found: list[str] = []

    def walk(rel: str, partition: str) -> None:
        entries = storage.list_dir(rel)
        if any(e.name.endswith(HASHING_METADATA_FILE_SUFFIX) for e in entries if not e.is_dir):
            found.append(partition)
        for e in entries:
            if e.is_dir and not e.name.startswith("."):
                walk(e.path, f"{partition}/{e.name}" if partition else e.name)

    walk(HASHING_METADATA_DIR, "")
    return sorted(found)


def load_latest(
    storage: Storage,
    partition_path: str,
    completed_instants: AbstractSet[str] | None = None,
    *,
    pending_instants: set[str] | None = None,
    existing_file_id_prefixes: Iterable[str] | None = None,
    repair: bool = True,
) -> HashingMetadata | None:
    """The partition's latest committed hashing metadata, or None when it has none.

    The rule (Hudi's `ConsistentBucketIndexUtils.loadMetadata`):
    - a metadata file with a `<instant>.commit` marker is committed, unless its instant is in
      `pending_instants` (the caller's timeline is older than the resize's completion, and what
      it does must follow that timeline: a writer that saw the resize pending dual-writes); the
      initial one (00000000000000) is committed;
    - a newer file without a marker is committed when its instant is in `completed_instants`
      (the resize's replacecommit completed but the marker was not written yet);
    - when neither says, and its instant is not in `pending_instants`, it is committed if one of
      its nodes' prefixes is in `existing_file_id_prefixes` (the prefixes of the latest base
      files of the partition's committed file system view): the replacecommit may have been
      archived before the marker was written. Both must be given for this check to run;
    - the answer is the newest committed file. With `repair`, markers are written for the files
      found committed without one, as Hudi does, except the initial one: Hudi 0.15 never writes
      a marker for it where it reads them, and a marker there makes its `loadMetadata` find no
      metadata at all while a newer resize is pending (its clustering then fails).
    `completed_instants` None means the timeline is not consulted: only markers (and the initial
    file) count.
    """
    versions, markers = list_versions(storage, partition_path)
    for orphan in sorted(markers - set(versions)):
        log.warning(
            "hashing metadata commit marker %s has no metadata file; ignored",
            commit_marker_path(partition_path, orphan),
        )
    pending = pending_instants or set()
    committed = [v for v in versions if v in markers and v not in pending]
    latest = committed[-1] if committed else None
    existing = set(existing_file_id_prefixes) if existing_file_id_prefixes is not None else None
    for instant in versions:
        if latest is not None and instant <= latest:
            continue
        if instant in pending:
            is_committed = False
        elif instant == INIT_INSTANT_TS or (completed_instants is not None and instant in completed_instants):
            is_committed = True
        elif existing is not None and pending_instants is not None and instant not in pending_instants:
            candidate = load_file(storage, partition_path, instant)
            is_committed = any(n.file_id_prefix in existing for n in candidate.nodes)
        else:
            is_committed = False
        if is_committed:
            if repair and instant not in markers and instant != INIT_INSTANT_TS:
                write_commit_marker(storage, partition_path, instant)
            latest = instant
    return None if latest is None else load_file(storage, partition_path, latest)


def load_or_create(
    storage: Storage, partition_path: str, num_buckets: int, completed_instants: AbstractSet[str] | None = None
) -> HashingMetadata:
    """Hudi's `loadOrCreateMetadata`: the latest committed metadata, created when there is none."""
    metadata = load_latest(storage, partition_path, completed_instants)
    return metadata if metadata is not None else create_initial(storage, partition_path, num_buckets)
