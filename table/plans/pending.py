"""What is pending on the timeline: the table services' plans requested or inflight, oldest first.

Executors run these instants; writers route around the file groups they hold (a write to a group
a compaction plans starts a new slice, a bucket a clustering resizes is written twice), and
planners and the cleaner leave those groups alone. Every answer to "what is pending" comes from
here. A replacecommit is a clustering only when its plan is one: Hudi's insert overwrite writes
replacecommits too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from table.plans.clustering import ClusteringPlan, read_clustering_plan
from table.plans.compaction import COMPACTION, CompactionOperation, read_compaction_plan
from table.timeline.timeline import Action, Timeline

if TYPE_CHECKING:
    from table.mor_table import MorTable


def pending_compactions(table: MorTable, timeline: Timeline | None = None) -> list[str]:
    """Instants of the requested or inflight compactions: what executors run."""
    return [i.timestamp for i in (timeline or table.timeline()).pending(COMPACTION)]


def pending_clusterings(table: MorTable, timeline: Timeline | None = None) -> list[str]:
    """Instants of the requested or inflight clustering plans."""
    return [p.instant for p in pending_clustering_plans(timeline or table.timeline())]


def pending_cleans(table: MorTable, timeline: Timeline | None = None) -> list[str]:
    """Instants of the requested or inflight cleans."""
    return [i.timestamp for i in (timeline or table.timeline()).pending(Action.CLEAN)]


def pending_compaction_plans(timeline: Timeline) -> dict[str, list[CompactionOperation]]:
    """Each pending compaction's planned slices, by instant."""
    return {
        pending.timestamp: read_compaction_plan(timeline, pending.timestamp)[0]
        for pending in timeline.pending(COMPACTION)
    }


def pending_clustering_plans(timeline: Timeline) -> list[ClusteringPlan]:
    """Plans of the requested or inflight replacecommits that are clusterings."""
    plans = (read_clustering_plan(timeline, i.timestamp) for i in timeline.pending(Action.REPLACE_COMMIT))
    return [p for p in plans if p is not None]


def pending_compaction_file_groups(timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition path, file id) -> instant of the pending compaction that plans the group.

    A write to such a group starts the slice at that instant, not the latest completed one.
    """
    return {
        (op.partition_path, op.file_id): instant
        for instant, operations in pending_compaction_plans(timeline).items()
        for op in operations
    }


def pending_clustering_file_groups(timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, file id) -> instant of the pending plan rewriting the group."""
    return {key: plan.instant for plan in pending_clustering_plans(timeline) for key in plan.file_groups()}
