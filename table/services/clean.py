"""Cleaning: deleting the files that no retained commit needs any more.

Hudi's CleanPlanner and CleanActionExecutor, run on the writer between batches:

- `schedule_clean` writes `<t>.clean.requested`, a HoodieCleanerPlan naming every file to delete
  (full paths, as Hudi stores them), and only when there is one;
- `execute_clean` moves it to inflight (same plan), deletes the files in plan order, missing
  ones included (a retried clean finishes what a crashed one started), then completes
  `<t>.clean` with a HoodieCleanMetadata.

What a plan names, per file group:

- keep_latest_commits: E is the earliest of the last `retained` completed writes (never after
  the earliest pending one). Slices with a base instant at or before E go, except the group's
  latest slice and its newest slice at or before E, which a read as of E uses. A replaced file group goes
  whole once its replacecommit is before E.
- keep_latest_file_versions: all but the newest `retained` slices go; replaced groups go whole.
- Never: a slice a pending compaction plan compacts, a group a pending clustering plan rewrites.

Besides, each partition's consistent-hashing metadata older than its latest committed version
goes (unless its instant is pending), listed under that partition.

A slice's log files are listed before its base file, so that whenever a clean stops, every log
file left still has its base file: readers never meet a slice of logs alone but a pending
compaction's (hudi-rs drops or refuses such logs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from table import failpoints
from table.config.choices import CleanPolicyKind
from table.errors import InvalidRequestError, TimelineStateError
from table.file_group.fs_view import FileGroup, FileSlice, replaced_file_groups
from table.index import consistent_hashing as ring
from table.plans.pending import pending_cleans, pending_clustering_file_groups, pending_compaction_plans
from table.storage.file_io import Storage
from table.timeline.instant_avro import deserialize_plan, serialize_plan
from table.timeline.timeline import WRITE_ACTIONS, Action, CompletedInstants, Instant, State, Timeline

if TYPE_CHECKING:
    from table.mor_table import MorTable
    from table.write.writer import TableWriter

CLEAN = Action.CLEAN
PLAN_SCHEMA = "HoodieCleanerPlan"
METADATA_SCHEMA = "HoodieCleanMetadata"
PLAN_VERSION = 2  # CleanPlanner.LATEST_CLEAN_PLAN_VERSION
METADATA_VERSION = 2  # CleanerUtils.CLEAN_METADATA_VERSION_2


@dataclass(frozen=True)
class CleanPolicy:
    """Which file slices to keep: those the last `retained` commits read, or the newest
    `retained` slices of each file group."""

    kind: CleanPolicyKind = CleanPolicyKind.KEEP_LATEST_COMMITS
    retained: int = 10

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", CleanPolicyKind.parse(self.kind, "clean policy"))
        if self.retained < 1:
            raise InvalidRequestError(f"a clean policy retains at least 1, not {self.retained}")


@dataclass(frozen=True)
class CleanResult:
    instant: str
    files_deleted: int
    earliest_commit_to_retain: str | None

    def __str__(self) -> str:
        retained = f", commits from {self.earliest_commit_to_retain} retained" if self.earliest_commit_to_retain else ""
        return f"clean {self.instant}: {self.files_deleted} file(s) deleted{retained}"


@dataclass(frozen=True)
class _Retention:
    """What the timeline says must stay, besides each group's latest slice."""

    policy: CleanPolicy
    earliest: Instant | None  # keep_latest_commits: the earliest commit to retain
    compacting: frozenset[tuple[str, str, str]]  # (partition, file id, base instant) in pending compaction plans
    clustering: frozenset[tuple[str, str]]  # (partition, file id) in pending clustering plans
    replaced: dict[tuple[str, str], str]  # (partition, file id) -> time of the completed replacecommit

    def slices_to_delete(self, group: FileGroup) -> list[FileSlice]:
        key = (group.partition_path, group.file_id)
        newest_first = sorted(group.slices.values(), key=lambda s: s.base_instant, reverse=True)
        if key in self.clustering:
            return []
        if key in self.replaced:
            return newest_first if self._replacement_is_old(self.replaced[key]) else []
        if self.policy.kind == CleanPolicyKind.KEEP_LATEST_FILE_VERSIONS:
            old = newest_first[self.policy.retained :]
        elif self.earliest is None:
            return []
        else:  # all up to E but the newest of them, which a read as of E uses
            old = [s for s in newest_first if s.base_instant <= self.earliest.timestamp][1:]
        return [s for s in old if (*key, s.base_instant) not in self.compacting]

    def _replacement_is_old(self, replaced_at: str) -> bool:
        if self.policy.kind == CleanPolicyKind.KEEP_LATEST_FILE_VERSIONS:
            return True
        return self.earliest is not None and replaced_at < self.earliest.timestamp


# -- the retention window ------------------------------------------------------------------------


def earliest_commit_to_retain(timeline: Timeline, retained: int) -> Instant | None:
    """The earliest of the last `retained` completed writes, or the last completed write before
    the earliest pending one if that is earlier (CleanerUtils.getEarliestCommitToRetain); None
    while there are no more than `retained`."""
    completed = timeline.completed_writes()
    if len(completed) <= retained:
        return None
    candidate = completed[len(completed) - retained]
    pending = timeline.pending(*WRITE_ACTIONS, Action.COMPACTION)
    if pending and pending[0].timestamp < candidate.timestamp:
        before = [i for i in completed if i.timestamp < pending[0].timestamp]
        return before[-1] if before else None
    return candidate


def _retention(timeline: Timeline, policy: CleanPolicy) -> _Retention:
    keeps_commits = policy.kind == CleanPolicyKind.KEEP_LATEST_COMMITS
    earliest = earliest_commit_to_retain(timeline, policy.retained) if keeps_commits else None
    compacting = {
        (op.partition_path, op.file_id, op.base_instant)
        for operations in pending_compaction_plans(timeline).values()
        for op in operations
    }
    return _Retention(
        policy,
        earliest,
        frozenset(compacting),
        frozenset(pending_clustering_file_groups(timeline)),
        replaced_file_groups(timeline),
    )


# -- planning ------------------------------------------------------------------------------------


def schedule_clean(writer: TableWriter, policy: CleanPolicy) -> str | None:
    """Plan a clean; its instant, or None (nothing written) when there is nothing to delete or
    a clean is already pending (one at a time). The files come from the writer's view, and only
    the partitions whose ring a resize replaced are listed for stale hashing metadata."""
    writer.check_held()
    table = writer.table
    timeline = table.timeline()
    if pending_cleans(table, timeline):
        return None
    retention = _retention(timeline, policy)
    completed = timeline.completed_timestamps()
    view = writer.file_system_view(timeline, include_replaced=True)
    resized = {p for p, m in writer.rings(timeline).items() if m.instant != ring.INIT_INSTANT_TS}
    storage = table.storage
    to_delete: dict[str, list[str]] = {}
    for partition in sorted(set(view.partition_paths()) | resized):
        paths = [
            path
            for group in view.file_groups(partition).values()
            for old in retention.slices_to_delete(group)
            for path in _slice_paths(old)
        ]
        if partition in resized:
            paths += _stale_hashing_metadata(storage, partition, completed)
        if paths:
            to_delete[partition] = [storage.full_path(p) for p in paths]
    if not to_delete:
        return None
    last_write = timeline.last_completed_write()
    earliest = retention.earliest
    plan: dict[str, Any] = {
        "earliestInstantToRetain": (
            {"timestamp": earliest.timestamp, "action": earliest.action, "state": "COMPLETED"} if earliest else None
        ),
        "lastCompletedCommitTimestamp": last_write.timestamp if last_write else "",
        "policy": policy.kind.hudi_name,
        "filesToBeDeletedPerPartition": {},
        "version": PLAN_VERSION,
        "filePathsToBeDeletedPerPartition": {
            p: [{"filePath": f, "isBootstrapBaseFile": False} for f in files] for p, files in to_delete.items()
        },
        "partitionsToBeDeleted": [],
        "extraMetadata": {},
    }
    instant = Instant(timeline.new_instant_time(), CLEAN, State.REQUESTED)
    timeline.create_requested(instant, serialize_plan(PLAN_SCHEMA, plan))
    failpoints.reach("clean.requested")
    return instant.timestamp


def _slice_paths(file_slice: FileSlice) -> list[str]:
    """Log files first, then the base file."""
    paths = [log.path for log in file_slice.sorted_log_files()]
    return [*paths, file_slice.base_file.path] if file_slice.base_file else paths


def _stale_hashing_metadata(storage: Storage, partition: str, completed: CompletedInstants) -> list[str]:
    """Hashing metadata files and commit markers older than the latest committed version, except
    those of pending instants."""
    latest = ring.load_latest(storage, partition, completed.active, repair=False)  # as the writer loads it
    if latest is None:
        return []
    versions, markers = ring.list_versions(storage, partition)
    paths = []
    for instant in sorted(set(versions) | markers):
        if instant >= latest.instant or instant in completed.pending:
            continue
        if instant in markers:
            paths.append(ring.commit_marker_path(partition, instant))
        if instant in versions:
            paths.append(ring.metadata_path(partition, instant))
    return paths


# -- execution -----------------------------------------------------------------------------------


def execute_clean(table: MorTable, instant: str) -> CleanResult:
    """Delete the files the pending clean at `instant` names and complete it; ValueError when no
    clean is pending there."""
    storage = table.storage
    timeline = table.timeline()
    requested = Instant(instant, CLEAN, State.REQUESTED)
    if not (timeline.contains(requested) or timeline.contains(requested.inflight())):
        raise TimelineStateError(f"no pending clean at {instant} in {table.base_uri}")
    content = timeline.read_content(requested)
    if timeline.contains(requested):
        timeline.transition_to_inflight(requested, content)
    plan = deserialize_plan(PLAN_SCHEMA, content)
    started = time.monotonic()
    deleted: dict[str, list[str]] = {}
    for partition, files in (plan["filePathsToBeDeletedPerPartition"] or {}).items():
        for file in files:
            storage.delete(_relative_path(storage, file["filePath"]))  # gone already: a retry
            deleted.setdefault(partition, []).append(file["filePath"].rsplit("/", 1)[-1])
    failpoints.reach("clean.files_deleted")
    earliest = (plan["earliestInstantToRetain"] or {}).get("timestamp") or ""
    metadata = {
        "policy": plan["policy"],
        "startCleanTime": instant,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": sum(len(names) for names in deleted.values()),
        "earliestCommitToRetain": earliest,
        "lastCompletedCommitTimestamp": plan["lastCompletedCommitTimestamp"],
        "partitionMetadata": {
            p: {
                "partitionPath": p,
                "policy": plan["policy"],
                "deletePathPatterns": names,
                "successDeleteFiles": names,  # deleted by this attempt or an earlier one
                "failedDeleteFiles": [],
                "isPartitionDeleted": False,
            }
            for p, names in deleted.items()
        },
        "version": METADATA_VERSION,
        "bootstrapPartitionMetadata": {},
    }
    timeline.complete(requested.inflight(), serialize_plan(METADATA_SCHEMA, metadata))
    failpoints.reach("clean.completed")
    return CleanResult(instant, metadata["totalFilesDeleted"], earliest or None)


def _relative_path(storage: Storage, full_path: str) -> str:
    root = storage.full_path()
    if not full_path.startswith(f"{root}/"):
        raise InvalidRequestError(f"{full_path} is not under the table at {root}")
    return full_path[len(root) + 1 :]


# -- both, and recovery --------------------------------------------------------------------------


def finish_pending_cleans(table: MorTable) -> list[CleanResult]:
    """Execute the cleans a crash left pending: a clean is finished from its plan, never undone."""
    return [execute_clean(table, instant) for instant in pending_cleans(table)]


def clean(writer: TableWriter, policy: CleanPolicy) -> CleanResult | None:
    """Finish pending cleans, then plan and execute a new one; its result, None when there was
    nothing to delete."""
    finish_pending_cleans(writer.table)
    instant = schedule_clean(writer, policy)
    return execute_clean(writer.table, instant) if instant else None
