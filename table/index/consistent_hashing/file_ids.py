"""The file group of each bucket: its id is the node's prefix and `-0`; initial prefixes are
name-based, so that writers creating a partition at once agree, children's are random."""

from __future__ import annotations

import hashlib
import struct
import uuid
from typing import TYPE_CHECKING

from table.errors import HashingMetadataError

if TYPE_CHECKING:
    from table.index.consistent_hashing.model import HashingNode


def file_id_for(node_or_prefix: HashingNode | str) -> str:
    """The file group of a bucket: Hudi's `FSUtils.createNewFileId(prefix, 0)` = `<prefix>-0`."""
    prefix = node_or_prefix if isinstance(node_or_prefix, str) else node_or_prefix.file_id_prefix
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
