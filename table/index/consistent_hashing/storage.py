"""The hashing metadata on storage: `<instant>.hashing_meta` files and their `<instant>.commit`
markers under `.hoodie/.bucket_index/consistent_hashing_metadata/<partition>/`, and which
version of a partition is committed (Hudi's `ConsistentBucketIndexUtils`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from table.errors import HashingMetadataError
from table.index.consistent_hashing.initial_ring import initial_metadata
from table.index.consistent_hashing.model import HASHING_METADATA_FILE_SUFFIX, INIT_INSTANT_TS, HashingMetadata
from table.storage.file_io import Storage
from table.storage.layout import HASHING_METADATA_DIR

log = logging.getLogger(__name__)

HASHING_METADATA_COMMIT_FILE_SUFFIX = ".commit"


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
