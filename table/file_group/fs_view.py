"""File groups and file slices of a table as of an instant.

A file group is one bucket's files in one partition. Its file slices are keyed by base instant:
the base file written at that instant (by the first write or a compaction) plus the log files
appended to it. Which slice a reader sees follows the timeline: only base files of completed
instants count, and log blocks are filtered by instant when read (see `table.read.reader`).

A log file joins the slice with the greatest completed base instant at or before its own base
instant, as hudi-rs does for table version 6. While a compaction at c is pending, writes start
log files with base instant c before c's base file exists (the "phantom" base file); until the
compaction completes those logs belong to the previous slice, so its reader sees them.

A completed replacecommit (clustering, bucket resizing) retires the file groups it names in
`partitionToReplaceFileIds`: from its instant on they are out of the view, and the groups it
wrote take their place. Until then the new groups have no completed base file and stay unseen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from table.storage.file_io import Storage
from table.storage.layout import (
    BASE_FILE_EXTENSION,
    LOG_FILE_MARK,
    METADATA_DIR,
    PARTITION_METADATA_FILE,
    BaseFileName,
    LogFileName,
    partition_file_path,
)
from table.timeline.commit_metadata import ReplaceCommitMetadata
from table.timeline.timeline import Action, CompletedInstants, Timeline


@dataclass(frozen=True)
class BaseFile:
    path: str
    name: BaseFileName
    size: int


@dataclass(frozen=True)
class LogFile:
    path: str
    name: LogFileName
    size: int


@dataclass
class FileSlice:
    partition_path: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None = None
    log_files: list[LogFile] = field(default_factory=list)

    @classmethod
    def of_files(
        cls,
        storage: Storage,
        partition_path: str,
        file_id: str,
        base_instant: str,
        base_file: str | None,
        log_files: tuple[str, ...] | list[str],
    ) -> FileSlice:
        """A slice of exactly the named files (as a service plan names them), sized from storage."""

        def path(name: str) -> str:
            return partition_file_path(partition_path, name)

        base = (
            BaseFile(path(base_file), BaseFileName.of(base_file), storage.size(path(base_file))) if base_file else None
        )
        logs = [LogFile(path(n), LogFileName.of(n), storage.size(path(n))) for n in log_files]
        return cls(partition_path, file_id, base_instant, base, logs)

    def sorted_log_files(self) -> list[LogFile]:
        """In write order, as Hudi's log file comparator: base instant, version, write token."""
        return sorted(self.log_files, key=lambda f: (f.name.base_instant, f.name.version, f.name.write_token))

    @property
    def total_size(self) -> int:
        return (self.base_file.size if self.base_file else 0) + sum(f.size for f in self.log_files)


@dataclass
class FileGroup:
    partition_path: str
    file_id: str
    slices: dict[str, FileSlice] = field(default_factory=dict)
    #: base instants of committed slices of log files only: Hudi's writers start a file group of
    #: the consistent-hashing (or simple bucket) index on a merge-on-read table with log files, whose
    #: base instant is the deltacommit that wrote them
    log_only_starts: set[str] = field(default_factory=set)
    #: the highest log version per base instant, kept as logs are added (`add_log_file`)
    _log_versions: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def slice(self, base_instant: str) -> FileSlice:
        if base_instant not in self.slices:
            self.slices[base_instant] = FileSlice(self.partition_path, self.file_id, base_instant)
        return self.slices[base_instant]

    def is_committed(self, file_slice: FileSlice) -> bool:
        """A slice starts with a base file of a completed instant, or with log files whose base
        instant completed (Hudi's `isFileSliceCommitted`); other logs belong to a pending plan."""
        return file_slice.base_file is not None or file_slice.base_instant in self.log_only_starts

    def latest_slice(self) -> FileSlice | None:
        """The newest committed slice: the one reads and writes go to. (Loops written out: a
        writer asks this of every bucket at every commit.)"""
        return self._latest_committed(None)

    def next_log_version(self, base_instant: str) -> int:
        """Versions count per base instant, whichever slice the logs are read with."""
        return self._log_versions.get(base_instant, 0) + 1

    def add_log_file(self, log: LogFile) -> None:
        """Attach a log to the newest committed slice at or before its base instant (a log of a
        pending compaction's or resize's instant joins the slice before it); a log older than every
        committed slice keeps a slice of its own (no reader reads it)."""
        name = log.name
        found = self._latest_committed(name.base_instant)
        (found or self.slice(name.base_instant)).log_files.append(log)
        if name.version > self._log_versions.get(name.base_instant, 0):
            self._log_versions[name.base_instant] = name.version

    def _latest_committed(self, at_most: str | None) -> FileSlice | None:
        """The committed slice with the greatest base instant (at or before `at_most`, if given)."""
        found = None
        for start, file_slice in self.slices.items():
            if (
                (at_most is None or start <= at_most)
                and (found is None or start > found.base_instant)
                and (file_slice.base_file is not None or start in self.log_only_starts)
            ):
                found = file_slice
        return found


@dataclass
class PartitionFiles:
    """The data files of one partition directory, parsed: base files and log files by path.
    Files of every instant, completed or not: a view as of a timeline keeps what it sees."""

    partition_path: str
    base_files: dict[str, BaseFile] = field(default_factory=dict)
    log_files: dict[str, LogFile] = field(default_factory=dict)

    def add(self, name: str, size: int) -> None:
        """Take a file of the partition by its name; other files (not Hudi's data files) are ignored."""
        path = partition_file_path(self.partition_path, name)
        if name.endswith(BASE_FILE_EXTENSION):
            parsed = BaseFileName.parse(name)
            if parsed is not None:
                self.base_files[path] = BaseFile(path, parsed, size)
        elif LOG_FILE_MARK in name:
            log_name = LogFileName.parse(name)
            if log_name is not None:
                self.log_files[path] = LogFile(path, log_name, size)

    def remove(self, path: str) -> None:
        self.base_files.pop(path, None)
        self.log_files.pop(path, None)

    def file_groups(self, completed: CompletedInstants, file_ids: set[str] | None = None) -> dict[str, FileGroup]:
        """The file groups of the files (those of `file_ids` only, when given), as `completed`
        makes them: base files of completed instants start slices; each log file joins the
        newest committed slice at or before its base instant."""
        groups: dict[str, FileGroup] = {}
        for base in self.base_files.values():
            if base.name.instant not in completed or (file_ids is not None and base.name.file_id not in file_ids):
                continue
            group = groups.setdefault(base.name.file_id, FileGroup(self.partition_path, base.name.file_id))
            group.slice(base.name.instant).base_file = base
        logs = [f for f in self.log_files.values() if file_ids is None or f.name.file_id in file_ids]
        # once every base file is known; oldest first, so a slice of log files only exists before the
        # logs of a pending plan join it
        for log in sorted(logs, key=lambda f: (f.name.base_instant, f.name.version, f.name.write_token)):
            group = groups.setdefault(log.name.file_id, FileGroup(self.partition_path, log.name.file_id))
            base_instant = log.name.base_instant
            if base_instant in completed and (
                base_instant not in group.slices or group.slices[base_instant].base_file is None
            ):
                group.log_only_starts.add(base_instant)
            group.add_log_file(log)
        return groups


class FileSystemView:
    """File groups per partition, restricted to base files of completed instants up to `as_of`."""

    def __init__(self, partitions: dict[str, dict[str, FileGroup]], as_of: str | None):
        self._partitions = partitions
        self.as_of = as_of

    @staticmethod
    def build(
        storage: Storage,
        timeline: Timeline,
        partition_paths: list[str] | None = None,
        as_of: str | None = None,
        include_replaced: bool = False,
    ) -> FileSystemView:
        """Listing each partition once. `include_replaced` keeps the groups completed
        replacecommits retired: only the cleaner, which deletes them, wants those."""
        completed = timeline.completed_timestamps()
        if as_of is not None:
            completed = completed.up_to(as_of)
        if partition_paths is None:
            listed = list_table_files(storage)
        else:
            listed = {p: list_partition_files(storage, p) for p in partition_paths}
        replaced = {} if include_replaced else replaced_file_groups(timeline, as_of)
        partitions = {}
        for p, files in listed.items():
            groups = files.file_groups(completed)
            partitions[p] = {f: g for f, g in groups.items() if (p, f) not in replaced}
        return FileSystemView(partitions, as_of)

    def partition_paths(self) -> list[str]:
        return sorted(self._partitions)

    def file_groups(self, partition_path: str) -> dict[str, FileGroup]:
        return self._partitions.get(partition_path, {})

    def all_file_groups(self) -> list[FileGroup]:
        return [fg for groups in self._partitions.values() for fg in groups.values()]

    def latest_slices(self) -> list[FileSlice]:
        return [s for fg in self.all_file_groups() if (s := fg.latest_slice()) is not None]


def replaced_file_groups(timeline: Timeline, as_of: str | None = None) -> dict[tuple[str, str], str]:
    """(partition path, file id) -> instant of the completed replacecommit (up to `as_of`) that
    retired the group."""
    replaced: dict[tuple[str, str], str] = {}
    for commit in timeline.completed(Action.REPLACE_COMMIT):
        if as_of is not None and commit.timestamp > as_of:
            continue
        metadata = ReplaceCommitMetadata.from_json(timeline.read_content(commit))
        for partition, file_ids in metadata.partition_to_replace_file_ids.items():
            replaced.update({(partition, file_id): commit.timestamp for file_id in file_ids})
    return replaced


def list_partitions(storage: Storage) -> list[str]:
    """Partition paths: directories holding a partition metadata file ('' for the root)."""
    return sorted(list_table_files(storage))


def list_table_files(storage: Storage) -> dict[str, PartitionFiles]:
    """The files of every partition (a directory holding a partition metadata file; '' for the
    root), each directory of the table listed once."""
    found: dict[str, PartitionFiles] = {}

    def walk(rel: str) -> None:
        entries = storage.list_dir(rel)
        if any(e.name == PARTITION_METADATA_FILE for e in entries):
            files = found[rel] = PartitionFiles(rel)
            for e in entries:
                if not e.is_dir:
                    files.add(e.name, e.size)
        for e in entries:
            if e.is_dir and not (rel == "" and e.name == METADATA_DIR) and not e.name.startswith("."):
                walk(e.path)

    walk("")
    return found


def list_partition_files(storage: Storage, partition_path: str) -> PartitionFiles:
    """The files of one partition directory, listed."""
    files = PartitionFiles(partition_path)
    for entry in storage.list_dir(partition_path):
        if not entry.is_dir:
            files.add(entry.name, entry.size)
    return files
