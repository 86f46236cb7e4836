"""Routing records to buckets: the ring of one partition, or the rings of many at once, with the
children of a pending resize for dual writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from table.errors import HashingMetadataError
from table.index.consistent_hashing.file_ids import file_id_for
from table.index.consistent_hashing.hashing import RecordKeys, hash_values
from table.index.consistent_hashing.model import HashingMetadata, HashingNode, NodeTag


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
    search per partition. Routes as each partition's `Router` does, dual writes included.

    Built once per commit and sent to every task: it holds a few arrays, not an object per
    partition, so it pickles small; partitions met later (new ones) are added with `extended`."""

    def __init__(self, names: list[str], primary: _NodeSearch, children: _NodeSearch | None):
        self.names = names
        self.codes = {name: code for code, name in enumerate(names)}
        self._primary = primary
        self._children = children  # None: no partition has a pending resize

    @classmethod
    def of(cls, routers: Sequence[Router]) -> PartitionRouters:
        resizing = [r.child_ring for r in routers]
        children = None
        if any(c is not None for c in resizing):
            children = _NodeSearch.of(
                [c.nodes if c else () for c in resizing], [c.node_file_ids if c else [] for c in resizing]
            )
        primary = _NodeSearch.of([r.nodes for r in routers], [r.node_file_ids for r in routers])
        return cls([r.metadata.partition_path for r in routers], primary, children)

    def extended(self, routers: Sequence[Router]) -> PartitionRouters:
        """These rings and those of `routers` (partitions not among them), which get the next codes."""
        more = PartitionRouters.of(routers)
        children = None
        if self._children is not None or more._children is not None:
            children = (self._children or self._primary.empty()).followed_by(more._children or more._primary.empty())
        return PartitionRouters(self.names + more.names, self._primary.followed_by(more._primary), children)

    def file_ids_with_children(
        self, partition_codes: np.ndarray, hashes: np.ndarray
    ) -> tuple[pa.Array, pa.Array | None]:
        """For rows of partition `names[code]` with these masked hashes: each row's file group
        and, where a pending resize replaces its bucket, the child's (null elsewhere); None
        without a pending resize in any of the partitions."""
        file_ids = self._primary.file_ids(partition_codes, hashes, self.names)
        if self._children is None:
            return file_ids, None
        child_ids = self._children.file_ids(partition_codes, hashes, self.names)
        return file_ids, pc.if_else(pc.equal(file_ids, child_ids), pa.scalar(None, pa.string()), child_ids)


@dataclass(frozen=True)
class _NodeSearch:
    """The nodes of several rings as one sorted array of `partition index << 32 | value`."""

    keys: np.ndarray
    starts: np.ndarray  # where each partition's nodes start in `keys`, and where the last ends
    sizes: np.ndarray
    node_file_ids: pa.Array

    @classmethod
    def of(cls, nodes: Sequence[Sequence[HashingNode]], file_ids: Sequence[Sequence[str | None]]) -> _NodeSearch:
        sizes = np.array([len(n) for n in nodes], dtype=np.int64)
        keys = np.concatenate(
            [(i << 32) + np.array([n.value for n in ring], dtype=np.int64) for i, ring in enumerate(nodes)]
            or [np.zeros(0, np.int64)]
        )
        return cls(keys, _starts(sizes), sizes, pa.array([f for ids in file_ids for f in ids], pa.string()))

    def empty(self) -> _NodeSearch:
        """As many partitions, none of them with nodes (those without a pending resize)."""
        sizes = np.zeros(len(self.sizes), np.int64)
        return _NodeSearch(np.zeros(0, np.int64), _starts(sizes), sizes, pa.array([], pa.string()))

    def followed_by(self, other: _NodeSearch) -> _NodeSearch:
        """These partitions, then `other`'s, numbered after them."""
        sizes = np.concatenate([self.sizes, other.sizes])
        shifted = other.keys + (np.int64(len(self.sizes)) << 32)
        return _NodeSearch(
            np.concatenate([self.keys, shifted]),
            _starts(sizes),
            sizes,
            pa.concat_arrays([self.node_file_ids, other.node_file_ids]),
        )

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


def _starts(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


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
