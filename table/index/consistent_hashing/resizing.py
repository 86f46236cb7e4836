"""Resizing a ring: the children of a bucket split or of adjacent buckets merged, as a clustering
plan records them, and the metadata version a completed resize writes."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Sequence

from table.errors import HashingMetadataError
from table.index.consistent_hashing.file_ids import new_file_id_prefix
from table.index.consistent_hashing.model import HASH_VALUE_MASK, HashingMetadata, HashingNode, NodeTag
from table.index.consistent_hashing.router import Router, ring_nodes
from table.jackson import jackson_dumps


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
