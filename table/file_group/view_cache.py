"""The writer's file-system view: listed once, then kept in step with the timeline.

A table's single writer knows every file its own process writes: its deltacommits' files are in
their write stats, and the services it runs (compaction, clustering, clean) record theirs in the
metadata of the instants they complete. So after one listing at its first commit the writer
follows the timeline instead of listing partitions again, as Apache Hudi's embedded timeline
server keeps one file-system view that it syncs from the timeline incrementally.

The timeline stays the truth. Each view first compares the timeline with the instants the cache
has taken in:

- a state this process wrote (`table.timeline.timeline.JOURNAL`) is applied: a completed
  deltacommit, compaction or replacecommit adds the files of its write stats (and a
  replacecommit retires the groups it names); a completed clean lists again the partitions it
  cleaned; requested and inflight states change no file a view shows;
- any other instant state (an Apache Hudi writer, an offline `streamer` command), a pending
  instant gone without a trace, or a rollback (what it deleted is not in its metadata in a form
  worth trusting) makes it list the table again.

A view built from the cache equals `FileSystemView.build` over a fresh listing, as of the same
timeline; tests hold it to that.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from table.file_group.fs_view import (
    FileGroup,
    FileSystemView,
    PartitionFiles,
    list_partition_files,
    list_table_files,
    replaced_file_groups,
)
from table.storage.file_io import Storage
from table.timeline.commit_metadata import CommitMetadata, ReplaceCommitMetadata, WriteStat
from table.timeline.instant_avro import deserialize_plan
from table.timeline.timeline import JOURNAL, Action, CompletedInstants, Instant, State, Timeline

log = logging.getLogger(__name__)


@dataclass
class SyncResult:
    """What a sync did: listed the table again, or applied these instants (oldest first), of
    which completed replacecommits resized or rewrote `replaced_partitions`."""

    relisted: bool = False
    applied: list[Instant] = field(default_factory=list)
    replaced_partitions: set[str] = field(default_factory=set)


class FileSystemViewCache:
    """The file-system view of a table's single writer (see the module's docstring)."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self._files: dict[str, PartitionFiles] = {}
        self._replaced: dict[tuple[str, str], str] = {}  # (partition, file id) -> replacecommit time
        self._known: dict[tuple[str, Action], State] | None = None  # None: nothing listed yet
        self._groups: dict[str, dict[str, FileGroup]] = {}  # derived as of `_completed`
        self._completed: CompletedInstants | None = None
        self._dirty: dict[str, set[str] | None] = {}  # partition -> its file ids to derive again (None: all)
        self.listings = 0  # how often the table was listed whole: tests and logs read it

    # ---- the views ---------------------------------------------------------------------------

    def view(self, timeline: Timeline, include_replaced: bool = False) -> FileSystemView:
        """The table's file groups as of `timeline`, after syncing with it."""
        self.sync(timeline)
        self._derive(timeline.completed_timestamps())
        if include_replaced:
            return FileSystemView({p: dict(groups) for p, groups in self._groups.items()}, None)
        retired = {i.timestamp for i in timeline.completed(Action.REPLACE_COMMIT)}
        replaced = {key for key, at in self._replaced.items() if at in retired}
        return FileSystemView(
            {p: {f: g for f, g in groups.items() if (p, f) not in replaced} for p, groups in self._groups.items()}, None
        )

    def _derive(self, completed: CompletedInstants) -> None:
        """File groups from the files, again only where the files or the completed instants changed."""
        if completed != self._completed:
            if self._completed is not None and not _only_grew(self._completed, completed):
                self._dirty = dict.fromkeys(self._files)  # an instant left the completed set: all again
            self._completed = completed
        for partition, file_ids in self._dirty.items():
            files = self._files.get(partition)
            if files is None:
                self._groups.pop(partition, None)
                continue
            derived = files.file_groups(completed, file_ids)
            groups = self._groups.setdefault(partition, {})
            for file_id in file_ids if file_ids is not None else list(groups):
                groups.pop(file_id, None)
            groups.update(derived)
        self._dirty = {}

    # ---- keeping in step -----------------------------------------------------------------------

    def sync(self, timeline: Timeline) -> SyncResult:
        """Take in what the timeline shows since the last sync: apply this process's instants,
        list the table again for anything else."""
        current = {i.key: i for i in timeline.instants}
        if self._known is None:
            return self._relist(timeline, "first view")
        changed = []
        for key, instant in current.items():
            if self._known.get(key) == instant.state:
                continue
            if instant.action == Action.ROLLBACK:
                return self._relist(timeline, f"rollback {instant.timestamp}")
            if not JOURNAL.made_here(self.storage, instant):
                return self._relist(timeline, f"{instant.action} {instant.timestamp} ({instant.state}) made elsewhere")
            changed.append(instant)
        for key, state in self._known.items():
            if key not in current and state != State.COMPLETED:  # archival moves completed ones only
                return self._relist(timeline, f"pending {key[1]} {key[0]} gone")
        result = SyncResult(applied=changed)
        for instant in changed:
            result.replaced_partitions |= self._apply(timeline, instant)
        self._known = {key: i.state for key, i in current.items()}
        return result

    def committed(self, instant: Instant, metadata: CommitMetadata) -> None:
        """This writer completed the deltacommit `instant` with `metadata`: its files join the
        view without a read, each added to its group as it is (a log file to the slice it
        extends, a new group's base file as its first slice), so that a commit costs the groups
        it wrote, not all the files they hold."""
        if self._known is None:
            return
        for stat in metadata.write_stats():
            if not stat.path:
                continue
            partition = stat.partition_path or ""
            files = self._files.get(partition)
            if files is None:
                files = self._files[partition] = PartitionFiles(partition)
            files.add(stat.path.rsplit("/", 1)[-1], stat.file_size_in_bytes)
            if not self._extend(files, stat.file_id, stat.path):
                self._mark(partition, stat.file_id)
        self._known[instant.key] = State.COMPLETED

    def _extend(self, files: PartitionFiles, file_id: str, path: str) -> bool:
        """Add a committed file to its derived group; False when the group must be derived again."""
        dirty = self._dirty.get(files.partition_path, set())
        groups = self._groups.get(files.partition_path)
        if dirty is None or file_id in dirty:
            return False
        group = (groups or {}).get(file_id)
        log_file = files.log_files.get(path)
        if log_file is not None and group is not None:
            group.add_log_file(log_file)
            return True
        base_file = files.base_files.get(path)
        if base_file is not None and group is None:
            group = FileGroup(files.partition_path, file_id)
            group.slice(base_file.name.instant).base_file = base_file
            self._groups.setdefault(files.partition_path, {})[file_id] = group
            return True
        return False

    def _mark(self, partition: str, file_id: str) -> None:
        dirty = self._dirty.get(partition, set())
        if dirty is not None:
            dirty.add(file_id)
            self._dirty[partition] = dirty

    def _apply(self, timeline: Timeline, instant: Instant) -> set[str]:
        """Take in one instant state this process wrote; the partitions a replacecommit replaced groups in."""
        if instant.state != State.COMPLETED:
            return set()  # a plan requested or a write begun: no file of it is seen before it completes
        if instant.action in (Action.DELTA_COMMIT, Action.COMMIT):
            self._add_files(CommitMetadata.from_json(timeline.read_content(instant)).write_stats())
        elif instant.action == Action.REPLACE_COMMIT:
            metadata = ReplaceCommitMetadata.from_json(timeline.read_content(instant))
            self._add_files(metadata.write_stats())
            for partition, file_ids in metadata.partition_to_replace_file_ids.items():
                self._replaced.update({(partition, f): instant.timestamp for f in file_ids})
            return set(metadata.partition_to_replace_file_ids)
        elif instant.action == Action.CLEAN:
            cleaned = deserialize_plan("HoodieCleanMetadata", timeline.read_content(instant))
            for partition in cleaned.get("partitionMetadata") or {}:
                if partition in self._files:
                    self._files[partition] = list_partition_files(self.storage, partition)
                    self._dirty[partition] = None
        return set()

    def _add_files(self, stats: list[WriteStat]) -> None:
        for stat in stats:
            if not stat.path:
                continue
            partition = stat.partition_path or ""
            files = self._files.get(partition)
            if files is None:
                files = self._files[partition] = PartitionFiles(partition)
            name = stat.path.rsplit("/", 1)[-1]
            files.add(name, stat.file_size_in_bytes)
            self._mark(partition, stat.file_id)

    def _relist(self, timeline: Timeline, why: str) -> SyncResult:
        self._files = list_table_files(self.storage)
        self._replaced = replaced_file_groups(timeline)
        self._groups = {}
        self._completed = None
        self._dirty = dict.fromkeys(self._files)
        self._known = {i.key: i.state for i in timeline.instants}
        self.listings += 1
        log.debug("%s: file-system view listed again (%s): %d partitions", self.storage.base_uri, why, len(self._files))
        return SyncResult(relisted=True)


def _only_grew(before: CompletedInstants, after: CompletedInstants) -> bool:
    """Whether every instant completed before still is, archived ones included (new ones
    completing change only the groups whose files they wrote, which the cache marks when it
    applies them)."""
    return before.up_to_time == after.up_to_time and all(t in after for t in before.active - after.active)
