"""The hashing metadata of a partition and its nodes: Hudi's `HoodieConsistentHashingMetadata`
and `ConsistentHashingNode`, read and written as Hudi's Jackson lays them out."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from table.errors import HashingMetadataError
from table.index.consistent_hashing.file_ids import file_id_for
from table.jackson import jackson_dumps

HASH_VALUE_MASK = 0x7FFFFFFF
INIT_INSTANT_TS = "00000000000000"
METADATA_VERSION = 0
HASHING_METADATA_FILE_SUFFIX = ".hashing_meta"


class NodeTag(StrEnum):
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
