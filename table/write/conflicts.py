"""Optimistic concurrency's rule, Hudi's (`SimpleConcurrentFileWritesConflictResolutionStrategy`):
a write conflicts with another write, completed after it began, that touched one of the same file
groups. A bucket index makes this exact: a record's file group follows from its key.

What counts as touching a file group: the groups a deltacommit or commit wrote (its write
stats); the groups of a compaction or clustering (resize) planned since the write began, whether
or not it has completed since: the write's log files went to slices that plan does not know of.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from table.plans.clustering import read_clustering_plan
from table.plans.compaction import read_compaction_plan
from table.timeline.commit_metadata import CommitMetadata, ReplaceCommitMetadata, WriteStat
from table.timeline.timeline import Action, Instant, State, Timeline

FileGroup = tuple[str, str]  # (partition path, file id)

_WRITES = (Action.DELTA_COMMIT, Action.COMMIT)
_PLANS = (Action.COMPACTION, Action.REPLACE_COMMIT)


@dataclass(frozen=True)
class Conflict:
    other: Instant
    file_groups: list[FileGroup]


def written_file_groups(stats: Iterable[WriteStat]) -> set[FileGroup]:
    return {(s.partition_path or "", s.file_id) for s in stats}


def first_conflict(began: Timeline, now: Timeline, ours: set[FileGroup], own_instant: str) -> Conflict | None:
    """The first write that completed, or compaction or clustering planned, between `began` (the
    timeline as this write began) and `now` in a file group of `ours`; None if none did. A plan
    already there when the write began is no conflict: the write's routing took it in (a new slice
    for a compaction's groups, dual writes for a resize's)."""
    seen = {(i.timestamp, i.action, i.state) for i in began.instants}
    planned_before = {(i.timestamp, i.action) for i in began.instants if i.action in _PLANS}
    for instant in now.instants:
        if instant.timestamp == own_instant or (instant.timestamp, instant.action, instant.state) in seen:
            continue
        if instant.action in _PLANS:
            touched = set() if (instant.timestamp, instant.action) in planned_before else _planned(now, instant)
        elif instant.state == State.COMPLETED and instant.action in _WRITES:
            touched = written_file_groups(CommitMetadata.from_json(now.read_content(instant)).write_stats())
        else:
            continue
        shared = sorted(ours & touched)
        if shared:
            return Conflict(instant, shared)
    return None


def _planned(timeline: Timeline, instant: Instant) -> set[FileGroup]:
    """The file groups a compaction or a clustering (resize) plans to rewrite."""
    if instant.action == Action.COMPACTION:
        operations, _ = read_compaction_plan(timeline, instant.timestamp)
        return {(op.partition_path, op.file_id) for op in operations}
    plan = read_clustering_plan(timeline, instant.timestamp)
    if plan is not None:
        return plan.file_groups()
    if instant.state == State.COMPLETED:  # a replacecommit without a clustering plan (Hudi's insert_overwrite)
        replace = ReplaceCommitMetadata.from_json(timeline.read_content(instant))
        retired = {(p, f) for p, ids in replace.partition_to_replace_file_ids.items() for f in ids}
        return written_file_groups(replace.write_stats()) | retired
    return set()
