"""The table services, called one way.

Each service that plans answers three calls:

- `schedule_<service>(writer, policy)`: on the writer, holding its lease, a plan is written to
  the timeline; its instant, or None when there is nothing to do;
- `execute_<service>(table, instant)`: any process runs a pending plan to completion; a retry
  after a crash finishes it;
- `pending_<service>s(table)`: the instants of the plans requested or inflight, oldest first
  (all answered by `table.plans.pending`).

Archival plans nothing: `archive(table, policy)` is its execute step, run by the writer's
process. Rolling back a pending clustering takes the writer as scheduling does. `clean(writer,
policy)` finishes pending cleans, then schedules and executes one.
"""

from table.plans.pending import pending_cleans, pending_clusterings, pending_compactions
from table.services.archive import ArchivePolicy, ArchiveResult, archive, read_archived_instants
from table.services.clean import CleanPolicy, CleanResult, clean, execute_clean, schedule_clean
from table.services.clustering import (
    ClusteringPolicy,
    ClusteringResult,
    execute_clustering,
    rollback_clustering,
    schedule_clustering,
)
from table.services.compaction import CompactionResult, CompactionStrategy, execute_compaction, schedule_compaction

__all__ = [
    "ArchivePolicy",
    "ArchiveResult",
    "CleanPolicy",
    "CleanResult",
    "ClusteringPolicy",
    "ClusteringResult",
    "CompactionResult",
    "CompactionStrategy",
    "archive",
    "clean",
    "execute_clean",
    "execute_clustering",
    "execute_compaction",
    "pending_cleans",
    "pending_clusterings",
    "pending_compactions",
    "read_archived_instants",
    "rollback_clustering",
    "schedule_clean",
    "schedule_clustering",
    "schedule_compaction",
]
