"""Which partitions changed since the catalog's last sync, read from the timeline, as Hudi's
`TimelineUtils` reads them for its sync: no listing of the table.

- Written: the partitions in the write stats (and replaced file groups) of every commit,
  deltacommit and replacecommit completed after the last synced instant.
- Dropped: the partitions a `DELETE_PARTITION` replacecommit emptied, or a clean deleted whole
  (`isPartitionDeleted`), unless a later write brought them back.

A catalog never synced, or synced to an instant older than the active timeline (archived since),
gets the partitions on storage instead, as Hudi's first sync lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from table.file_group.fs_view import list_partitions
from table.storage.file_io import Storage
from table.timeline.commit_metadata import CommitMetadata, ReplaceCommitMetadata
from table.timeline.instant_avro import deserialize_plan
from table.timeline.timeline import Action, Timeline

DELETE_PARTITION = "DELETE_PARTITION"


@dataclass(frozen=True)
class PartitionChanges:
    """What the catalog must add and drop to catch up; `complete` when `written` is every
    partition of the table (a first sync), so that registered ones not in it are dropped."""

    written: frozenset[str]
    dropped: frozenset[str]
    complete: bool = False


def partition_changes(storage: Storage, timeline: Timeline, synced: str | None) -> PartitionChanges:
    """Partitions changed after the instant `synced` (None: never synced)."""
    writes = timeline.completed_writes()
    if synced is None or not writes or synced < writes[0].timestamp:
        # a dropped partition's directory stays until a clean deletes it: the timeline says it is gone
        gone = _changes_after(timeline, None).dropped
        on_storage = {p for p in list_partitions(storage) if p and p not in gone}
        return PartitionChanges(frozenset(on_storage), gone, complete=True)
    return _changes_after(timeline, synced)


def _changes_after(timeline: Timeline, synced: str | None) -> PartitionChanges:
    writes = timeline.completed_writes()
    written: dict[str, str] = {}  # partition -> latest write after `synced`
    deleted: dict[str, str] = {}  # partition -> latest delete after `synced`
    for instant in writes:
        if synced is not None and instant.timestamp <= synced:
            continue
        content = timeline.read_content(instant)
        if instant.action == Action.REPLACE_COMMIT:
            replace = ReplaceCommitMetadata.from_json(content)
            if replace.operation_type == DELETE_PARTITION:
                deleted.update(dict.fromkeys(replace.partition_to_replace_file_ids, instant.timestamp))
                continue
            written.update(dict.fromkeys(replace.partition_to_replace_file_ids, instant.timestamp))
            metadata: CommitMetadata = replace
        else:
            metadata = CommitMetadata.from_json(content)
        written.update(dict.fromkeys(metadata.partition_to_write_stats, instant.timestamp))
    for clean in timeline.completed(Action.CLEAN):
        if synced is not None and clean.timestamp <= synced:
            continue
        for partition, cleaned in (
            deserialize_plan("HoodieCleanMetadata", timeline.read_content(clean))["partitionMetadata"] or {}
        ).items():
            if cleaned.get("isPartitionDeleted"):
                deleted[partition] = clean.timestamp
    dropped = {p for p, at in deleted.items() if p not in written or written[p] < at}
    return PartitionChanges(frozenset(p for p in written if p and p not in dropped), frozenset(p for p in dropped if p))
